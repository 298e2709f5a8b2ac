"""fttui.core.run.fold.state.RunState: a pure fold of events and samples (hand-computed figures)."""

from __future__ import annotations

import dataclasses

import pytest

from fttui.core.run.files.sample_records import Sample
from fttui.core.run.fold.snapshot import RunSnapshot
from fttui.core.run.fold.state import RunState
from fttui.monitor import GpuSnapshot, HostSnapshot
from tests.helpers import sample_of

T0 = 1000.0


def start(**kw):
    ev = {
        "event": "start", "t": T0, "rank": 0, "source": "worker", "total_steps": 10, "world_size": 1,
        "micro_batch": 4, "grad_accum": 1, "max_seq_len": 128, "num_samples": 40,
        "params_total": 1000, "params_trainable": 10, "config": {"name": "tiny"}, "env": {"torch": "2.x"},
    }
    ev.update(kw)
    return ev


def step(n, tt, st, rank=0, per_step=4, tok=100, pad=128, loss=None, t=None, **kw):
    ev = {
        "event": "step", "t": T0 + 5 + tt if t is None else t, "rank": rank, "step": n, "total_steps": 10,
        "epoch": n / 10, "samples": n * per_step, "tokens": n * per_step * tok,
        "tokens_padded": n * per_step * pad, "loss": 3.0 - 0.1 * n if loss is None else loss,
        "lr": 1e-4, "step_time": st, "train_time": tt,
        "torch_peak_alloc_mb": 100.0 * n, "torch_peak_reserved_mb": 150.0 * n,
    }
    ev.update(kw)
    return ev


# rank 0: step 1 takes 10 s (warm-up), then 2 s per step
R0 = [step(1, 10.0, 10.0), step(2, 12.0, 2.0), step(3, 14.0, 2.0), step(4, 16.0, 2.0)]
# rank 1: step 1 takes 8 s, then 4 s per step
R1 = [step(1, 8.0, 8.0, rank=1), step(2, 12.0, 4.0, rank=1), step(3, 16.0, 4.0, rank=1), step(4, 20.0, 4.0, rank=1)]


def fold(events, **kw) -> RunSnapshot:
    st = RunState(**kw)
    for ev in events:
        st.apply(ev)
    return st.snapshot()


def test_starting_then_running():
    st = RunState()
    assert st.snapshot().status == "starting"
    st.apply(start())
    s = st.snapshot()
    assert s.status == "running"
    assert s.total_steps == 10 and s.world_size == 1 and s.micro_batch == 4 and s.grad_accum == 1
    assert s.params_total == 1000 and s.params_trainable == 10
    assert s.config == {"name": "tiny"} and s.env == {"torch": "2.x"}
    assert s.step is None and s.samples_per_s is None and s.eta_s is None
    assert dataclasses.is_dataclass(s)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.status = "x"  # type: ignore[misc]


def test_single_rank_steady_and_average_rates():
    s = fold([start()] + R0)
    assert s.status == "running"
    assert s.step == 4 and s.total_steps == 10
    assert s.progress == pytest.approx(0.4)
    assert s.epoch == pytest.approx(0.4)
    assert s.samples == 16 and s.tokens == 1600 and s.tokens_padded == 2048
    # steady: from end of step 1 (samples 4, tt 10) to step 4 (samples 16, tt 16)
    assert s.samples_per_s == pytest.approx(12 / 6)
    assert s.tokens_per_s == pytest.approx(1200 / 6)
    assert s.tokens_padded_per_s == pytest.approx(1536 / 6)
    # whole-run average: samples / train_time
    assert s.samples_per_s_avg == pytest.approx(16 / 16)
    assert s.tokens_per_s_avg == pytest.approx(1600 / 16)
    assert s.tokens_padded_per_s_avg == pytest.approx(2048 / 16)
    assert s.seconds_per_step == pytest.approx(2.0)
    assert s.eta_s == pytest.approx((10 - 4) * 2.0)
    assert s.train_time == 16.0
    assert s.loss == pytest.approx(2.6) and s.lr == 1e-4
    assert s.wall_elapsed == pytest.approx(5 + 16)
    assert s.last_progress_t == pytest.approx(T0 + 21)
    assert s.torch_peak_alloc_mb == {0: 400.0} and s.torch_peak_reserved_mb == {0: 600.0}
    # instantaneous histories: step 1 = 4/10, then 4/2
    assert s.samples_per_s_history == pytest.approx((0.4, 2.0, 2.0, 2.0))
    assert s.tokens_per_s_history == pytest.approx((40.0, 200.0, 200.0, 200.0))
    assert s.loss_history == pytest.approx((2.9, 2.8, 2.7, 2.6))


