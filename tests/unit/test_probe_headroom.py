"""A launched trial's headroom from its ranks' events (fttui.core.experiments.headroom), and the
launched probe's search with it: predictions from the headroom, within the launches said up front.

Fake events and fake trials only (tests/e2e/test_oom_probe.py runs real launched probes)."""

from __future__ import annotations

import pytest

from fttui.core.experiments import launched
from fttui.core.experiments import headroom
from fttui.core.experiments.headroom import Headroom
from fttui.core.experiments.probe import Prober
from fttui.core.experiments.trials import Trial
from fttui.core.profiles import load_profile
from fttui.core.run.files.events import EndEvent, StartEvent, parse_event

MIB = 2**20


def trial_headroom(events: list[dict], world_size: int) -> Headroom:
    return headroom.trial_headroom([parse_event(e) for e in events], world_size)


def rank_headroom(start: dict, end: dict, step_reserved_mb: float | None = None) -> Headroom:
    return headroom.rank_headroom(parse_event(start), parse_event(end), step_reserved_mb)


def _host_rank(rank: int, rlimit_mb: float, begin_mb: float, peak_mb: float) -> list[dict]:
    limits = {"host_memory_bytes": 64 * MIB, "rlimit_as_bytes": int(rlimit_mb * MIB), "vm_base_bytes": 0}
    start = StartEvent(rank=rank, source="worker", vm_mb=begin_mb, extra={"limits": limits, "device": "cpu"})
    end = EndEvent(rank=rank, source="worker", step=1, peak_host_vm_mb=peak_mb)
    return [start.to_dict(), {"event": "step", "rank": rank, "step": 1}, end.to_dict()]


def test_host_headroom_is_the_smallest_over_the_ranks():
    # rank 0: 900 - 880 = 20 MiB left; rank 1: 910 - 895.5 = 14.5 MiB left: rank 1 decides
    events = _host_rank(0, 900, 850, 880) + _host_rank(1, 910, 860, 895.5)
    h = trial_headroom(events, world_size=2)
    assert h == Headroom(14.5, 35.5)
    # the same two ways: each rank's RLIMIT_AS minus its VmPeak, as written in its own events
    per = {e["rank"]: e for e in events if e["event"] == "start"}
    peaks = {e["rank"]: e["peak_host_vm_mb"] for e in events if e["event"] == "end"}
    assert h.headroom_mb == min(per[r]["limits"]["rlimit_as_bytes"] / MIB - peaks[r] for r in (0, 1))


def test_no_headroom_without_every_rank_or_a_limit():
    both = _host_rank(0, 900, 850, 880) + _host_rank(1, 910, 860, 895.5)
    assert trial_headroom(both[:-1], world_size=2) == Headroom(None)  # rank 1 never ended (an OOM)
    assert trial_headroom(_host_rank(0, 900, 850, 880), world_size=2) == Headroom(None)
    no_limit = [dict(e, limits={}) if e["event"] == "start" else e for e in both]
    assert trial_headroom(no_limit, world_size=2) == Headroom(None)
    # a supervisor's line with rank -1 is no rank
    assert trial_headroom(both + [{"event": "end", "rank": -1, "source": "supervisor"}], 2) == Headroom(14.5, 35.5)


def test_gpu_headroom_counts_against_the_limit_or_the_card():
    start = {"event": "start", "device": "cuda", "torch_reserved_mb": 1000.0,
             "limits": {"gpu_memory_bytes": 8 * 1024 * MIB, "applied": True}}
    end = {"event": "end", "torch_peak_reserved_mb": 5000.0, "gpu_total_mb": 81559.0, "peak_host_vm_mb": 9e4}
    assert rank_headroom(start, end) == Headroom(8192 - 5000, 4000)  # limits.gpu_memory applied
    card = dict(start, limits={"gpu_memory_bytes": 8 * 1024 * MIB, "applied": False})
    assert rank_headroom(card, end) == Headroom(81559 - 5000, 4000)  # not applied: the card's total
    # an end event without the peak: the rank's step events give it
    events = [dict(start, rank=0), {"event": "step", "rank": 0, "torch_peak_reserved_mb": 4800.0},
              {"event": "step", "rank": 0, "torch_peak_reserved_mb": 5100.0},
              {"event": "end", "rank": 0, "gpu_total_mb": 81559.0}]
    assert trial_headroom(events, 1) == Headroom(8192 - 5100, 4100)


