"""The records of a run directory's JSON files besides the profile and the status: ``command.json``
(:class:`CommandFile`, with the objects it holds: :class:`ResumeFrom`, :class:`Attempt`,
:class:`SlurmNodeJob`), ``supervisor.json`` (:class:`SupervisorFile`, its processes'
:class:`ProcessId`), ``exit.json`` (:class:`ExitFile`) and a Slurm job directory's ``slurm.json``
(:class:`SlurmJobFile`). :class:`fttui.core.run.files.rundir.RunDir` reads each into its record and
writes it back; nothing else reads these files.

Reading is tolerant, as for the events: a missing key, or a value of the wrong type, reads as
``None`` (or the field's default); a key the record does not declare is kept in ``extra`` and
written back (an object inside a file reads the same way; an empty one reads as ``None``). Writing
leaves ``None`` fields out except those the file has always held
(``ALWAYS``), so a reader of an older fttui finds what it found. Pure, stdlib only.
docs/architecture.md, "Run directory".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

__all__ = [
    "CommandFile",
    "SupervisorFile",
    "ExitFile",
    "ResumeFrom",
    "Attempt",
    "SlurmNodeJob",
    "SlurmJobFile",
    "ProcessId",
]


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _pid(v: Any) -> int | None:
    """A process id: 2 to 2^22 (Linux's largest pid_max); 0, 1 (init), negatives (a kill of -1
    signals every process) and 10^20 (an OverflowError in os.kill) read as none (issue 36)."""
    n = _int(v)
    return n if n is not None and 1 < n <= 1 << 22 else None


def _num(v: Any) -> float | None:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    try:
        return v if math.isfinite(v) else None
    except OverflowError:  # an integer too large for a float
        return None


def _time(v: Any) -> float | None:
    """A Unix time: 0 to 2^33 s (the year 2242); 1e400 or a huge integer read as none (they
    overflowed datetime)."""
    t = _num(v)
    return t if t is not None and 0 <= t < 2**33 else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _map(v: Any) -> dict[str, Any] | None:
    return dict(v) if isinstance(v, Mapping) else None


def _ints(v: Any) -> list[int] | None:
    """A list of integers (an attempt's ``[before, after]``); anything else reads as none."""
    if not isinstance(v, list):
        return None
    out = [_int(x) for x in v]
    return [x for x in out if x is not None] if None not in out else None


@dataclass(frozen=True, kw_only=True)
class _File:
    """``from_dict`` (tolerant, by each field's reader in ``READ``) and ``to_dict``; ``extra``:
    the keys the record does not declare, written back as they were."""

    READ: ClassVar[dict[str, Callable[[Any], Any]]] = {}
    ALWAYS: ClassVar[tuple[str, ...]] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_dict(cls, obj: Any) -> Self | None:
        """The record of a parsed file; ``None`` when it is no JSON object."""
        if not isinstance(obj, Mapping):
            return None
        known = {k: read(obj.get(k)) for k, read in cls.READ.items() if k in obj}
        extra = {k: v for k, v in obj.items() if k not in cls.READ}
        return cls(**{k: v for k, v in known.items() if v is not None}, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name != "extra" and (value is not None or f.name in self.ALWAYS):
                out[f.name] = value.to_dict() if isinstance(value, _File) else value
        return {**out, **self.extra}


class _Part(_File):
    """An object inside one of the files: an empty one reads as none (as the empty dict it was
    read as before did: falsy)."""

    @classmethod
    def from_dict(cls, obj: Any) -> Self | None:
        return super().from_dict(obj) if obj else None


@dataclass(frozen=True, kw_only=True)
class ResumeFrom(_Part):
    """``command.json``'s ``resume``: the run a resumed run (or the next attempt of one that ran
    out of memory) continues, the ``checkpoint`` folder it continues from (``None``: from the
    start) and that checkpoint's optimizer ``step``."""

    ALWAYS: ClassVar[tuple[str, ...]] = ("run_id", "checkpoint", "step")
    READ: ClassVar[dict[str, Callable[[Any], Any]]] = {"run_id": _str, "checkpoint": _str, "step": _int}
    run_id: str | None = None
    checkpoint: str | None = None
    step: int | None = None


@dataclass(frozen=True, kw_only=True)
class Attempt(_Part):
    """``command.json``'s ``attempt``, a run started to recover from an out of memory
    (:mod:`fttui.core.run.launching.oomretry`): attempt ``n`` of the chain begun by ``first``, continuing
    ``previous``, which ran out of memory (``oom_kind``) in step ``oom_step``; the micro batch
    (``batch``) and accumulation (``accum``) as ``[before, after]``, from the checkpoint of step
    ``from_step`` (0: from the start); ``message`` says it in words."""

    ALWAYS: ClassVar[tuple[str, ...]] = (
        "n",
        "first",
        "previous",
        "oom_step",
        "oom_kind",
        "from_step",
        "batch",
        "accum",
        "message",
    )
    READ: ClassVar[dict[str, Callable[[Any], Any]]] = {
        "n": _int,
        "first": _str,
        "previous": _str,
        "oom_step": _int,
        "oom_kind": _str,
        "from_step": _int,
        "batch": _ints,
        "accum": _ints,
        "message": _str,
    }
    n: int | None = None
    first: str | None = None
    previous: str | None = None
    oom_step: int | None = None
    oom_kind: str | None = None
    from_step: int | None = None
    batch: list[int] | None = None
    accum: list[int] | None = None
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class SlurmNodeJob(_Part):
    """``command.json``'s ``slurm``, a Slurm node's run (:mod:`fttui.core.run.slurm.slurmnode`): the
    job (``job_id``, ``fttui submit``'s ``job_run``), the node (``node_rank``, its name ``node``),
    the job's ``nodes`` and ``nodelist``, the requeue (``restart``) and the rendezvous
    (``main_addr``, ``main_port``)."""

    ALWAYS: ClassVar[tuple[str, ...]] = (
        "job_id",
        "job_run",
        "node_rank",
        "node",
        "nodes",
        "nodelist",
        "restart",
        "main_addr",
        "main_port",
    )
    READ: ClassVar[dict[str, Callable[[Any], Any]]] = {
        "job_id": _str,
        "job_run": _str,
        "node_rank": _int,
        "node": _str,
        "nodes": _int,
        "nodelist": _str,
        "restart": _int,
        "main_addr": _str,
        "main_port": _int,
    }
    job_id: str | None = None
    job_run: str | None = None
    node_rank: int | None = None
    node: str | None = None
    nodes: int | None = None
    nodelist: str | None = None
    restart: int | None = None
    main_addr: str | None = None
    main_port: int | None = None


@dataclass(frozen=True, kw_only=True)
class SlurmJobFile(_File):
    """``slurm.json`` of a job directory (``fttui submit``, :mod:`fttui.core.run.slurm.slurmjob`): the
    ``job_id`` sbatch gave (and its ``cluster``), when (``submitted``), the ``nodes`` asked for
    and the batch ``script``."""

    ALWAYS: ClassVar[tuple[str, ...]] = ("job_id", "cluster", "submitted", "nodes", "script")
    READ: ClassVar[dict[str, Callable[[Any], Any]]] = {
        "job_id": _str,
        "cluster": _str,
        "submitted": _time,
        "nodes": _int,
        "script": _str,
    }
    job_id: str | None = None
    cluster: str | None = None
    submitted: float | None = None
    nodes: int | None = None
    script: str | None = None


@dataclass(frozen=True, kw_only=True)
class ProcessId(_Part):
    """What is recorded beside a pid (:func:`fttui.core.run.processes.guard.identity`): its start in clock
    ticks since boot (``start_ticks``) and the boot (``boot_id``), so that a reused pid or a
    reboot is not taken for the process."""

    ALWAYS: ClassVar[tuple[str, ...]] = ("start_ticks", "boot_id")
    READ: ClassVar[dict[str, Callable[[Any], Any]]] = {"start_ticks": _int, "boot_id": _str}
    start_ticks: int | None = None
    boot_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class CommandFile(_File):
    """``command.json``: what the supervisor starts (``argv``, the ``env`` it adds, masked), when the
    directory was made, the launch's ``kind`` (``run``, ``probe``, ``sweep``, ``watch``,
    ``command``, ``slurm``; ``None``: a directory written before it moved here from profile.json)
    and ``group`` (the probe or sweep id); a command run's ``cwd`` and ``host_limit_bytes``; what a
    resumed run continues (``resume``: ``run_id``, ``checkpoint``, ``step``), an attempt that
    recovers from an out of memory (``attempt``), a Slurm node's job (``slurm``)."""

    ALWAYS: ClassVar[tuple[str, ...]] = ("argv", "env", "created", "kind", "group")
    READ: ClassVar[dict[str, Callable[[Any], Any]]] = {
        "argv": lambda v: [str(a) for a in v] if isinstance(v, list) else None,
        "env": _map,
        "created": _time,
        "kind": lambda v: str(v or "run"),
        "group": _str,
        "cwd": _str,
        "host_limit_bytes": _int,
        "resume": ResumeFrom.from_dict,
        "attempt": Attempt.from_dict,
        "slurm": SlurmNodeJob.from_dict,
    }
    argv: list[str] | None = None
    env: dict[str, Any] = field(default_factory=dict)
    created: float | None = None
    kind: str | None = None
    group: str | None = None
    cwd: str | None = None
    host_limit_bytes: int | None = None
    resume: ResumeFrom | None = None
    attempt: Attempt | None = None
    slurm: SlurmNodeJob | None = None


@dataclass(frozen=True, kw_only=True)
class SupervisorFile(_File):
    """``supervisor.json``: the supervisor's (or a watcher's) ``pid``, process group, start time
    (``started``; ``create_time`` for a person and for directories written before ``id``, its
    start ticks and boot id: what decides whether it is alive), the training's process group
    (``train_pgid``) and its leader's ``train_id``, the run's ``cgroup`` (null where none could be
    made: a watcher's too); a watcher's ``watched_pid``."""

    ALWAYS: ClassVar[tuple[str, ...]] = ("pid", "pgid", "started", "create_time", "id", "cgroup")
    READ: ClassVar[dict[str, Callable[[Any], Any]]] = {
        "pid": _pid,
        "pgid": _pid,
        "started": _time,
        "create_time": _time,
        "id": ProcessId.from_dict,
        "train_pgid": _pid,
        "train_id": ProcessId.from_dict,
        "cgroup": _str,
        "watched_pid": _pid,
    }
    pid: int | None = None
    pgid: int | None = None
    started: float | None = None
    create_time: float | None = None
    id: ProcessId | None = None
    train_pgid: int | None = None
    train_id: ProcessId | None = None
    cgroup: str | None = None
    watched_pid: int | None = None


@dataclass(frozen=True, kw_only=True)
class ExitFile(_File):
    """``exit.json``, the log writer's: the training command's ``returncode`` (negative: killed by
    that signal), when (``t``), its ``pid``, and the ``error`` that kept it from starting or that
    the log writer hit (a full disk)."""

    ALWAYS: ClassVar[tuple[str, ...]] = ("returncode", "t", "pid")
    READ: ClassVar[dict[str, Callable[[Any], Any]]] = {"returncode": _int, "t": _time, "pid": _pid, "error": _str}
    returncode: int | None = None
    t: float | None = None
    pid: int | None = None
    error: str | None = None
