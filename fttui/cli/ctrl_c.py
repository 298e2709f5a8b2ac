"""Ctrl-C while a run is followed from the command line (``fttui run``, ``fttui attach``, without
the app): cancel after a window in which a second Ctrl-C detaches instead, and say truly whether
the run goes on (issue 36)."""

from __future__ import annotations

import sys
import time

from fttui.core.run.files.rundir import RunDir

__all__ = ["DETACH_WINDOW_S", "CtrlC"]


#: Ctrl-C while a run is followed asks to cancel it after this long: a second Ctrl-C within it
#: detaches instead, and the cancel is never sent.
DETACH_WINDOW_S = 3.0


class CtrlC:
    """Ctrl-C while a run is followed (``fttui run``, ``fttui attach``, without the app).

    With ``cancel_on_interrupt`` (``fttui run``) the first Ctrl-C asks to cancel the run, and
    the cancel is sent (the ``cancel`` file the supervisor acts on) only when
    :data:`DETACH_WINDOW_S` has passed, by :meth:`tick` from the view's loop. A second Ctrl-C
    within that window detaches and withdraws the cancel: it was never written, so no
    supervisor can have acted on it (a SIGTERM, once sent, cannot be taken back). A second
    Ctrl-C after it detaches only, saying that the run is stopping. Without it (``fttui
    attach``) the first Ctrl-C detaches.

    No race between the two: the handler runs in the main thread between two bytecodes, and
    :meth:`tick` marks the cancel ``sending`` before it writes it; a Ctrl-C that comes while it
    is written detaches once it is (``state`` is then ``sent``)."""

    def __init__(self, cancel_on_interrupt: bool, window: float = DETACH_WINDOW_S) -> None:
        self.cancel_on_interrupt, self.window = cancel_on_interrupt, window
        self.state = "idle"  # idle, pending (asked), sending, sent (written), withdrawn
        self.deadline = 0.0
        self.detach_when_sent = False

    def on_int(self, _s, _f) -> None:
        if self.state == "idle" and self.cancel_on_interrupt:
            self.state, self.deadline = "pending", time.monotonic() + self.window
            print(
                f"\nfttui: cancelling the run in {self.window:g} s (Ctrl-C again before then to detach "
                "and leave it running)",
                file=sys.stderr,
                flush=True,
            )
            return
        if self.state == "sending":
            self.detach_when_sent = True  # the cancel is being written: detach once it is
            return
        if self.state == "pending":
            self.state = "withdrawn"
        raise KeyboardInterrupt

    def tick(self, rd: RunDir) -> None:
        """Send the cancel the first Ctrl-C asked for, to the run followed now, once its window
        has passed."""
        if self.state != "pending" or time.monotonic() < self.deadline:
            return
        self.state = "sending"
        from fttui.core.run.control.executors import executor_for

        executor_for(rd).cancel()
        self.state = "sent"
        print("fttui: cancel sent: the run is stopping", file=sys.stderr, flush=True)
        if self.detach_when_sent:
            raise KeyboardInterrupt

    def detached_line(self, run_id: str) -> str:
        """What is said on detaching: whether the run goes on, in truth."""
        if self.state == "sent":
            return (
                f"fttui: detached; the cancel was already sent and cannot be withdrawn: the run is stopping "
                f"(fttui attach {run_id} follows it)"
            )
        if self.state in ("pending", "withdrawn"):
            return f"fttui: cancel withdrawn (it was never sent); detached; the run goes on: fttui attach {run_id}"
        return f"fttui: detached; the run goes on: fttui attach {run_id}"
