"""One launched probe trial, bound to the life of the probe that started it.

    python -m fttui.core.experiments.trial_guard RUN_DIR -- ARGV...

The probe (fttui.core.experiments.launched) starts this process with its stdin a pipe whose other
end only the probe holds. It starts the trial's training command the way the supervisor starts a
run's: under the log writer (:mod:`fttui.core.run.supervising.logtee`, which writes ``train.log`` and
``exit.json``), as the leader of the training's own process group, with the launcher of the
command (torchrun, DeepSpeed's) starting the ranks. It prints the log writer's pid on one line.

End of file on stdin means the probe wants the trial stopped, or is gone (killed with SIGKILL
too: the kernel closes its end of the pipe): the whole tree is stopped, SIGTERM to the group and
to every process seen in it, SIGKILL after the grace period (:data:`fttui.core.run.processes.proctree.GRACE_S`,
the run's). When the training ends first, what it left behind is stopped the same way. This
process writes nothing to the store: the probe records the trial.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

import psutil

from fttui.core.run.processes import proctree

TICK_S = 0.2


class Tree(proctree.Tree):
    """The processes of a trial: its group and every descendant seen while it ran."""

    def __init__(self, leader: subprocess.Popen):
        super().__init__(leader)

    def remember(self, procs=None) -> None:
        """The leader and its descendants now (``procs``: these instead)."""
        if procs is None:
            if self.leader is None:
                return
            try:
                root = psutil.Process(self.leader.pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                return
        super().remember(procs)

    def stop(self, grace=None, after_kill=None) -> None:
        """SIGTERM everything, SIGKILL what is left after the grace period
        (:data:`fttui.core.run.processes.proctree.GRACE_S`)."""
        self.remember()
        super().stop(grace, after_kill)


def _stdin_closed(fd: int, timeout: float) -> bool:
    """Wait up to ``timeout`` for the probe's pipe; True at end of file."""
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
    except InterruptedError:
        return False
    if not ready:
        return False
    try:
        return os.read(fd, 4096) == b""
    except OSError:
        return True


def run(run_dir: str, argv: list[str]) -> int:
    stop_asked = []
    signal.signal(signal.SIGTERM, lambda *_: stop_asked.append(True))
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    leader = subprocess.Popen(
        [sys.executable, "-m", "fttui.core.run.supervising.logtee", run_dir, "--", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    print(leader.pid, flush=True)
    tree = Tree(leader)
    fd = sys.stdin.fileno()
    while leader.poll() is None:
        tree.remember()
        if stop_asked or _stdin_closed(fd, TICK_S):
            tree.stop()
            return 130
    if tree.alive():  # the training ended and left processes behind
        tree.stop()
    return leader.returncode if leader.returncode >= 0 else 128 - leader.returncode


def main(args: list[str] | None = None) -> int:
    args = sys.argv[1:] if args is None else args
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m fttui.core.experiments.trial_guard RUN_DIR -- ARGV...", file=sys.stderr)
        return 2
    os.umask(0o077)
    return run(args[0], args[2:])


if __name__ == "__main__":
    sys.exit(main())
