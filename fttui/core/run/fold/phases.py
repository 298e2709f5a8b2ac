"""Startup phases: what a run is doing before its first training step, and since when.

The worker announces each phase as it begins with a ``phase`` event (``{"event": "phase",
"phase": NAME, "t", "rank", "source": "worker"}``), in the order of :data:`PHASES`. The
supervisor's host samples add what the worker cannot announce: a sample whose ``build_nprocs``
is above 0 (compilers and build tools in the run's process tree, ``fttui.monitor.host``) shows
the ``building-ops`` phase from the first such sample until the build tools are gone. The first
``step`` (or ``end``) event ends the startup phases. :class:`PhaseFold` is the fold
(``RunState`` feeds it); :func:`phase_text` and :func:`mmss` are the words and the clock the
views print. Pure and stdlib only: elapsed times come from the events' and samples' own ``t``.
"""

from __future__ import annotations

from fttui.core.base.event_records import PhaseEvent
from fttui.monitor import HostSnapshot

__all__ = [
    "PHASES",
    "PHASE_TEXT",
    "LOADING_MODEL",
    "PREPARING_DATA",
    "BUILDING_OPS",
    "FIRST_STEP",
    "PhaseFold",
    "phase_text",
    "mmss",
]

LOADING_MODEL = "loading-model"  # imports, tokenizer, building or loading the model (and its weights)
PREPARING_DATA = "preparing-data"  # tokenising the data set
BUILDING_OPS = "building-ops"  # DeepSpeed engine and its ops (JIT-built on a first run)
FIRST_STEP = "first-step"  # the Trainer's preparation and the first optimizer step

#: The startup phases in the order the worker runs them.
PHASES = (LOADING_MODEL, PREPARING_DATA, BUILDING_OPS, FIRST_STEP)
PHASE_TEXT = {
    LOADING_MODEL: "loading the model",
    PREPARING_DATA: "preparing data",
    BUILDING_OPS: "building ops",
    FIRST_STEP: "first step",
}


def phase_text(phase: str | None) -> str:
    """The words of a phase (``"building ops"``); an unknown name as it is, ``""`` for none."""
    if not phase:
        return ""
    return PHASE_TEXT.get(phase, phase.replace("-", " "))


def mmss(seconds: float | None) -> str:
    """``mm:ss`` (``hh:mm:ss`` from an hour on); negative or unknown reads ``00:00``."""
    s = int(max(0.0, seconds or 0.0))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


class PhaseFold:
    """Folds ``phase`` events, host samples and the first step into ``(phase, since)``.

    Worker phases only move forward in :data:`PHASES` order (several ranks announce the same
    phases; the first rank to reach one gives its start). A build seen in two samples in a row
    overlays the worker's phase from the first of them while it lasts (one sample may catch a
    check that is no build: torch runs ``ninja`` on every load of a DeepSpeed op, to find it up to
    date, and a loaded machine's sampler catches it now and then); when the build tools are gone, the worker's phase
    shows
    again with its own start. A later worker phase ends the overlay too (the events and the
    samples are two files, read one after the other), and a sample older than the latest worker
    phase does not start it again."""

    def __init__(self) -> None:
        self._phase: str | None = None
        self._since: float | None = None
        self._build_since: float | None = None
        self._build_seen: float | None = None  # t of the first sample of a build not yet confirmed
        self._event_t: float | None = None  # t of the latest worker phase that moved the phase on
        self._ended = False
        self.ended_t: float | None = None  # t of the step (or end) event that ended the startup
        #: every change of the phase shown, as ``(phase, t of the event or sample that changed it)``
        self.history: list[tuple[str, float | None]] = []

    def _record(self, t: float | None) -> None:
        phase = self.current()[0]
        if phase is not None and (not self.history or self.history[-1][0] != phase):
            self.history.append((phase, t))

    def on_event(self, ev: PhaseEvent, t: float | None) -> None:
        name = ev.phase
        if self._ended or not isinstance(name, str) or not name:
            return
        order = PHASES.index(name) if name in PHASES else None
        cur = PHASES.index(self._phase) if self._phase in PHASES else -1
        if name == self._phase:
            if t is not None and (self._since is None or t < self._since):
                self._since = t
        elif order is None or order > cur:
            self._phase, self._since = name, t
            if name != BUILDING_OPS:
                self._build_since = self._build_seen = None
            if t is not None:
                self._event_t = t if self._event_t is None else max(self._event_t, t)
        self._record(t)

    def on_sample(self, host: HostSnapshot, t: float | None) -> None:
        if self._ended:
            return
        n = host.build_nprocs
        if n is None or (t is not None and self._event_t is not None and t <= self._event_t):
            return
        if n > 0:
            if self._build_seen is None:
                self._build_seen = t  # one sample may have caught a check, not a build: wait for the next
            elif self._build_since is None:
                self._build_since = self._build_seen
                self._record(self._build_since)
                return
        else:
            self._build_since = self._build_seen = None
        self._record(t)

    def end(self, t: float | None = None) -> None:
        """The first step (or the end) came, at ``t``: no startup phase any more."""
        if t is not None and (self.ended_t is None or t < self.ended_t):
            self.ended_t = t
        self._ended = True
        self._phase = self._since = self._build_since = self._build_seen = None

    def current(self) -> tuple[str | None, float | None]:
        """``(phase, since)``: the phase now shown and the ``t`` it began at (``None`` when unknown)."""
        if self._ended:
            return None, None
        if self._build_since is not None:
            since = self._build_since
            if self._phase == BUILDING_OPS and self._since is not None:
                since = min(since, self._since)
            return BUILDING_OPS, since
        return self._phase, self._since