def test_fallback_to_average_before_any_step_beyond_warmup():
    s = fold([start(), R0[0]])
    assert s.samples_per_s == pytest.approx(4 / 10)
    assert s.samples_per_s_avg == pytest.approx(4 / 10)
    assert s.seconds_per_step == pytest.approx(10.0)
    assert s.eta_s == pytest.approx(9 * 10.0)


def test_warmup_exclusion_setting():
    # no exclusion: steady == whole-run average
    s0 = fold([start()] + R0, warmup_exclude_steps=0)
    assert s0.samples_per_s == pytest.approx(16 / 16)
    assert s0.seconds_per_step == pytest.approx(16 / 4)
    # two excluded steps: from end of step 2 (8 samples, tt 12) to step 4
    s2 = fold([start()] + R0, warmup_exclude_steps=2)
    assert s2.samples_per_s == pytest.approx(8 / 4)
    assert s2.seconds_per_step == pytest.approx(2.0)
    # exclusion larger than what has been seen: average
    s9 = fold([start()] + R0, warmup_exclude_steps=9)
    assert s9.samples_per_s == pytest.approx(1.0)


def test_two_ranks_are_summed():
    events = [start(world_size=2)]
    for a, b in zip(R0, R1):
        events += [b, a]  # rank 1 first: the loss must still come from rank 0
    s = fold(events)
    assert s.world_size == 2 and s.ranks == (0, 1)
    assert s.samples == 32 and s.tokens == 3200 and s.tokens_padded == 4096
    assert s.samples_per_s == pytest.approx(12 / 6 + 12 / 12)
    assert s.tokens_per_s == pytest.approx(1200 / 6 + 1200 / 12)
    assert s.samples_per_s_avg == pytest.approx(16 / 16 + 16 / 20)
    assert s.train_time == 20.0  # max over ranks
    assert s.seconds_per_step == pytest.approx(4.0)  # slowest rank
    assert s.eta_s == pytest.approx(6 * 4.0)
    assert s.loss == pytest.approx(2.6)
    assert s.torch_peak_alloc_mb == {0: 400.0, 1: 400.0}
    assert s.samples_per_s_history == pytest.approx((0.4 + 0.5, 3.0, 3.0, 3.0))
    assert len(s.loss_history) == 4


def test_incomplete_newest_step_left_out_of_rate_history():
    st = RunState()
    for a, b in zip(R0, R1):
        st.apply(a)
        st.apply(b)
    st.apply(step(5, 18.0, 2.0))  # rank 1 has not logged step 5 yet
    s = st.snapshot()
    assert s.samples_per_s_history == pytest.approx((0.9, 3.0, 3.0, 3.0))
    assert len(s.loss_history) == 5
    st.apply(step(5, 24.0, 4.0, rank=1))
    assert st.snapshot().samples_per_s_history[-1] == pytest.approx(3.0)


def test_lowest_rank_gives_loss_without_rank0():
    s = fold([step(1, 1.0, 1.0, rank=3, loss=9.0), step(1, 1.0, 1.0, rank=2, loss=7.0)])
    assert s.loss == 7.0
    assert s.status == "running"
    assert s.world_size == 2  # no start event: ranks seen


def test_end_completes():
    s = fold([start()] + R0 + [{"event": "end", "t": T0 + 30, "rank": 0, "step": 4, "train_time": 17.0, "samples": 16, "tokens": 1600, "tokens_padded": 2048}])
    assert s.status == "completed"
    assert s.eta_s == 0.0
    assert s.train_time == 17.0
    assert s.samples_per_s_avg == pytest.approx(16 / 17)
    assert s.samples_per_s == pytest.approx(2.0)  # steady stays on step events
    assert s.wall_elapsed == pytest.approx(30.0)


def test_oom_error():
    st = RunState()
    for ev in [start()] + R0[:2]:
        st.apply(ev)
    st.apply({"event": "error", "t": T0 + 20, "rank": 1, "kind": "oom", "oom_kind": "cuda", "message": "CUDA out of memory", "step": 3, "traceback": "..."})
    st.apply({"event": "exit", "t": T0 + 21, "source": "supervisor", "returncode": 1, "signal": None})
    s = st.snapshot()
    assert s.status == "oom"
    assert s.error == {"kind": "oom", "oom_kind": "cuda", "message": "CUDA out of memory", "step": 3, "rank": 1}
    assert s.eta_s is None
    assert s.returncode == 1
    # a generic error after the OOM does not hide it
    st.apply({"event": "error", "kind": "error", "message": "NCCL timeout", "rank": 0})
    assert st.snapshot().error["kind"] == "oom"


