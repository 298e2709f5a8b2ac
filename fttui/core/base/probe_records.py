"""The probe worker's event records (fttui/worker/probe.py: a probe's first load climbs inside one
process): its start, each trial's start and result, the range's cap, the next guess and its end.
They join :data:`fttui.core.base.event_records.RECORDS` when this module is imported (the events
module does), so a parser in fttui reads them; the Trainer callback loaded by path in a user's
Python never writes them and reads none. Stdlib only, as the records it extends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from fttui.core.base.event_records import RECORDS, Event

__all__ = ["ProbeStartEvent", "TrialStartEvent", "TrialEvent", "ProbeCapEvent", "ProbeGuessEvent", "ProbeEndEvent"]


@dataclass(frozen=True, kw_only=True)
class ProbeStartEvent(Event):
    """The probe worker's process loaded its model (fttui/worker/probe.py) and climbs ``param``
    from ``start`` to ``hi``."""

    EVENT: ClassVar[str] = "probe_start"
    SPARSE: ClassVar[bool] = True
    param: str | None = None
    start: int | None = None
    hi: int | None = None
    growth: str | None = None
    params_total: int | None = None
    params_trainable: int | None = None
    limits: dict[str, Any] | None = None
    env: dict[str, Any] | None = None
    setup_time: float | None = None


@dataclass(frozen=True, kw_only=True)
class TrialStartEvent(Event):
    """A trial of ``value`` begins (``clean``: no OOM in this process before; ``fresh``: its first)."""

    EVENT: ClassVar[str] = "trial_start"
    SPARSE: ClassVar[bool] = True
    value: int | None = None
    clean: bool | None = None
    fresh: bool | None = None


@dataclass(frozen=True, kw_only=True)
class TrialEvent(Event):
    """A trial's result: ``status`` ``fit`` or ``oom``, its peaks, speed and headroom."""

    EVENT: ClassVar[str] = "trial"
    SPARSE: ClassVar[bool] = True
    value: int | None = None
    status: str | None = None
    clean: bool | None = None
    fresh: bool | None = None
    oom_kind: str | None = None
    message: str | None = None
    steps: int | None = None
    step_time: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    peak_torch_reserved_mb: list[float] | None = None
    peak_host_rss_mb: float | None = None
    headroom_mb: float | None = None
    longest_seq: int | None = None


@dataclass(frozen=True, kw_only=True)
class ProbeCapEvent(Event):
    """The probed range ends at ``hi`` (``max_seq_len`` above the model's positions)."""

    EVENT: ClassVar[str] = "probe_cap"
    SPARSE: ClassVar[bool] = True
    hi: int | None = None


@dataclass(frozen=True, kw_only=True)
class ProbeGuessEvent(Event):
    """After the first OOM, the bisection's bounds (a guide for the next fresh process)."""

    EVENT: ClassVar[str] = "probe_guess"
    SPARSE: ClassVar[bool] = True
    largest_fit: int | None = None
    smallest_oom: int | None = None


@dataclass(frozen=True, kw_only=True)
class ProbeEndEvent(Event):
    """The probe worker's process is done: the bounds it found."""

    EVENT: ClassVar[str] = "probe_end"
    SPARSE: ClassVar[bool] = True
    largest_fit: int | None = None
    smallest_oom: int | None = None


RECORDS.update(
    {c.EVENT: c for c in (ProbeStartEvent, TrialStartEvent, TrialEvent, ProbeCapEvent, ProbeGuessEvent, ProbeEndEvent)}
)
