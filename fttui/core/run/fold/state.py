"""``RunState``: a pure fold of run events, resource samples and the final status into a
``RunSnapshot``.

No I/O, stdlib only. See docs/architecture.md, sections "Events" and "Monitor core". The record
it produces is ``fttui.core.run.fold.snapshot.RunSnapshot``. The fold is split by concern, one part
per module, each folding what it needs and giving its snapshot fields: steps and throughput
(:mod:`fttui.core.run.fold.fold_progress`; the rates and histories are ``fttui.core.run.fold.rates``),
memory (:mod:`fttui.core.run.fold.fold_memory`), phases and verdict
(:mod:`fttui.core.run.fold.fold_verdict`); the per-card figures (headroom, the CUDA caching
allocator's retries, the near-OOM warning, MFU) are ``fttui.core.run.fold.perf``'s. ``eta_s`` is
``(total_steps - step) * seconds_per_step``; 0 once completed, ``None`` when the total is unknown
or the run failed. A run's fold is made by one constructor, :meth:`RunState.for_profile`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from fttui.core.base.event_records import (
    AttemptEvent,
    EndEvent,
    ErrorEvent,
    EvalEvent,
    Event,
    ExitEvent,
    ForecastEvent,
    LaunchEvent,
    MemoryWarningEvent,
    PhaseEvent,
    ResumedEvent,
    RetryEvent,
    SaveEvent,
    StalledEvent,
    StartEvent,
    StepEvent,
    StragglerEvent,
)
from fttui.core.profiles.typed import Profile
from fttui.core.run.files.events import parse_event
from fttui.core.run.files.sample_records import Sample
from fttui.core.run.files.statusfile import FinalStatus
from fttui.core.run.fold.fold_memory import MemoryFold
from fttui.core.run.fold.fold_progress import ProgressFold
from fttui.core.run.fold.fold_verdict import STATUS_ORDER, VerdictFold
from fttui.core.run.fold.memtrend import DEFAULT_HORIZON
from fttui.core.run.fold.perf import with_perf
from fttui.core.run.fold.skew import SkewFold
from fttui.core.run.fold.snapshot import RunSnapshot, to_int
from fttui.core.run.fold.whyslow import SpeedFold, why_slow
from fttui.monitor import num

__all__ = ["RunState", "RunSnapshot", "STATUS_ORDER"]

#: the kinds the fold reads (the others: a tracker, a cancel, a fault, the probe worker's, an
#: unknown kind, leave the snapshot as it was, ``events`` and ``last_t`` included)
_FOLDED = (
    LaunchEvent,
    StartEvent,
    StepEvent,
    EndEvent,
    ErrorEvent,
    ExitEvent,
    StalledEvent,
    ResumedEvent,
    PhaseEvent,
    EvalEvent,
    SaveEvent,
    AttemptEvent,
    RetryEvent,
    ForecastEvent,
    MemoryWarningEvent,
    StragglerEvent,
)


class RunState:
    """Fold the event records of ``events.jsonl`` (``apply``: it ``match``es on the record's type)
    and the sample records of ``samples.jsonl`` (``apply_sample``) into a ``RunSnapshot`` (``snapshot()``);
    ``set_final`` folds the supervisor's ``status.json``. Tolerates unknown kinds, missing keys
    and events from several ranks (``rank``, default 0)."""

    def __init__(
        self,
        warmup_exclude_steps: int = 1,
        history: int = 240,
        oom_warn_steps: int = DEFAULT_HORIZON,
        command: bool = False,
    ) -> None:
        self.command = command  # a user command's run: it reports no model phases of its own
        self.warmup_exclude_steps = int(warmup_exclude_steps)
        self.history = max(1, int(history))
        self.progress = ProgressFold(self.warmup_exclude_steps, self.history)
        self.memory = MemoryFold(oom_warn_steps)
        self.speed = SpeedFold(self.warmup_exclude_steps)
        self.skew = SkewFold(self.warmup_exclude_steps)
        self.verdict = VerdictFold()
        self._last_t: float | None = None
        self._events = 0
        self._samples_seen = 0

    @classmethod
    def for_profile(cls, profile: Profile | None, history: int = 240) -> RunState:
        """The fold of a run of ``profile`` (``RunDir.profile()``: typed, or ``None`` when the run
        has none): its ``train.warmup_exclude_steps`` steps are left out of the steady rates (1
        without a profile, or when it says something that is no integer); its
        ``monitor.oom_warn_steps`` is the memory creep warning's horizon; a profile with a
        ``command.argv`` makes the fold of a user command's run (``RunSnapshot.command``)."""
        value = profile.train.warmup_exclude_steps if profile is not None else 1
        horizon = profile.monitor.oom_warn_steps if profile is not None else DEFAULT_HORIZON
        return cls(
            warmup_exclude_steps=_int(value, 1),
            history=history,
            oom_warn_steps=_int(horizon, DEFAULT_HORIZON),
            command=bool(profile is not None and profile.command.argv),
        )

    def replay(self, events: Iterable[Event | Mapping[str, Any]], samples: Iterable[Sample] = ()) -> RunState:
        """Fold every event, then every sample; returns the fold."""
        self.apply_all(events)
        for sample in samples:
            self.apply_sample(sample)
        return self

    # ------------------------------------------------------------------ events
    def apply(self, event: Event | Mapping[str, Any]) -> None:
        """Fold one event record (a parsed line's object is read as its record first: tests and
        scripts hand those); kinds the fold does not use are left out, ``last_t`` included."""
        ev = event if isinstance(event, Event) else parse_event(event)
        if not isinstance(ev, _FOLDED):
            return
        self._events += 1
        t = num(ev.t)
        if t is not None and (self._last_t is None or t > self._last_t):
            self._last_t = t
        match ev:
            case LaunchEvent():  # the supervisor's: elapsed time counts from here (model loading included)
                self.verdict.started(t)
            case StartEvent():
                slot = self.progress.slot(ev)
                self.progress.on_start(ev, slot)
                self.skew.on_start(ev, slot)
                self.verdict.started(t)
                self.verdict.set_status("running")
            case StepEvent():
                self._on_step(ev, t)
            case EndEvent():
                self.verdict.phases.end(t)
                self.progress.on_end(ev, self.progress.slot(ev))
                self.verdict.set_status("completed")
            case ErrorEvent():
                self.verdict.on_error(ev)
            case ExitEvent():
                self.verdict.on_exit(ev, self.progress.step())
            case StalledEvent():  # no step for the stall timeout while the process lived
                self.verdict.stalled = str(ev.message or "no step for the stall timeout")
                self.verdict.hang = ev.where or self.verdict.hang
            case ResumedEvent():
                self.verdict.stalled = ""
            case PhaseEvent():  # a startup phase began (fttui.core.run.fold.phases); the first step ends them
                self.verdict.phases.on_event(ev, t)
            case EvalEvent() | SaveEvent() | AttemptEvent() | RetryEvent():
                self.verdict.on_kept(ev)
            case ForecastEvent():  # the launch's time forecast: the ETA until the measured rate is steady
                self.progress.on_forecast(ev)
            case MemoryWarningEvent():
                self.memory.on_warning(ev)
            case StragglerEvent():  # the supervisor's, over every node's ranks
                self.skew.on_told(ev)

    def apply_peer(self, event: Event) -> None:
        """A start or step event of another node of this Slurm job (its own run directory): folded
        into the ranks' skew only, under its global rank (fttui.core.run.fold.skew)."""
        rank = to_int(event.rank)
        if rank is None or rank < 0:
            return
        if isinstance(event, StartEvent):
            self.skew.on_start(event, rank)
        elif isinstance(event, StepEvent):
            step = to_int(event.step)
            if step is not None:
                self.skew.on_step(event, rank, step)

    def apply_all(self, events: Iterable[Event | Mapping[str, Any]]) -> None:
        for ev in events:
            self.apply(ev)

    def _on_step(self, ev: StepEvent, t: float | None) -> None:
        step = to_int(ev.step)
        if step is None:
            return
        rank = self.progress.slot(ev)
        self.verdict.set_status("running")
        self.verdict.phases.end(t)
        if self.progress.on_step(ev, rank, step, t):
            self.memory.on_step(ev, rank)
            self.speed.on_step(ev, step)
            self.skew.on_step(ev, rank, step)

    def set_final(self, status: FinalStatus | dict[str, Any] | None) -> None:
        """Fold the supervisor's final status (``status.json``, as a ``FinalStatus`` or its
        object): its status wins over everything folded, its error message and OOM kind over the
        events'; the return code fills in when no exit event gave one."""
        final = status if isinstance(status, FinalStatus) else FinalStatus.from_dict(status)
        if final is not None:
            self.verdict.set_final(final)

    # ------------------------------------------------------------------ samples
    def apply_sample(self, sample: Sample) -> None:
        """Fold one sample record (:func:`fttui.core.run.files.sample_records.read_samples`'s)."""
        if not isinstance(sample, Sample):
            return
        self._samples_seen += 1
        if self._last_t is None or sample.t > self._last_t:
            self._last_t = sample.t
        self.memory.on_sample(sample)
        self.speed.on_sample(sample)
        if sample.host is not None:
            self.verdict.phases.on_sample(sample.host, sample.t)

    # ------------------------------------------------------------------ snapshot
    @property
    def status(self) -> str:
        return self.verdict.current()

    def snapshot(self) -> RunSnapshot:
        verdict = self.verdict.fields()
        started = verdict["started_t"]
        wall = max(0.0, self._last_t - started) if started is not None and self._last_t is not None else None
        progress, memory = self.progress.fields(verdict["status"]), self.memory.fields()
        memory.update(self.memory.warnings(memory, progress["total_steps"], progress["step"]))
        snap = with_perf(
            RunSnapshot(  # per-card headroom, retries, MFU: fttui.core.run.fold.perf
                **verdict,
                **progress,
                **memory,
                speed=self.speed.fields(),
                command=self.command,
                last_t=self._last_t,
                wall_elapsed=wall,
                events=self._events,
                samples_seen=self._samples_seen,
            )
        )
        cards = tuple(c.index for c in snap.cards if c.index is not None)
        skew = self.skew.now()
        return replace(
            snap,
            why_slow=why_slow(snap.speed, cards),
            skew=skew,
            skew_worst=self.skew.worst(),
            straggler=skew.text if skew is not None else None,
        )


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