def test_generic_error_and_oom_after_it():
    st = RunState()
    st.apply(start())
    st.apply({"event": "error", "kind": "error", "message": "boom"})
    assert st.snapshot().status == "failed"
    assert st.snapshot().error["rank"] == 0
    st.apply({"event": "error", "kind": "oom", "oom_kind": "host-kill", "message": "killed"})
    s = st.snapshot()
    assert s.status == "oom" and s.error["oom_kind"] == "host-kill"


def test_exit_without_error_events():
    st = RunState()
    st.apply(start())
    st.apply({"event": "exit", "returncode": -9, "signal": 9})
    s = st.snapshot()
    assert s.status == "failed" and "signal 9" in s.error["message"]
    st2 = RunState()
    st2.apply(start())
    st2.apply({"event": "exit", "returncode": 0})
    assert st2.snapshot().status == "completed"


def test_set_final_wins():
    st = RunState()
    st.apply(start())
    st.apply(R0[0])
    st.set_final({"status": "cancelled"})
    assert st.snapshot().status == "cancelled"


def test_history_is_bounded():
    st = RunState(history=5)
    for n in range(1, 21):
        st.apply(step(n, 2.0 * n, 2.0, loss=float(n)))
    s = st.snapshot()
    assert s.loss_history == (16.0, 17.0, 18.0, 19.0, 20.0)
    assert len(s.samples_per_s_history) == 5 and len(s.tokens_per_s_history) == 5


def test_tolerates_junk():
    st = RunState()
    for ev in [None, "x", {}, {"event": "nope"}, {"event": "step"}, {"event": "step", "step": "abc"},
               {"event": "start"}, {"event": "end"}, {"event": "error"}, {"event": "exit"},
               {"event": "step", "step": 1, "samples": "many", "train_time": None, "t": "late"}]:
        st.apply(ev)  # type: ignore[arg-type]
    assert Sample.from_dict({}) is None and Sample.from_dict({"t": "late"}) is None
    junk = Sample.from_dict({"t": 1.0, "gpu": "x", "host": 3})
    assert junk == Sample(t=1.0)
    st.apply_sample(junk)
    st.apply_sample(None)  # type: ignore[arg-type]
    st.apply_sample({"t": 2.0})  # type: ignore[arg-type]
    s = st.snapshot()
    assert s.step == 1 and s.samples_per_s is None and s.eta_s is None


def test_duplicate_step_lines_are_ignored():
    s = fold([start()] + R0 + [R0[-1], R0[1]])
    assert s.samples == 16 and s.samples_per_s == pytest.approx(2.0)
    assert len(s.loss_history) == 4


def gpu_sample(t, used, proc, rss, ram):
    return sample_of({
        "t": t,
        "gpu": {"available": True, "reason": None, "driver": "550", "cuda": "12.4", "gpus": [
            {"index": 0, "name": "G", "uuid": "u0", "mem_used_mb": used[0], "mem_total_mb": 24000.0, "util_pct": 90.0, "power_w": 300.0, "temp_c": 60.0, "proc_mem_mb": proc[0]},
            {"index": 1, "name": "G", "uuid": "u1", "mem_used_mb": used[1], "mem_total_mb": 24000.0, "util_pct": 90.0, "power_w": 300.0, "temp_c": 60.0, "proc_mem_mb": proc[1]},
        ]},
        "host": {"ram_used_mb": ram, "ram_total_mb": 64000.0, "swap_used_mb": 0.0, "swap_total_mb": 0.0, "tree_rss_mb": rss, "tree_nprocs": 3, "tree_cpu_pct": 150.0},
    })


def test_peaks_from_samples():
    st = RunState()
    st.apply(start())
    st.apply_sample(gpu_sample(T0 + 1, (1000.0, 900.0), (800.0, None), 2000.0, 10000.0))
    st.apply_sample(gpu_sample(T0 + 2, (5000.0, 4000.0), (4500.0, 3500.0), 3000.0, 12000.0))
    st.apply_sample(gpu_sample(T0 + 3, (3000.0, 4100.0), (2500.0, 3600.0), 2500.0, 11000.0))
    s = st.snapshot()
    assert s.gpu_peak_used_mb == {0: 5000.0, 1: 4100.0}
    assert s.gpu_peak_proc_mb == {0: 4500.0, 1: 3600.0}
    assert s.host_peak_tree_rss_mb == 3000.0
    assert s.host_peak_ram_used_mb == 12000.0
    assert isinstance(s.gpu, GpuSnapshot) and isinstance(s.host, HostSnapshot)
    assert s.gpu.gpus[0].mem_used_mb == 3000.0 and s.gpu.driver == "550"
    assert s.host.tree_rss_mb == 2500.0 and s.host.tree_nprocs == 3
    assert s.wall_elapsed == pytest.approx(3.0)
    assert s.samples_seen == 3
    # snapshots are independent of later samples
    st.apply_sample(gpu_sample(T0 + 4, (9000.0, 9000.0), (9000.0, 9000.0), 9000.0, 19000.0))
    assert s.gpu_peak_used_mb == {0: 5000.0, 1: 4100.0}


