"""Ctrl-C while a plan's trials run (``--measure``, ``--verify``): noted, never raised.

A KeyboardInterrupt raised where the signal lands can land inside the launch of a trial, after
its supervisor was started and before the trial's run is known to the code that waits for it:
the run then went on untracked. Instead, :class:`CtrlCFlag` installs a SIGINT handler that only
sets a flag; the launch completes, and the wait checks the flag first (the run is then cancelled
and waited for).

The handler is installed explicitly, whatever SIGINT's disposition was: a process started from
a background job of a non-interactive shell (a CI script, ``cmd &``) inherits SIGINT ignored,
and Python then raises no KeyboardInterrupt for it (``kill -INT`` would do nothing). Off the main
thread (the app's workers) no handler can be installed: the flag is then only what
:meth:`CtrlCFlag.set` is told (the app's stop).
"""

from __future__ import annotations

import signal
import threading
from types import TracebackType
from typing import Any

__all__ = ["CtrlCFlag"]


class CtrlCFlag:
    """A context in which SIGINT sets :attr:`asked` instead of raising; the handler before it is
    put back on leaving. Calling the flag says whether a stop was asked."""

    def __init__(self) -> None:
        self.asked = False
        self._old: Any = None
        self._installed = False

    def set(self, *_: Any) -> None:
        """Ask the stop (the SIGINT handler; the app's stop button calls it too)."""
        self.asked = True

    def __call__(self) -> bool:
        return self.asked

    def __enter__(self) -> CtrlCFlag:
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self.set)
            self._installed = True
        return self

    def __exit__(self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._old if self._old is not None else signal.default_int_handler)
            self._installed = False
