"""Process groups and process trees: whether they live, signalling them, stopping them. The one
place in fttui that sends a signal to a process group (``os.killpg``) or to a pid (``os.kill``);
its callers are the supervisor (a run), the trial guard (a launched probe trial), the probe (its
in-process trial's worker), the launched probe (a guard that does not end), ``fttui cancel`` and
the recovery of a run whose supervisor died (:mod:`fttui.core.run.processes.cancel`), the run's cgroup
(:mod:`fttui.core.run.processes.cgroup`, which hands its pids here).

- :func:`pid_alive`, :func:`group_alive`, :func:`group_members`: asked with signal 0 and
  ``/proc`` (a zombie counts as gone).
- :func:`signal_group`, :func:`signal_pids`: send a signal; a group or process that is gone
  or not ours is no error.
- :class:`Tree`: a leader started in its own process group, every process seen in its tree and,
  where the run has one, its cgroup's pids; :meth:`Tree.stop` SIGTERMs all of it and SIGKILLs
  what is left after one grace period.
- :func:`stop_group`: SIGTERM to a process group, SIGKILL when its leader has not exited after
  the grace period.

One grace period, :data:`GRACE_S`: 10 s, ``FTTUI_KILL_GRACE`` overrides it (0 to 3600,
:mod:`fttui.core.base.envnumbers`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from fttui.core.base.envnumbers import env_float

if TYPE_CHECKING:  # psutil is imported where it is used: the log writer and rundir import this
    import psutil

#: Seconds between SIGTERM and SIGKILL when a process tree is stopped, for every tree fttui stops:
#: a run, a launched probe trial, a probe's trial worker. A run's (and a launched trial's: the
#: same command, :func:`fttui.core.run.launching.launch.prepare`) launcher forwards SIGTERM to its ranks and
#: waits for them: torchrun's and DeepSpeed's ranks tear down NCCL and the Trainer may save its
#: state on SIGTERM, which takes seconds; 10 s was the supervisor's grace (the trial guard and the
#: probe had 5 s, with nothing that needed less). ``FTTUI_KILL_GRACE`` overrides it.
GRACE_S = env_float("FTTUI_KILL_GRACE", 10.0)

#: How long a process sent SIGKILL is waited for (reaped) before its stopper goes on: not a grace
#: period, the kernel's time to end it.
KILLED_WAIT_S = 5.0

#: How often a stopper looks whether the tree has ended within its grace period.
POLL_S = 0.1


def pid_alive(pid: int | None) -> bool:
    """``pid`` is a live process (a zombie, exited and not reaped, counts as dead; one of another
    user's counts as alive). Never asks about 0, 1 or -1 (kill(-1, 0) asks about every process)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or not 1 < pid <= 1 << 22:
        return False  # 0, 1, -1 (kill(-1, 0) asks about every process), 10^20 (OverflowError)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def group_members(pgid: int, exclude: int | None = None) -> list[psutil.Process]:
    """The live (not zombie) processes of process group ``pgid``, ``exclude`` (a pid) left out."""
    import psutil

    out = []
    for p in psutil.process_iter():
        try:
            if p.pid != exclude and os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.Error, OSError):
            pass
    return out


