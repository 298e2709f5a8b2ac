"""What keeps a run honest under faults (issue 28): write errors, the whole process tree, process
identity and stalls. Stdlib only; used by the supervisor, the log writer and ``fttui cancel``.

- A write that fails (``ENOSPC``: disk full) is named in one line, ``disk full writing
  train.log``; a run directory keeps a :class:`Reserve` of space that is given back when a write
  fails, so the run's verdict (``status.json``, ``row.json``) can still be written.
- :func:`become_subreaper`: orphans of the run (a ``setsid`` double-fork) are re-parented to the
  supervisor instead of init, so it sees and ends them with the run.
- :func:`start_ticks` / :func:`boot_id`: a process is its pid *and* its start time (field 22 of
  ``/proc/PID/stat``) on this boot; a reused pid or a reboot is not the process fttui started.
- :func:`stall_limit`: a run is stalled after no step for ``max(floor, 10 x its usual step)``.
"""

from __future__ import annotations

import errno
import os
import statistics
import sys
from pathlib import Path

from fttui.core.run.files.runfiles import ProcessId

#: The space a run directory keeps back for its verdict (status, row, the last events).
RESERVE_BYTES = 1 << 20
RESERVE_NAME = ".reserve"


def is_disk_full(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def write_error(what: str, e: BaseException) -> str:
    """One line naming the file a write failed on: ``disk full writing train.log``."""
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        return f"disk full writing {what}"
    if isinstance(e, OSError) and e.errno == errno.EDQUOT:
        return f"disk quota exceeded writing {what}"
    reason = e.strerror if isinstance(e, OSError) and e.strerror else repr(e)
    return f"cannot write {what}: {reason}"


class Reserve:
    """A file of :data:`RESERVE_BYTES` in the run directory, deleted when a write fails so that
    the run's last files fit (and deleted at the end in any case)."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / RESERVE_NAME
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, b"\0" * RESERVE_BYTES)  # real blocks (not a sparse file)
            finally:
                os.close(fd)
        except OSError:
            pass  # the disk is full already: the first write will say so

    def release(self) -> None:
        try:
            self.path.unlink()
        except OSError:
            pass


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants (Linux ``PR_SET_CHILD_SUBREAPER``):
    a process of the run whose parent exits is re-parented here, not to init. ``False`` where the
    call is not there."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def start_ticks(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (``/proc/PID/stat`` field 22); None
    when there is no such process (or no ``/proc``)."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def identity(pid: int) -> ProcessId:
    """What is recorded beside a pid: its start time and the boot."""
    return ProcessId(start_ticks=start_ticks(pid), boot_id=boot_id())


def same_process(pid: int, recorded: ProcessId | None) -> bool | None:
    """``pid`` is the process recorded (``identity``) then: True, False (another process has that
    pid, or the machine rebooted), None (no such process now, or nothing recorded to compare)."""
    if recorded is None or recorded.start_ticks is None:
        return None
    boot = boot_id()
    if recorded.boot_id and boot and recorded.boot_id != boot:
        return False
    now = start_ticks(pid)
    if now is None:
        return None
    return now == recorded.start_ticks


#: No step for this long is a stall whatever the step time (``monitor.stall_timeout_s`` = 0).
STALL_FLOOR_S = 600.0
#: ... and no step for this many usual steps.
STALL_STEPS = 10


def usual_step_s(step_times: list[tuple[int, float]]) -> float | None:
    """The median seconds per step of the latest steps (``(step, t)`` pairs, in order)."""
    last = step_times[-51:]
    rates = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in zip(last, last[1:]) if s1 > s0 and t1 >= t0]
    return statistics.median(rates) if rates else None


def stall_limit(step_times: list[tuple[int, float]], fixed: float = 0.0, floor: float = STALL_FLOOR_S) -> float:
    """Seconds without a step after which the run is stalled: ``fixed`` when set, else the larger
    of ``floor`` and :data:`STALL_STEPS` usual steps."""
    if fixed > 0:
        return fixed
    usual = usual_step_s(step_times)
    return max(floor, STALL_STEPS * usual) if usual else floor


def stall_message(idle_s: float, usual: float | None) -> str:
    """``no step for 10 min (usual step 2.1 s)``."""
    idle = f"{idle_s / 60:.0f} min" if idle_s >= 120 else f"{idle_s:.0f} s"
    return f"no step for {idle}" + (f" (usual step {usual:.1f} s)" if usual else "")


__all__ = [
    "RESERVE_BYTES",
    "Reserve",
    "is_disk_full",
    "write_error",
    "become_subreaper",
    "start_ticks",
    "boot_id",
    "identity",
    "same_process",
    "STALL_FLOOR_S",
    "STALL_STEPS",
    "usual_step_s",
    "stall_limit",
    "stall_message",
]
