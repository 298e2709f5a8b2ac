"""A launched trial's headroom, from its ranks' own events: what lets a launched probe predict.

Every rank of a training run writes, at its end, what its budget needs (the ``end`` event of
:mod:`fttui.core.run.files.events`): its peak address space (VmPeak) and, on a GPU, its peak reserved
memory and its card's total; its ``start`` event has the ``limits`` the worker applied and its
memory when training began. The headroom of one rank is what the one-process probe computes for
its process (fttui.worker.probe.headroom_mb):

  * on a GPU: the budget (``limits.gpu_memory`` where it was applied, else the card's total)
    minus the rank's peak reserved memory;
  * under a host limit: the rank's RLIMIT_AS (``limits.rlimit_as_bytes``) minus its VmPeak.

A trial's headroom is the smallest over its ranks (the rank that runs out first decides), only
for a fit, and only when every rank reported it. ``steps_mb`` is what the batches added on that
rank (its peak minus its memory when training began): at least the growth of the peak per value
times the value, so for a peak that grows linearly with the value (batch size)
``value + headroom / (steps_mb / value)`` never lies above the boundary (the first prediction of
a launched probe, fttui.core.experiments.boundary; sequence length grows faster than linearly
under attention: there it may overshoot, and the search steps back as after any overshoot).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from fttui.core.run.files.events import EndEvent, Event, StartEvent, StepEvent

MIB = 2**20


class Headroom(NamedTuple):
    headroom_mb: float | None
    steps_mb: float | None = None


def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def rank_headroom(start: StartEvent, end: EndEvent, step_reserved_mb: float | None = None) -> Headroom:
    """One rank's headroom from its start and end events (``step_reserved_mb``: the peak reserved
    its step events reported, where the end event has none)."""
    limits = start.limits  # what the worker applied (its start event), not a profile's section
    limits = limits if isinstance(limits, dict) else {}
    peak_res = _num(end.torch_peak_reserved_mb)
    peak_res = peak_res if peak_res is not None else _num(step_reserved_mb)
    if start.device == "cuda" or _num(end.gpu_total_mb) is not None:
        budget = _num(limits.get("gpu_memory_bytes")) if limits.get("applied") else None
        budget = budget / MIB if budget else _num(end.gpu_total_mb)
        if budget is None or peak_res is None:
            return Headroom(None)
        begin = _num(start.torch_reserved_mb)
        return Headroom(round(budget - peak_res, 2), None if begin is None else round(max(0.0, peak_res - begin), 2))
    rlimit = _num(limits.get("rlimit_as_bytes"))
    peak_vm = _num(end.peak_host_vm_mb)
    if not rlimit or peak_vm is None:
        return Headroom(None)
    begin = _num(start.vm_mb)
    return Headroom(round(rlimit / MIB - peak_vm, 2), None if begin is None else round(max(0.0, peak_vm - begin), 2))


def trial_headroom(events: Iterable[Event], world_size: int) -> Headroom:
    """The smallest headroom over the ``world_size`` ranks of one run's event records (with the
    batches' share of that rank), or ``Headroom(None)`` when a rank did not report one."""
    starts: dict[int, StartEvent] = {}
    ends: dict[int, EndEvent] = {}
    reserved: dict[int, float] = {}
    for e in events:
        r = e.rank
        if not isinstance(r, int) or r < 0 or e.source == "supervisor":
            continue
        match e:
            case StartEvent():
                starts[r] = e
            case EndEvent():
                ends[r] = e
            case StepEvent(torch_peak_reserved_mb=peak) if (mb := _num(peak)) is not None:
                reserved[r] = max(reserved.get(r, 0.0), mb)
    ranks = range(max(1, world_size))
    if not all(r in starts and r in ends for r in ranks):
        return Headroom(None)
    per = [rank_headroom(starts[r], ends[r], reserved.get(r)) for r in ranks]
    if any(h.headroom_mb is None for h in per):
        return Headroom(None)
    return min(per, key=lambda h: h.headroom_mb or 0.0)  # none is None (checked above)


__all__ = ["Headroom", "rank_headroom", "trial_headroom"]
