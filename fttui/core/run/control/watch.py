"""Follow a run directory: fold its events, samples and final status into a RunState until it ends."""

from __future__ import annotations

import time
from collections.abc import Callable

from fttui.core.run.files.events import Event, EventTail, RetryEvent, read_events
from fttui.core.run.files.rundir import RunDir
from fttui.core.run.files.sample_records import SampleTail
from fttui.core.run.files.statusfile import FinalStatus
from fttui.core.run.fold.state import RunState
from fttui.core.run.processes import liveness


class RunFollower:
    """Incremental view of one run directory; call ``poll()`` at the refresh rate."""

    def __init__(self, rd: RunDir):
        self.rd = rd
        self.state = RunState.for_profile(rd.profile())
        self.events = EventTail(rd.events_path)
        self.samples = SampleTail(rd.samples_path)
        self.final: FinalStatus | None = None  # status.json, once the supervisor wrote it
        self.new_events: list[Event] = []

    def poll(self):
        """Read what is new; returns the current snapshot."""
        if self.final is None:
            self.final = self.rd.final_status()
        if self.final is None and not liveness.is_live(self.rd):
            # The supervisor died and the training has ended since: finish the run here.
            from fttui.core.run.supervising.recover import recover

            self.final = recover(self.rd) or self.rd.final_status()
        self.new_events = self.events.read_new()
        for ev in self.new_events:
            self.state.apply(ev)
        for s in self.samples.read_new():
            self.state.apply_sample(s)
        if self.final is not None:
            self.state.set_final(self.final)
        return self.state.snapshot()

    @property
    def done(self) -> bool:
        return self.final is not None

    def lost(self) -> bool:
        """No final status and nobody at work: the supervisor is gone and the run could not be
        finished from what it left (or another command is finishing it right now). A status
        written since the last poll is read first: a run that just finished is not lost."""
        if self.final is None:
            self.final = self.rd.final_status()
        return self.final is None and not liveness.is_live(self.rd)


def next_attempt(rd: RunDir, run_id: str | None) -> RunDir | None:
    """The run ``run_id`` that continues ``rd`` after its out of memory (the snapshot's
    ``retried_as``, from ``rd``'s ``retry`` event, written before its ``status.json``:
    fttui.core.run.launching.oomretry), when its directory is there; else None."""
    if not isinstance(run_id, str) or not run_id or "/" in run_id or run_id.startswith("."):
        return None
    found = RunDir(rd.path.parent / run_id)
    return found if found.exists() else None


def attempts(rd: RunDir) -> list[RunDir]:
    """``rd`` and the attempts that continued it after an out of memory, in order."""
    chain = [rd]
    while True:
        retries = [e for e in read_events(chain[-1].events_path) if isinstance(e, RetryEvent)]
        nxt = next_attempt(chain[-1], retries[-1].next_run) if retries else None
        if nxt is None or nxt.path in {r.path for r in chain}:
            return chain
        chain.append(nxt)


def follow(
    rd: RunDir, on_update: Callable, interval: float = 0.5, should_stop: Callable[[], bool] = lambda: False
) -> RunFollower:
    f = RunFollower(rd)
    while True:
        snap = f.poll()
        on_update(f, snap)
        if f.done or f.lost() or should_stop():
            return f
        time.sleep(interval)
