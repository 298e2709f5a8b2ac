"""Every thread's Python stack on SIGUSR1, for ``fttui stacks`` (issue 39 item 2).

Stdlib only: fttui's worker registers it before it imports the training stack, and fttui's
Trainer callback (:mod:`fttui.integrations.hf`) loads it by path in a script's own Python.
"""

from __future__ import annotations

import os
from collections.abc import Callable

#: The folder of the run directory where each rank's stacks go (``fttui.core.run.processes.stacks``).
STACKS_DIR = "stacks"
_MARK = "_fttui_stacks_file"  # on the faulthandler module: one registration per process


def _rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def register(
    run_dir: str | None, rank: int | None = None, on_error: Callable[[BaseException], None] | None = None
) -> str | None:
    """Dump every thread's Python stack to ``RUN_DIR/stacks/rank-R-pid-P.txt`` (appended; the
    folder 0700, the file 0600) when this process gets SIGUSR1; R is ``rank``, else the launcher's
    ``RANK``, else 0. The file's path, or ``None``: no run directory, a SIGUSR1 handler the
    script installed (left as it is), or a failure (given to ``on_error``; never raises). A second
    call in one process gives the first one's path."""
    try:
        import faulthandler
        import signal

        if not run_dir or not hasattr(signal, "SIGUSR1"):
            return None
        done = getattr(faulthandler, _MARK, None)
        if done is not None:
            return str(done.name)
        if signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL:
            return None  # the user's own handler stays
        rank = _rank() if rank is None else rank
        folder = os.path.join(run_dir, STACKS_DIR)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        path = os.path.join(folder, f"rank-{rank}-pid-{os.getpid()}.txt")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        f = os.fdopen(fd, "a", encoding="utf-8")
        faulthandler.register(signal.SIGUSR1, file=f, all_threads=True, chain=False)
        setattr(faulthandler, _MARK, f)  # kept open (and alive) for the process's life
        return path
    except Exception as e:
        if on_error is not None:
            try:
                on_error(e)
            except Exception:
                pass
        return None
