"""The training's log writer: runs the training command, writes its output to ``train.log`` with
secrets masked, and records how it exited in ``exit.json``.

The supervisor starts this process as the leader of the training's own process group::

    python -m fttui.core.run.logtee RUN_DIR -- ARGV...

It is part of the training, not of the supervisor: when the supervisor dies (``kill -9``, an
out-of-memory kill, a reboot of nothing but it), the training keeps its output pipe, its log keeps
growing and ``exit.json`` still says how it ended, so the next fttui command that looks can write
the run's row (:mod:`fttui.core.run.recover`). Cancel still reaches it: a signal to the group
stops the training; this process outlives the signal only to drain the last lines and record the
exit.

``exit.json``: ``{"returncode": int, "t": float, "pid": int}`` with ``returncode`` as
:mod:`subprocess` reports it (negative = killed by that signal). This process exits with the
training's code (128 + signal number when it was killed).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from fttui.core.base.redact import Redactor
from fttui.core.run.rundir import RunDir, group_members, write_json_atomic

#: After the training exits, how long its last output may take to arrive (a process it started
#: may still hold the pipe; its output after that is not the training's).
DRAIN_S = 3.0
#: How long processes left in the group get between SIGTERM and SIGKILL, when no supervisor is
#: there to reap them.
REAP_GRACE_S = 5.0


def _pump(pipe, log, redact: Redactor) -> None:
    try:
        for line in iter(pipe.readline, b""):
            log.write(redact(line))
    except (OSError, ValueError):
        pass


def _reap_group() -> None:
    """Stop what the training left behind in its group (SIGTERM, then SIGKILL)."""
    import psutil

    left = group_members(os.getpgid(0), exclude=os.getpid())
    for p in left:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(left, timeout=REAP_GRACE_S)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass


def run(rd: RunDir, argv: list[str]) -> int:
    parent = os.getppid()
    # Signals to the group are for the training: this process stays to drain and record. A
    # Python handler (not SIG_IGN) so that the training, after exec, gets the default action.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    log = os.fdopen(os.open(rd.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab", buffering=0)
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, close_fds=True)
    except OSError as e:
        log.write(f"fttui: could not start {argv[0]}: {e}\n".encode())
        write_json_atomic(rd.exit_path, {"returncode": 127, "t": time.time(), "pid": None,
                                         "error": f"could not start {argv[0]}: {e}"})
        return 127
    pump = threading.Thread(target=_pump, args=(child.stdout, log, Redactor(dict(os.environ))), daemon=True)
    pump.start()
    while True:
        try:
            rc = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
            continue
    pump.join(timeout=DRAIN_S)
    write_json_atomic(rd.exit_path, {"returncode": rc, "t": time.time(), "pid": child.pid})
    if os.getppid() != parent:  # the supervisor is gone: nobody else will reap the group
        _reap_group()
    return rc if rc >= 0 else 128 - rc


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m fttui.core.run.logtee RUN_DIR -- ARGV...", file=sys.stderr)
        return 2
    os.umask(0o077)
    return run(RunDir(Path(args[0])), args[2:])


if __name__ == "__main__":
    sys.exit(main())
