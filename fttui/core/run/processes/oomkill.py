"""Was a SIGKILL the kernel's OOM killer's? What fttui can read of it, and the verdict with the
evidence that decided it (issue 41 item 6: a worker killed by hand under a memory budget was
recorded as an OOM and retried).

The evidence, strongest first:

- the kernel's count of OOM kills in the run's own cgroup (``memory.events``' ``oom_kill``,
  :func:`fttui.core.run.processes.cgroup.oom_kills`), where the run has one;
- the same count of the memory cgroup fttui's supervisor runs in (cgroup v2 ``memory.events``,
  v1 ``memory.oom_control``: a container's limit), before and after the run
  (:func:`memory_cgroup_oom_count`);
- the kernel's own record, ``Out of memory: Killed process PID``, in its log (``/dev/kmsg``,
  where this process may read it and shares the kernel's pid numbers; ``FTTUI_KERNEL_LOG``
  names a file to read instead) for a process of the run (:func:`kernel_log_oom_kill`);
- when none of those can be read: the host's memory at the last sample before the kill, against
  its total (:data:`HOST_OOM_FRACTION`). A host-memory budget (``limits.host_memory``) is an
  address-space limit: a process that reaches it fails its allocation (an ``oom`` of kind
  ``cpu``), it is not killed, so the budget is no evidence of a kill.

One count or record that says "OOM kill" decides it; otherwise a count or log that could be read
and says none decides "not the OOM killer"; only without any of them does the memory decide.
Stdlib only.
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from fttui.core.run.processes.cgroup import mount_points, own_path

#: Host memory this full (a share of its total) at the last sample before a SIGKILL: the kernel's
#: OOM killer, when nothing better can be read.
HOST_OOM_FRACTION = 0.95
#: the records of the kernel log read at most (a ring buffer of a few MB)
MAX_RECORDS = 100_000
_KILLED = re.compile(r"Killed process (\d+)\b")


@dataclass(frozen=True)
class KillEvidence:
    """What could be read about a SIGKILL: ``None`` for a source that could not be read."""

    run_cgroup: int | None = None  # OOM kills the run's own cgroup counted
    container: int | None = None  # OOM kills the supervisor's memory cgroup counted during the run
    kernel_log: str | None = None  # the kernel's record of an OOM kill of a process of the run
    kernel_log_read: bool = False  # the kernel log could be read (no record: none of the run's)
    #: the host's memory at the last sample taken while the training lived (a sample after the
    #: kill sees the memory the kill freed); ``None``: the run's last sample is taken instead
    ram_used_mb: float | None = None
    ram_total_mb: float | None = None


def _read(path: str | Path) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _count(text: str, key: str = "oom_kill") -> int | None:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


def memory_cgroup_oom_count() -> int | None:
    """The OOM kills the memory cgroup of this process has counted (cgroup v2 ``memory.events``,
    v1 ``memory.oom_control``); ``None`` when neither can be read."""
    mountinfo, own = _read("/proc/self/mountinfo"), _read("/proc/self/cgroup")
    v2 = own_path(own)
    if v2 is not None:
        for root, point in mount_points(mountinfo):
            rel = os.path.relpath(v2, root)
            if not rel.startswith(".."):
                n = _count(_read(point / ("" if rel == "." else rel) / "memory.events"))
                if n is not None:
                    return n
    v1 = next((line.split(":", 2)[2] for line in own.splitlines() if ":memory:" in line or ",memory" in line), None)
    if v1 is None:
        return None
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, kind = head.split(), tail.split()
        if sep and kind[:1] == ["cgroup"] and "memory" in kind[-1].split(",") and len(fields) >= 5:
            rel = os.path.relpath(v1.strip(), fields[3])
            if not rel.startswith(".."):
                n = _count(_read(Path(fields[4]) / ("" if rel == "." else rel) / "memory.oom_control"))
                if n is not None:
                    return n
    return None


def _own_pid_numbers() -> bool:
    """This process sees the kernel's pid numbers (it is in the first pid namespace): the pids
    in the kernel log are the ones it knows."""
    for line in _read("/proc/self/status").splitlines():
        if line.startswith("NSpid:"):
            return len(line.split()) == 2
    return True


def _kmsg_records(path: str) -> list[str] | None:
    """The records of ``/dev/kmsg`` (one per read, non-blocking), ``None`` when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    out: list[str] = []
    try:
        while len(out) < MAX_RECORDS:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:  # a record was overwritten while reading: go on
                    continue
                return out or None
            if not chunk:
                break
            out.append(chunk.decode("utf-8", "replace"))
    finally:
        os.close(fd)
    return out