def test_end_event_writes_its_memory_only_where_measured():
    assert "peak_host_vm_mb" not in EndEvent(step=3).to_dict()
    assert EndEvent(step=3, peak_host_vm_mb=1.5).to_dict()["peak_host_vm_mb"] == 1.5


def test_an_oom_trial_has_no_headroom(monkeypatch, fttui_home):
    """LaunchedTrial._trial fills the headroom for a fit only."""
    from fttui.core.run.files.statusfile import FinalStatus

    events = _host_rank(0, 900, 850, 880) + _host_rank(1, 910, 860, 895.5)
    monkeypatch.setattr(launched, "read_events", lambda path: [parse_event(e) for e in events])
    resolved = load_profile("tiny-lora", ["gpus=0", "devices.cpu_processes=2"])
    t = launched.LaunchedTrial(resolved, "batch_size", 4, 1, run_id="p-load1", group="p", load=1)
    from fttui.core.run.fold.state import RunState

    snap = RunState().snapshot()
    fit = t._trial(FinalStatus("completed"), snap, {})
    oom = t._trial(FinalStatus("oom", error="out of memory", oom_kind="cpu"), snap, {})
    assert (fit.status, fit.headroom_mb, fit.steps_mb) == ("fit", 14.5, 35.5)
    assert (oom.status, oom.headroom_mb, oom.steps_mb) == ("oom", None, None)


class _MemTrial:
    """A launched trial of a linear memory model: each rank's peak = FIXED + G * value; the budget
    BUDGET; a step's own fixed costs STEP_FIXED count in what the batches added."""

    BUDGET, FIXED, G, STEP_FIXED = 64.0, 20.0, 3.3, 4.0
    launched: list[int] = []

    def __init__(self, resolved, param, value, steps, *, run_id, group, load, data=False):
        self.resolved, self.value, self.load = resolved, value, load
        _MemTrial.launched.append(value)

    def run(self, on_log=None):
        peak = self.FIXED + self.G * self.value
        fit = peak <= self.BUDGET
        return Trial(value=self.value, status="fit" if fit else "oom", load=self.load, clean=True, fresh=True,
                     oom_kind=None if fit else "cpu", headroom_mb=round(self.BUDGET - peak, 2) if fit else None,
                     steps_mb=round(self.STEP_FIXED + self.G * self.value, 2) if fit else None), False

    def stop(self, wait=True):
        pass


@pytest.mark.parametrize("start, g, expect", [
    # boundary 13 (20 + 3.3 * 13 = 62.9): the first fit's batches bound the growth from above
    # (8, 16, 12, 14, 13 blind); the first prediction lies below the boundary, the second is exact
    (8, 3.3, [8, 12, 13, 14]),
    (None, 3.3, [1, 6, 13, 14]),  # (1, 2, 4, 8, 16, 12, 14, 13 blind)
    (64, 3.3, [64, 32, 16, 8, 12, 13, 14]),  # no fit yet: halving as before
    (2, 0.05, [2, 23, 128]),  # everything fits: the end of the range is checked, not 127
])
def test_launched_search_predicts_from_the_headroom(start, g, expect, monkeypatch, fttui_home):
    monkeypatch.setattr(launched, "LaunchedTrial", _MemTrial)
    monkeypatch.setattr(_MemTrial, "launched", [])
    monkeypatch.setattr(_MemTrial, "G", g)
    resolved = load_profile("tiny-lora", ["gpus=0", "devices.cpu_processes=2"])
    p = Prober(resolved, lo=1, hi=128, steps=1, start=start)
    res = p.run()
    assert _MemTrial.launched == expect
    assert res.exact and res.model_loads == len(expect) <= p.max_loads == launched.max_launches(1, 128)


def test_predictions_that_keep_missing_stay_within_the_launches_said(monkeypatch, fttui_home):
    """Fits that report far more headroom than the value above them has: every prediction
    overshoots; the search still closes within max_launches (halving takes over)."""

    class Liar(_MemTrial):
        def run(self, on_log=None):
            t, m = super().run(on_log)
            if t.status == "fit":
                t.headroom_mb, t.steps_mb = 500.0, 0.01
            return t, m

    monkeypatch.setattr(launched, "LaunchedTrial", Liar)
    monkeypatch.setattr(_MemTrial, "launched", [])
    resolved = load_profile("tiny-lora", ["gpus=0", "devices.cpu_processes=2"])
    p = Prober(resolved, lo=1, hi=1024, steps=1, start=1)
    res = p.run()
    assert res.exact and (res.largest_fit, res.smallest_oom) == (13, 14)
    assert res.model_loads <= p.max_loads == launched.max_launches(1, 1024)
