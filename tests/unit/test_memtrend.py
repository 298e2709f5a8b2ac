"""Memory that creeps (issue 25 part 2): the robust trend, its evidence rule, the warning and its
way through the fold, with synthetic step events (no training)."""

from __future__ import annotations

import math
import random

from fttui.core.run.fold.memtrend import MemPoint, theil_sen, trend, warnings, rank_memory
from fttui.core.run.files.sample_records import Sample
from fttui.core.run.fold.state import RunState
from fttui.monitor import HostSnapshot


def _step(step: int, rank: int = 0, **mem) -> dict:
    return {"event": "step", "t": 1000.0 + step, "rank": rank, "step": step, "total_steps": 2000,
            "samples": step * 4, "train_time": step * 0.5, **mem}


def _sample(total_mb: float, used_mb: float, t: float = 999.0) -> Sample:
    return Sample(t=t, host=HostSnapshot(ram_total_mb=total_mb, ram_used_mb=used_mb))


def steady(step: int, rng: random.Random) -> dict:
    """A healthy GPU step: the first step allocates the optimizer states, allocated memory saws
    up and down with the batch length (a long batch every 7 steps, a cache flush every 50), noise."""
    base = 6000.0 if step > 1 else 2000.0
    alloc = base + 900.0 * (step % 7 == 0) + rng.uniform(-40, 40)
    reserved = 8200.0 + (300.0 if step % 50 < 25 else 0.0) + rng.uniform(-2, 2)
    return dict(torch_alloc_mb=alloc, torch_reserved_mb=reserved, cuda_free_mb=24000.0 - reserved,
                rss_mb=3100.0 + 200.0 * math.sin(step / 9) + rng.uniform(-30, 30), vm_mb=40000.0)


def test_theil_sen_ignores_an_outlier():
    pts = [(i, 10.0 * i) for i in range(20)] + [(20, 10000.0)]
    assert theil_sen(pts) == 10.0
    assert theil_sen([(1, 5.0)]) is None


def test_a_sawtooth_is_no_trend_a_creep_is():
    saw = [(s, 100.0 * (s % 10)) for s in range(4, 60)]  # rises 9 steps in 10, freed every 10th
    t = trend(saw)
    assert not t.rising
    creep = [(s, 1000.0 + 40.0 * s + (15 if s % 3 else -15)) for s in range(1, 60)]
    t = trend(creep)
    assert t.rising and abs(t.slope - 40.0) < 1.0 and t.steps == 48


def test_minimum_evidence():
    # a real slope, but too few steps after the warm-up to say so
    assert not trend([(s, 40.0 * s) for s in range(1, 14)]).rising
    # many steps, a rise of a few MiB: noise, not a leak
    assert not trend([(s, 5000.0 + 0.1 * s) for s in range(1, 100)]).rising


def test_a_steady_run_never_warns_over_500_steps():
    rng = random.Random(7)
    st = RunState(oom_warn_steps=10_000)  # the widest horizon: any rising trend would warn
    st.apply({"event": "start", "t": 999.0, "rank": 0, "total_steps": 2000})
    st.apply_sample(_sample(64000.0, 20000.0))
    for s in range(1, 501):
        st.apply(_step(s, **steady(s, rng)))
        snap = st.snapshot()
        assert snap.memory_warnings == () and snap.memory_warning is None, (s, snap.memory_warning)
    m = snap.rank_memory[0]
    assert m.step == 500 and m.gap_mb == m.reserved_mb - m.alloc_mb
    assert not m.alloc.rising and not m.reserved.rising and not m.rss.rising


def test_a_leak_warns_with_its_rate_and_the_steps_left():
    st = RunState(oom_warn_steps=200)
    st.apply({"event": "start", "t": 999.0, "rank": 0, "total_steps": 2000})
    first = None
    for s in range(1, 300):
        reserved = 8000.0 + 40.0 * s
        st.apply(_step(s, torch_alloc_mb=reserved - 500, torch_reserved_mb=reserved,
                       cuda_free_mb=24000.0 - reserved))
        snap = st.snapshot()
        if snap.memory_warnings and first is None:
            first = s, snap.memory_warnings[0], snap.memory_warning
    assert first is not None
    s, w, text = first
    # the card runs out when 24000 - 8000 - 40 s = 0, at step 400: the warning comes 200 steps before
    assert w.where == "card" and w.figure == "reserved" and w.slope_mb == 40.0
    assert w.steps_left == math.floor((24000.0 - 8000.0 - 40.0 * s) / 40.0)  # the same figure, by hand
    assert s + w.steps_left == 400 and w.steps_left == 200  # at the horizon, not before
    assert text.startswith("rank 0 reserved +40 MiB/step: out of memory in ~")


def test_no_warning_when_the_run_ends_first():
    pts = [MemPoint(s, 1000.0 + 40 * s, 1200.0 + 40 * s, 20000.0 - 40 * s) for s in range(1, 60)]
    ranks = {0: rank_memory(0, pts)}
    assert warnings(ranks, None, horizon=10_000, steps_remaining=None)
    assert warnings(ranks, None, horizon=10_000, steps_remaining=100) == []  # 20000/40 - 59 steps left > 100


def test_host_ranks_add_up_and_address_space():
    def pts(rank_slope):
        return [MemPoint(s, rss=2000.0 + rank_slope * s, vm=30000.0 + rank_slope * s, vm_limit=34000.0)
                for s in range(1, 40)]
    ranks = {0: rank_memory(0, pts(20.0)), 1: rank_memory(1, pts(20.0))}
    found = warnings(ranks, host_available_mb=3000.0, horizon=500)
    host = [w for w in found if w.figure.startswith("RSS")]
    assert len(host) == 1 and host[0].slope_mb == 40.0 and host[0].steps_left == 75
    vm = [w for w in found if w.figure == "address space"]
    assert {w.rank for w in vm} == {0, 1} and vm[0].steps_left == math.floor((34000 - 30000 - 20 * 39) / 20)


def test_the_warning_event_reaches_a_fold_without_the_steps():
    st = RunState()
    st.apply({"event": "memory_warning", "t": 5.0, "rank": -1, "source": "supervisor",
              "message": "rank 0 RSS +32 MiB/step: out of memory in ~20 steps (640 MiB left of host memory)"})
    assert st.snapshot().memory_warning.startswith("rank 0 RSS +32 MiB/step")