def kernel_log_oom_kill(pids: Collection[int], since: float | None = None) -> tuple[bool, str | None]:
    """(whether the kernel log could be read, its record of an OOM kill of one of ``pids``).
    ``since``: the run's start (``time.time()``); an older record (a pid used again) is left out."""
    if not pids:
        return False, None
    named = os.environ.get("FTTUI_KERNEL_LOG")
    if named:
        text = _read(named)
        records = text.splitlines() if text or os.path.isfile(named) else None
    elif _own_pid_numbers():
        records = _kmsg_records("/dev/kmsg")
    else:
        records = None
    if records is None:
        return False, None
    start_us = None
    if since is not None:  # /dev/kmsg stamps records in microseconds of the monotonic clock
        start_us = (time.clock_gettime(time.CLOCK_MONOTONIC) - (time.time() - since)) * 1e6
    wanted = {int(p) for p in pids}
    for record in records:
        head, sep, message = record.partition(";")
        if not sep:
            head, message = "", record
        parts = head.split(",")
        if start_us is not None and len(parts) >= 3 and parts[2].isdigit() and int(parts[2]) < start_us - 5e6:
            continue
        found = _KILLED.search(message)
        if found and int(found.group(1)) in wanted:
            return True, message.strip().splitlines()[0][:200]
    return True, None


def verdict(evidence: KillEvidence | None, ram_used_mb: float | None, ram_total_mb: float | None) -> tuple[bool, str]:
    """(whether a SIGKILL was the kernel's OOM killer's, the words that say which evidence
    decided it); ``ram_*``: the host's memory at the run's last sample, used when ``evidence``
    has none from before the kill."""
    e = evidence or KillEvidence()
    if e.ram_total_mb:
        ram_used_mb, ram_total_mb = e.ram_used_mb, e.ram_total_mb
    if e.run_cgroup:
        return True, f"the kernel counted {e.run_cgroup} OOM kill(s) in the run's cgroup (memory.events oom_kill)"
    if e.container:
        return True, f"the kernel counted {e.container} OOM kill(s) in fttui's memory cgroup during the run"
    if e.kernel_log:
        return True, f"the kernel log: {e.kernel_log}"
    read = [
        *(["the run's cgroup counted no OOM kill"] if e.run_cgroup == 0 else []),
        *(["fttui's memory cgroup counted none during the run"] if e.container == 0 else []),
        *(["the kernel log has no OOM kill of the run's processes"] if e.kernel_log_read else []),
    ]
    if read:
        return False, "; ".join(read)
    if ram_used_mb is not None and ram_total_mb:
        share = ram_used_mb / ram_total_mb
        at = f"host memory at {ram_used_mb:.0f} of {ram_total_mb:.0f} MB ({share:.0%}) at the last sample"
        nothing = "no OOM kill count or kernel log could be read"
        if share >= HOST_OOM_FRACTION:
            return True, f"{at}; {nothing}"
        return False, f"{at}; {nothing}"
    return False, "no OOM kill count, kernel log or host memory sample could be read"


__all__ = [
    "HOST_OOM_FRACTION",
    "KillEvidence",
    "memory_cgroup_oom_count",
    "kernel_log_oom_kill",
    "verdict",
]