def test_unavailable_gpu_sample():
    st = RunState()
    st.apply_sample(sample_of({"t": 1.0, "gpu": {"available": False, "reason": "NVML library not found: no NVIDIA driver", "gpus": []}, "host": {"ram_used_mb": 1.0}}))
    s = st.snapshot()
    assert s.gpu is not None and s.gpu.available is False and "NVML" in s.gpu.reason
    assert s.gpu_peak_used_mb == {}
    assert s.host.ram_used_mb == 1.0 and s.host.tree_rss_mb is None


def test_eval_and_checkpoint_events_fold_like_the_row(tmp_path):
    """The live view's evaluation loss and checkpoint step are the row's (summary.kept_figures),
    computed from the same events two ways."""
    from fttui.core.run.files.rundir import RunDir
    from fttui.core.run.row.summary import kept_figures

    events = [
        {"event": "eval", "t": 3.0, "rank": 0, "step": 10, "eval_loss": 2.5},
        {"event": "save", "t": 3.1, "rank": 0, "step": 10, "kind": "checkpoint", "path": "out/checkpoint-10"},
        {"event": "eval", "t": 5.0, "rank": 0, "step": 20, "eval_loss": 2.25},
        {"event": "save", "t": 5.1, "rank": 0, "step": 20, "kind": "checkpoint", "path": "out/checkpoint-20"},
        {"event": "eval", "t": 5.2, "rank": 0, "step": 20, "eval_loss": None},  # no loss: nothing to show
        {"event": "save", "t": 6.0, "rank": 0, "step": 20, "kind": "model", "path": "out"},
    ]
    st = RunState()
    assert st.snapshot().eval_loss is None and st.snapshot().checkpoint_step is None
    for e in events:
        st.apply(e)
    snap = st.snapshot()
    (tmp_path / "command.json").write_text("{}")
    from fttui.core.run.files.events import parse_event

    kept = kept_figures(RunDir(tmp_path), [parse_event(e) for e in events])
    assert (snap.eval_loss, snap.eval_step) == (2.25, 20) == (kept.eval_loss, kept.eval_step)
    assert snap.checkpoint_step == 20 and kept.checkpoint.endswith(f"checkpoint-{snap.checkpoint_step}")


def test_two_processes_claiming_one_rank_are_two_slots():
    """Steps of two processes that both say rank 0 (their pids differ) are both counted and the
    clash is flagged (issue 27.2); one process's duplicate lines are still dropped."""
    from fttui.core.run.fold.state import RunState
    from fttui.core.run.fold.status import status_line

    st = RunState()
    for pid in (11, 12):
        st.apply({"event": "start", "t": 1.0, "rank": 0, "pid": pid, "world_size": 1, "config": {}})
    for step in (1, 2):
        for pid in (11, 12):
            ev = {"event": "step", "t": 1.0 + step, "rank": 0, "pid": pid, "step": step, "samples": 4 * step,
                  "train_time": float(step), "peak_rss_mb": 100.0 + pid}
            st.apply(ev)
            st.apply(ev)  # a duplicate line of the same process
    snap = st.snapshot()
    assert snap.samples == 16 and snap.step == 2 and snap.world_size == 2
    assert snap.rank_clash == {0: (11, 12)}
    assert sorted(snap.rank_peak_rss_mb.values()) == [111.0, 112.0]
    assert status_line(snap).text.startswith("RUNNING, RANK CLASH: 2 processes each report rank 0 (pids 11, 12)")
    one = RunState()
    one.apply({"event": "start", "t": 1.0, "rank": 0, "pid": 11, "world_size": 1, "config": {}})
    one.apply({"event": "step", "t": 2.0, "rank": 0, "pid": 11, "step": 1, "samples": 4})
    assert one.snapshot().rank_clash == {} and one.snapshot().world_size == 1
    assert "CLASH" not in status_line(one.snapshot()).text
