"""What Slurm says about a job, asked through its own clients (``squeue``, ``sacct``,
``scontrol``), never through a library of ours: argument lists, a timeout, and no exception for a
missing client or an error (``None`` and the reason instead), like the other samplers.

- :func:`job_state` asks ``squeue`` (which keeps a finished job for ``MinJobAge``, 300 s by
  default, with its final state), then ``sacct`` (the accounting database, slurmdbd), then
  ``sacct -c`` (the job completion log, ``jobcomp/filetxt``: clusters without slurmdbd, where
  plain ``sacct`` fails with "accounting storage is disabled").
- :func:`hostnames` expands a host list (``gpu[01-04,07]``) with ``scontrol show hostnames``
  and falls back to :func:`expand_hostlist` where there is no ``scontrol``.
- :func:`node_addr` is a node's ``NodeAddr`` (``scontrol show node``): node names need not be
  host names (on a one-host test cluster ``n1`` does not resolve), so nothing is keyed by hostname.

Clients find the cluster through ``SLURM_CONF`` when its configuration is not in ``/etc``; it is
inherited from the environment as it is.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass

TIMEOUT_S = 20.0
#: states in which the job still holds (or waits for) its nodes
LIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
        "SPECIAL_EXIT",
    }
)
#: what each final state means, in words
ENDED = {
    "COMPLETED": "the job's script exited 0",
    "FAILED": "the job's script exited non-zero",
    "CANCELLED": "cancelled (scancel)",
    "TIMEOUT": "the job reached its time limit",
    "PREEMPTED": "preempted by a higher-priority job",
    "NODE_FAIL": "a node of the job failed",
    "BOOT_FAIL": "a node failed to boot",
    "DEADLINE": "the job reached its deadline",
    "OUT_OF_MEMORY": "the job went over its memory (Slurm's OOM)",
    "REQUEUED": "the job was requeued: this attempt ended, the next one runs in a run of its own",
}
_SQUEUE_FMT = "%i|%T|%r|%S|%N|%l|%M"
_SACCT_FIELDS = "JobIDRaw,State,ExitCode,Start,End,NodeList,Timelimit"


@dataclass(frozen=True)
class JobState:
    """One job as Slurm reports it. ``state``: Slurm's (``PENDING``, ``RUNNING``, ``TIMEOUT``, ...;
    ``CANCELLED by 0`` is ``CANCELLED``); ``reason``: why it pends (``Resources``, ``Priority``) or
    ended; ``start``: the (expected, for a pending job) start time as Slurm prints it, ``None`` when
    unknown; ``source``: ``squeue``, ``sacct`` or ``sacct -c``."""

    job_id: str
    state: str
    reason: str | None = None
    start: str | None = None
    nodes: str | None = None
    time_limit: str | None = None
    elapsed: str | None = None
    exit_code: str | None = None
    source: str = "squeue"
    #: an attempt of a requeued job that is over (the job itself goes on): never live
    attempt_over: bool = False

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES and not self.attempt_over

    def cause(self) -> str:
        """``TIMEOUT: the job reached its time limit (1:00)``: the end in words."""
        words = ENDED.get(self.state, self.state.lower())
        if self.state == "TIMEOUT" and self.time_limit:
            words += f" ({self.time_limit})"
        return f"{self.state}: {words}"

    def label(self) -> str:
        """``PENDING (Resources), start 2026-11-25T22:01:29`` / ``RUNNING on n[1-2]`` / the state."""
        if self.state == "PENDING":
            start = f", start {self.start}" if self.start else ", start unknown"
            return f"PENDING ({self.reason or 'None'}){start}"
        if self.state == "RUNNING":
            return f"RUNNING on {self.nodes}" if self.nodes else "RUNNING"
        return self.state


class SlurmUnavailable(Exception):
    """No Slurm client here, or it failed: the message is the one line to show."""


def have_slurm() -> bool:
    return shutil.which("squeue") is not None


def check_controller() -> None:
    """:class:`SlurmUnavailable` (its one line) unless a Slurm client here reaches the cluster's
    controller (``scontrol ping``): no client, no configuration (``SLURM_CONF``), the controller down."""
    text = _run(["scontrol", "ping"])
    if "DOWN" in text and "UP" not in text:
        raise SlurmUnavailable(f"scontrol ping: {text.strip().splitlines()[-1] if text.strip() else 'DOWN'}")


def _run(argv: list[str], timeout: float = TIMEOUT_S) -> str:
    if shutil.which(argv[0]) is None:
        raise SlurmUnavailable(f"{argv[0]} not found (no Slurm client on this machine)")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SlurmUnavailable(f"{argv[0]}: {e}") from None
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise SlurmUnavailable(f"{' '.join(argv[:2])}: {lines[-1] if lines else f'exit {proc.returncode}'}")
    return proc.stdout


def _none(value: str) -> str | None:
    value = value.strip()
    return None if value in ("", "N/A", "None", "(null)", "Unknown") else value


def _limit(value: str) -> str | None:
    """A time limit as squeue prints it (``1:00``, ``1:30:00``, ``2-00:00:00``): sacct says the same
    limit as ``00:01:00``, its job completion log as minutes (``1``); other words (``UNLIMITED``,
    ``Partition_Limit``) stay as they are."""
    text = _none(value)
    if text is None:
        return None
    days, _, rest = text.rpartition("-")
    parts = rest.split(":")
    if not all(p.isdigit() for p in parts) or (days and not days.isdigit()) or len(parts) > 3:
        return text
    n = [int(p) for p in parts]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        seconds = int(days) * 86400 + sum(x * unit for x, unit in zip(n, (3600, 60, 1)))
    elif len(n) == 1:  # MM
        seconds = n[0] * 60
    else:  # MM:SS, HH:MM:SS
        seconds = sum(x * unit for x, unit in zip(reversed(n), (1, 60, 3600)))
    d, rem = divmod(seconds, 86400)
    h, rem = divmod(rem, 3600)
    m, sec = divmod(rem, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{sec:02d}"
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def parse_squeue(text: str) -> dict[str, JobState]:
    """``squeue -h -o '%i|%T|%r|%S|%N|%l|%M'`` lines -> job id -> state."""
    out = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 7:
            continue
        jid, state, reason, start, nodes, limit, elapsed = (p.strip() for p in parts[:7])
        out[jid] = JobState(
            jid,
            state.split()[0],
            _none(reason),
            _none(start),
            _none(nodes),
            _limit(limit),
            _none(elapsed),
            source="squeue",
        )
    return out


def parse_sacct(text: str, source: str = "sacct") -> dict[str, JobState]:
    """``sacct -P -n -o JobIDRaw,State,ExitCode,Start,End,NodeList,Timelimit`` lines -> job id ->
    state (the job's own line; its steps ``123.batch``, ``123.0`` are left out). The last line of
    a job wins (a requeued job has one per attempt)."""
    out = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 7 or "." in parts[0]:
            continue
        jid, state, code, start, _end, nodes, limit = (p.strip() for p in parts[:7])
        st = state.split()[0] if state.strip() else "UNKNOWN"
        out[jid] = JobState(jid, st, None, _none(start), _none(nodes), _limit(limit), None, _none(code), source=source)
    return out


_cache: dict[str, tuple[float, JobState | None]] = {}
CACHE_S = 2.0


def job_state(job_id: str | int, *, fresh: bool = False) -> JobState | None:
    """The job's state from ``squeue``, else ``sacct``, else ``sacct -c``; ``None`` when none of
    them knows the job. :class:`SlurmUnavailable` when there is no Slurm client here at all.
    Answers are kept for ``CACHE_S`` (a list of runs asks once per job)."""
    jid = str(job_id).split(";")[0]
    hit = _cache.get(jid)
    if hit is not None and not fresh and time.monotonic() - hit[0] < CACHE_S:
        return hit[1]
    found = _ask(jid)
    _cache[jid] = (time.monotonic(), found)
    return found


def _ask(jid: str) -> JobState | None:
    try:
        found = parse_squeue(_run(["squeue", "-h", "-t", "all", "-j", jid, "-o", _SQUEUE_FMT])).get(jid)
    except SlurmUnavailable:
        if not have_slurm():
            raise
        found = None  # "Invalid job id specified": squeue forgot it; accounting may know
    if found is not None:
        return found
    return accounting(jid)


def accounting(jid: str) -> JobState | None:
    """The job's final state from the accounting database (``sacct``), else from the job
    completion log (``sacct -c``); ``None`` when neither has it."""
    for argv, source in ((["sacct", "-X"], "sacct"), (["sacct", "-c"], "sacct -c")):
        try:
            text = _run([*argv, "-P", "-n", "-j", jid, "-o", _SACCT_FIELDS])
        except SlurmUnavailable:
            continue
        found = parse_sacct(text, source).get(jid)
        if found is not None:
            return found
    return None


def scontrol_job(job_id: str | int) -> dict[str, str]:
    """``scontrol -o show job ID`` as key -> value (``Restarts``, ``StartTime``, ``NodeList``, ...)."""
    text = _run(["scontrol", "-o", "show", "job", str(job_id)])
    return dict(kv.split("=", 1) for kv in text.split() if "=" in kv)


def hostnames(nodelist: str) -> list[str]:
    """The node names of a Slurm host list, in Slurm's order (``scontrol show hostnames``); the
    local expansion (:func:`expand_hostlist`) where ``scontrol`` is missing."""
    try:
        names = _run(["scontrol", "show", "hostnames", nodelist]).split()
    except SlurmUnavailable:
        names = []
    return names or expand_hostlist(nodelist)


def node_addr(name: str) -> str | None:
    """The ``NodeAddr`` of a node (what the other nodes connect to), ``None`` when unknown."""
    try:
        text = _run(["scontrol", "-o", "show", "node", name])
    except SlurmUnavailable:
        return None
    m = re.search(r"(?:^|\s)NodeAddr=(\S+)", text)
    return m.group(1) if m else None


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_hostlist(text: str) -> list[str]:
    """``gpu[01-04,07],login1`` -> ``gpu01 gpu02 gpu03 gpu04 gpu07 login1`` (zero padding kept),
    as ``scontrol show hostnames`` does; ``ValueError`` for a list it cannot read."""
    out: list[str] = []
    for item in _split_top(text.strip()):
        out.extend(_expand_one(item))
    return out


def _split_top(text: str) -> list[str]:
    items, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in host list {text!r}")
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    if depth:
        raise ValueError(f"unbalanced '[' in host list {text!r}")
    return [i for i in [*items, cur] if i]


def _expand_one(item: str) -> list[str]:
    m = re.search(r"\[([^\[\]]*)\]", item)
    if m is None:
        return [item]
    head, tail = item[: m.start()], item[m.end() :]
    names: list[str] = []
    for part in m.group(1).split(","):
        r = _RANGE.match(part.strip())
        if r is None:
            raise ValueError(f"bad range {part!r} in host list {item!r}")
        lo, hi = r.group(1), r.group(2) or r.group(1)
        width = len(lo)
        if int(hi) < int(lo):
            raise ValueError(f"bad range {part!r} in host list {item!r}")
        names.extend(f"{head}{n:0{width}d}" for n in range(int(lo), int(hi) + 1))
    return [x for n in names for x in _expand_one(n + tail)]


__all__ = [
    "JobState",
    "SlurmUnavailable",
    "LIVE_STATES",
    "ENDED",
    "have_slurm",
    "check_controller",
    "job_state",
    "accounting",
    "scontrol_job",
    "hostnames",
    "node_addr",
    "expand_hostlist",
    "parse_squeue",
    "parse_sacct",
]
