"""Watch a process fttui did not start: ``fttui watch --pid PID``.

:func:`check_pid` says, before anything is written, whether ``PID`` can be watched (it exists,
it is not a zombie, it is yours). :func:`start_watch` creates a run directory of kind ``watch``
and starts the watcher, ``python -m fttui.core.run.supervising.pidwatch RUN_DIR``, in a session of its own
(the terminal's signals never reach it: a ``--detach`` watch outlives the terminal, like a run's
supervisor). The watcher samples the process's tree (host memory, CPU) and the cards it uses into
``samples.jsonl`` at the supervisor's rate, and ends when the process ends or when asked to
(``fttui cancel``; Ctrl-C, SIGTERM or SIGHUP to a foreground ``fttui watch --headless``, its
output gone: the ``cancel`` file): it never signals the watched process. It then writes
``status.json`` with the status ``watched`` and, only when ``--record`` asked for it, a summary
row (kind ``watch``: peaks, wall time; nothing about steps, which a process that does not write
fttui's events does not say). The views follow the directory as they follow any run (``fttui
attach``, the app, ``fttui ls``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil

from fttui.core.base.constants import WATCHED
from fttui.core.base.envnumbers import env_float
from fttui.core.base.errors import FttuiError
from fttui.core.run.files import rundir
from fttui.core.run.files.events import LaunchEvent, StartEvent, write_event
from fttui.core.run.files.runfiles import SupervisorFile
from fttui.core.run.files.sampling import take_sample
from fttui.core.run.fold.state import RunState
from fttui.core.run.processes import guard, liveness, proctree
from fttui.core.run.processes.executor import DirectoryRun
from fttui.core.run.supervising.recover import end_watch
from fttui.monitor import HostSampler, make_gpu_sampler

__all__ = [
    "WATCHED",
    "AttachedPid",
    "check_pid",
    "start_watch",
    "watch",
]  # end_watch: fttui.core.run.supervising.recover

TICK_S = env_float("FTTUI_SAMPLE_INTERVAL", 0.5)


def check_pid(pid: int) -> psutil.Process:
    """The process to watch; FttuiError (one line, exit 2) when there is none, it is a zombie,
    it is this process, or it belongs to another user."""
    if pid <= 0:
        raise FttuiError(f"--pid {pid}: not a process id")
    try:
        proc = psutil.Process(pid)
        status = proc.status()
        uid = proc.uids().real
    except psutil.NoSuchProcess:
        raise FttuiError(f"--pid {pid}: no such process") from None
    except psutil.AccessDenied:
        raise FttuiError(f"--pid {pid}: not your process (access denied)") from None
    if pid == os.getpid():
        raise FttuiError(f"--pid {pid}: that is this fttui command")
    if status == psutil.STATUS_ZOMBIE:
        raise FttuiError(f"--pid {pid}: the process has already ended (a zombie)")
    if uid != os.getuid() and os.getuid() != 0:
        try:
            import pwd

            owner = pwd.getpwuid(uid).pw_name
        except (ImportError, KeyError):
            owner = str(uid)
        raise FttuiError(f"--pid {pid}: not your process (it belongs to {owner})")
    return proc


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline() or [proc.name()]
    except psutil.Error:
        return []


def start_watch(pid: int, name: str | None = None, record: bool = False) -> rundir.RunDir:
    """Check ``pid``, create the run directory (kind ``watch``) and start its watcher."""
    proc = check_pid(pid)
    argv = _cmdline(proc)
    label = name or f"pid-{pid}-{Path(argv[0]).name if argv else 'process'}"
    resolved = {
        "name": label,
        "source": f"pid {pid}",
        "origin": "watch",
        "method": None,
        "watch": {"pid": pid, "create_time": proc.create_time(), "record": bool(record), "cmdline": argv},
    }
    rd = rundir.create(resolved, argv, {}, kind="watch")
    proctree.start_daemon(
        [sys.executable, "-m", "fttui.core.run.supervising.pidwatch", str(rd.path)], rd.path / "supervisor.log"
    )
    return rd


class AttachedPid(DirectoryRun):
    """The executor of a watched process (``fttui watch --pid PID``): fttui did not start it and
    never signals it. :meth:`start` checks the pid and starts the watcher; :meth:`cancel` asks the
    watcher to stop (the ``cancel`` file), which ends the watch and records its row while the
    process runs on."""

    def __init__(
        self, pid: int | None = None, name: str | None = None, record: bool = False, rd: rundir.RunDir | None = None
    ) -> None:
        super().__init__(rd)
        self.pid, self.name, self.record = pid, name, record

    def start(self) -> rundir.RunDir:
        if self.pid is None:
            raise ValueError("AttachedPid: a pid to start watching")
        self.rd = start_watch(self.pid, self.name, self.record)
        return self.rd

    def cancel(self) -> None:
        self._dir().write_cancel()  # the watched process is never signalled


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def watch(rd: rundir.RunDir) -> int:
    """The watcher's loop (in its own process): sample until the process ends or the watch is
    stopped, then write the status (and the row when asked)."""
    spec = rd.watch_spec()
    pid = int(spec.get("pid") or 0)
    me = SupervisorFile(
        pid=os.getpid(),
        pgid=os.getpgid(0),
        started=time.time(),
        create_time=psutil.Process().create_time(),
        id=guard.identity(os.getpid()),
        watched_pid=pid,
    )
    rd.write_supervisor(me)  # no train_pgid: cancel never signals it
    t0 = time.time()
    state = RunState()
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - float(spec.get("create_time") or 0)) >= liveness.CREATE_TIME_SLACK_S:
            raise psutil.NoSuchProcess(pid)  # the pid was reused between the check and now
    except psutil.Error:
        proc = None
    # launch, then start: the views say RUNNING while the process runs (there is no startup to follow)
    for ev in (
        LaunchEvent(t=t0, rank=-1, source="watch", pid=pid),
        StartEvent(t=t0, rank=0, source="watch", pid=pid, extra={"watched": True}),
    ):
        write_event(rd.events_path, ev)
        state.apply(ev)
    host, gpu = HostSampler(pid), make_gpu_sampler()
    stopped = False
    while proc is not None and _alive(proc):
        tick = time.monotonic()
        try:
            sample, _ = take_sample(host, gpu, rd.samples_path)
            state.apply_sample(sample)
        except Exception as e:  # sampling must never end the watch
            print(f"pidwatch: sampling failed: {e!r}", file=sys.stderr, flush=True)
        if rd.cancel_path.exists():
            stopped = True
            break
        time.sleep(max(0.0, TICK_S - (time.monotonic() - tick)))
    gpu.close()
    why = (
        f"stopped watching; process {pid} still running"
        if stopped
        else f"process {pid} ended (not started by fttui: no exit code)"
    )
    end_watch(rd, state, why, t0, "watch")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m fttui.core.run.supervising.pidwatch RUN_DIR", file=sys.stderr)
        return 2
    os.umask(0o077)
    return watch(rundir.RunDir(Path(args[0])))


if __name__ == "__main__":
    sys.exit(main())