def group_alive(pgid: int) -> bool:
    """Some process of process group ``pgid`` is alive (zombies count as gone; a group of another
    user's is asked about through ``/proc``)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return bool(group_members(pgid))


def signal_group(pgid: int | None, sig: int) -> bool:
    """Send ``sig`` to process group ``pgid``; ``True`` when it was sent (``False``: no such
    group, not ours, or no group: ``None``, 0 and 1 are never signalled: ``killpg(0)`` is the
    caller's own group, 1 is init's)."""
    if not isinstance(pgid, int) or isinstance(pgid, bool) or pgid <= 1:
        return False
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def signal_pids(pids: Iterable[int], sig: int, exclude: int | None = None) -> int:
    """Send ``sig`` to each of ``pids`` (``exclude`` left out); how many were sent it."""
    sent = 0
    for pid in pids:
        if pid != exclude:
            try:
                os.kill(pid, sig)
                sent += 1
            except (ProcessLookupError, PermissionError):
                pass
    return sent


def signal_procs(procs: Iterable[psutil.Process], sig: int) -> None:
    """Send ``sig`` to each of ``procs`` (psutil checks that each is still the process it was)."""
    import psutil

    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.Error:
            pass


def alive(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    """Those of ``procs`` still running (not zombies, not a reused pid)."""
    import psutil

    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


class Tree:
    """A process tree to stop: ``leader`` (started with ``start_new_session``: its pid is its
    process group's id), every process :meth:`remember` was given while it ran, and ``extra``:
    more pids of the tree asked for when it is signalled (the run's cgroup's members)."""

    def __init__(self, leader: subprocess.Popen | None = None, extra: Callable[[], list[int]] | None = None):
        self.leader = leader
        self.extra = extra
        self.seen: dict[int, psutil.Process] = {}

    def remember(self, procs: Iterable[psutil.Process]) -> None:
        for p in procs:
            self.seen.setdefault(p.pid, p)

    def alive(self) -> list[psutil.Process]:
        """The processes seen that still run."""
        return alive(self.seen.values())

    def any_alive(self) -> bool:
        """A process seen, or one of ``extra``'s, still runs."""
        return bool(self.alive() or (self.extra is not None and self.extra()))

    def group_alive(self) -> bool:
        """The leader's process group still has a process (even a zombie: signal 0 reaches it)."""
        return self.leader is not None and signal_group(self.leader.pid, 0)

    def signal(self, sig: int) -> None:
        """``sig`` to ``extra``'s pids, the leader's process group and every process seen."""
        if self.extra is not None:
            signal_pids(self.extra(), sig)
        if self.leader is not None:
            signal_group(self.leader.pid, sig)
        signal_procs(self.alive(), sig)

    def wait_ended(self, grace: float) -> None:
        """Up to ``grace`` seconds, while the leader runs or any process of the tree does."""
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if self.leader is not None and self.leader.poll() is None:
                time.sleep(POLL_S)
                continue
            if not self.any_alive():
                break
            time.sleep(POLL_S)

    def stop(self, grace: float | None = None, after_kill: Callable[[], None] | None = None) -> None:
        """SIGTERM the whole tree, SIGKILL what is left after ``grace`` (:data:`GRACE_S`); then
        ``after_kill`` (the supervisor ends the run's cgroup there) and the leader is reaped."""
        self.signal(signal.SIGTERM)
        self.wait_ended(GRACE_S if grace is None else grace)
        self.signal(signal.SIGKILL)
        if after_kill is not None:
            after_kill()
        if self.leader is not None:
            try:
                self.leader.wait(timeout=KILLED_WAIT_S)
            except subprocess.TimeoutExpired:
                pass


def stop_group(proc: subprocess.Popen, grace: float | None = None) -> None:
    """Stop ``proc`` (started with ``start_new_session``) and its process group: SIGTERM, up to
    ``grace`` (:data:`GRACE_S`) for ``proc`` to exit, then SIGKILL and up to
    :data:`KILLED_WAIT_S` more. Nothing more is sent once the group is gone."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, GRACE_S if grace is None else grace), (signal.SIGKILL, KILLED_WAIT_S)):
        if not signal_group(proc.pid, sig):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def start_daemon(argv: list[str], log_path: Path) -> int:
    """Start ``argv`` in a session of its own (it outlives this process, a closed terminal and a
    dropped SSH connection), stdin closed, its output appended to ``log_path`` (mode 0600);
    returns its pid. The supervisor and a pid's watcher start this way."""
    log = os.fdopen(os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True
        )
    finally:
        log.close()
    return proc.pid


__all__ = [
    "GRACE_S",
    "KILLED_WAIT_S",
    "pid_alive",
    "group_members",
    "group_alive",
    "signal_group",
    "signal_pids",
    "signal_procs",
    "alive",
    "Tree",
    "stop_group",
    "start_daemon",
]
