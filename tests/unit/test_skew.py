"""The slow rank (issue 39 item 1): each rank's blocked time in collectives
(fttui.integrations.commwait) and the straggler the fold names from it (fttui.core.run.fold.skew)."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import time

from fttui.core.base.event_records import StartEvent, StepEvent
from fttui.core.run.fold import skew
from fttui.core.run.fold.state import RunState
from fttui.integrations.commwait import CommClock
from tests.conftest import fttui_env


def _run(steps: int, slow: int | None, seed: int = 0, nodes=("n1", "n1", "n2", "n2")) -> RunState:
    """A 4-rank run's events: each step 50 ms of compute (+-20% noise) and a 5 ms transfer; rank
    ``slow``, when given, is stopped 200 ms in every fourth step, which the others wait out."""
    rng = random.Random(seed)
    st = RunState()
    for r, node in enumerate(nodes):
        st.apply(StartEvent(rank=r, pid=100 + r, world_size=4, node=node, t=0.0))
    for step in range(1, steps + 1):
        compute = {r: 0.05 * rng.uniform(0.8, 1.2) for r in range(4)}
        if slow is not None and step % 4 == 0:
            compute[slow] += 0.2
        end = max(compute.values()) + 0.005
        for r in range(4):
            st.apply(StepEvent(rank=r, pid=100 + r, step=step, step_time=end, comm_wait_s=end - compute[r],
                               t=float(step)))
    return st


def test_a_rank_the_others_wait_for_is_named_with_its_node():
    st = _run(30, slow=2)
    snap = st.snapshot()
    assert snap.skew.rank == 2 and snap.skew.node == "n2"
    assert snap.straggler.startswith("rank 2 on n2 computes ") and "the others wait for it" in snap.straggler
    # the others waited 200 ms in 1 of 4 steps of ~105 ms on average: about 45% of each step
    assert 0.35 < snap.skew.share < 0.55
    by = {r.rank: r for r in snap.skew.ranks}
    assert by[2].wait_share < min(by[r].wait_share for r in (0, 1, 3))
    assert snap.skew.skew >= skew.SKEW_AT
    assert snap.skew_worst.rank == 2


def test_named_within_twenty_steps_and_only_once_it_held():
    st = RunState()
    for r in range(4):
        st.apply(StartEvent(rank=r, pid=100 + r, world_size=4, node="n1", t=0.0))
    named_at = None
    rng = random.Random(1)
    for step in range(1, 40):
        compute = {r: 0.05 * rng.uniform(0.9, 1.1) for r in range(4)}
        if step % 3 == 0:
            compute[3] += 0.15
        end = max(compute.values()) + 0.005
        for r in range(4):
            st.apply(StepEvent(rank=r, pid=100 + r, step=step, step_time=end, comm_wait_s=end - compute[r]))
        if named_at is None and st.snapshot().skew is not None and st.snapshot().skew.rank == 3:
            named_at = step
    assert named_at is not None and named_at <= 20
    # judged once MIN_STEPS steady steps are in, named after HELD windows in a row
    assert named_at >= 1 + skew.MIN_STEPS + skew.HELD - 1


def test_noise_alone_names_nobody():
    for seed in range(5):
        snap = _run(100, slow=None, seed=seed).snapshot()
        assert snap.skew is not None and snap.skew.rank is None and snap.straggler is None
        assert snap.skew_worst.rank is None


def test_one_rank_two_ranks_without_timing_and_unfinished_steps():
    st = RunState()
    st.apply(StepEvent(rank=0, step=5, step_time=0.1, comm_wait_s=0.0))
    assert st.snapshot().skew is None  # one rank: nothing to compare
    st = RunState()  # an older fttui's events: no blocked time, no judgement
    for step in range(1, 20):
        for r in range(2):
            st.apply(StepEvent(rank=r, step=step, step_time=0.1))
    assert st.snapshot().skew is None and st.snapshot().straggler is None
    # a rank that stopped reporting leaves its steps unfinished: the others' are kept bounded
    fold = skew.SkewFold()
    for r in range(2):
        fold.on_start(StartEvent(rank=r), r)
    for step in range(2, 500):
        fold.on_step(StepEvent(rank=0, step=step, step_time=0.1, comm_wait_s=0.05), 0, step)
    assert len(fold._pending) <= 65 and fold.now() is None


def test_the_row_keeps_the_worst_window():
    from fttui.core.results.columns import BY_NAME

    st = _run(25, slow=1)
    # then the slow rank recovers: the window forgets, the row keeps the worst
    for step in range(26, 80):
        for r in range(4):
            st.apply(StepEvent(rank=r, pid=100 + r, step=step, step_time=0.055, comm_wait_s=0.005))
    snap = st.snapshot()
    assert snap.straggler is None and snap.skew_worst.rank == 1

    class C:
        pass

    c = C()
    c.snap = snap
    assert BY_NAME["straggler_rank"].fold(c) == 1
    assert BY_NAME["straggler_node"].fold(c) == "n1"
    assert BY_NAME["straggler"].fold(c) == snap.skew_worst.text
    assert BY_NAME["rank_skew"].fold(c) >= skew.SKEW_AT
    assert 20 < BY_NAME["rank_wait_pct"].fold(c) < 60


def test_clock_times_calls_and_nesting_once():
    clock = CommClock()

    def collective(sleep):
        time.sleep(sleep)

    timed = clock.timed(collective)
    assert clock.timed(timed) is timed  # wrapped once
    timed(0.02)
    wait = clock.timed(lambda: time.sleep(0.03), call=False)  # a work's wait: no call of its own
    wait()
    blocked, calls = clock.take()
    assert calls == 1 and 0.045 <= blocked < 0.5
    assert clock.take() == (0.0, 0)

    outer = clock.timed(lambda: timed(0.01))  # all_gather_object calls all_gather: counted once
    outer()
    assert clock.take()[1] == 1


def test_install_times_a_real_gloo_group_and_ddp_buckets(tmp_path):
    """One gloo rank: the functions wrapped (DDP's buffer broadcast among them), the DDP hook
    timed; nothing installed without a group."""
    code = textwrap.dedent("""
        import os, torch, torch.distributed as dist
        from fttui.integrations.commwait import CommClock, install
        clock = CommClock()
        assert install(clock) is None  # no process group yet
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
        dist.init_process_group("gloo", rank=0, world_size=1)
        lin = torch.nn.Linear(4, 4)
        lin.register_buffer("inv_freq", torch.ones(2))  # a Llama's rotary buffer: DDP sends it before each forward
        model = torch.nn.parallel.DistributedDataParallel(lin)
        assert install(clock, model) == "gloo+ddp"
        assert install(clock, model) == "gloo"  # a second hook is not stacked
        t = torch.ones(3)
        dist.all_reduce(t)
        work = dist.all_reduce(t, async_op=True)
        assert isinstance(work, dist.distributed_c10d.Work)  # torch's own work: FSDP checks it
        work.wait()
        model(torch.ones(2, 4)).sum().backward()
        blocked, calls = clock.take()
        print(calls, blocked >= 0, getattr(dist.distributed_c10d.Work.wait, "_fttui_timed", None) is not None)
        dist.destroy_process_group()
    """)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = subprocess.run([sys.executable, "-c", code], env=fttui_env(PORT=str(port)), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    # two all_reduce calls, the buffers' broadcast before the forward and one DDP bucket
    assert out.stdout.split() == ["4", "True", "True"]


def test_ranks_that_join_later_restart_the_window():
    """A Slurm node's supervisor reads its peers' steps once it finds their run directory: its own
    ranks' steps were complete before, every rank's after (a KeyError once ended the supervisor)."""
    st = RunState()
    for r in (0, 1):
        st.apply(StartEvent(rank=r, pid=100 + r, node="n1"))
    for step in range(1, 10):
        for r in (0, 1):
            st.apply(StepEvent(rank=r, pid=100 + r, step=step, step_time=0.1, comm_wait_s=0.02 * r))
    assert st.snapshot().skew is not None
    for r in (2, 3):
        st.apply_peer(StartEvent(rank=r, pid=200 + r, node="n2"))
    for step in range(10, 40):
        for r in range(4):
            wait = 0.005 if r == 3 else 0.2
            ev = StepEvent(rank=r, pid=100 + r, step=step, step_time=0.3, comm_wait_s=wait)
            st.apply(ev) if r < 2 else st.apply_peer(ev)
    skew_now = st.snapshot().skew
    assert skew_now.rank == 3 and skew_now.node == "n2" and len(skew_now.ranks) == 4
