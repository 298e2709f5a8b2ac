"""The link before launch (issue 43 item 2), without torch: a link test's result file parsed into
bandwidth and latency (per rank, per pair, a bad pair named), kept per machine set, the
communication per sharding kind, and the plan's forecast over a lowered bandwidth: ZeRO-3's (or
FSDP's) step over the DDP step by the bytes each moves."""

from __future__ import annotations

import json

import pytest

from fttui.core.base.units import MIB
from fttui.core.experiments import link
from fttui.core.experiments.comm import BUCKET_BYTES, comm_per_step, versus_ddp


def _result(tmp_path, world=2, seconds=0.01, pair_seconds=None, nodes=None, latency=1e-4):
    """A link test's result file as rank 0 writes it (fttui/integrations/linktest.py)."""
    nodes = nodes or [f"n{i + 1}" for i in range(world)]
    sizes = [{"bytes": b * MIB, "seconds": seconds * b} for b in (1, 4, 16, 64)]
    pairs = []
    for (a, b), s in (pair_seconds or {}).items():
        pairs.append({"ranks": [a, b], "bytes": 16 * MIB, "seconds": s, "latency_s": latency})
    raw = {"format": 1, "backend": "gloo", "device": "cpu", "world": world, "nodes": nodes, "iters": 5,
           "sizes": sizes, "latency_s": latency, "pairs": pairs, "t": 1.0,
           "ranks": [{"rank": r, "node": nodes[r], "sizes": [s["seconds"] for s in sizes], "latency_s": latency}
                     for r in range(world)]}
    path = tmp_path / "link.json"
    path.write_text(json.dumps(raw))
    return path


def test_a_result_file_gives_the_bus_bandwidth_and_latency(tmp_path):
    fig = link.parse_result(_result(tmp_path, world=2, seconds=0.01), env={})
    largest = 64 * MIB
    assert fig.bandwidth == pytest.approx(largest * 2 * (2 - 1) / 2 / (0.01 * 64))  # bus: bytes x 2(n-1)/n / s
    assert fig.latency_s == pytest.approx(1e-4)
    assert [b for b, _ in fig.sizes] == [m * MIB for m in (1, 4, 16, 64)]
    assert [r[1] for r in fig.per_rank] == ["n1", "n2"]
    assert len(fig.pairs) == 1 and fig.pairs[0].nodes == ("n1", "n2")  # two ranks: the one pair is the world
    assert fig.key == "n1+n2/gloo" and not fig.bad
    assert "bus bandwidth" in link.words(fig) and "latency" in link.words(fig)


def test_a_slow_pair_is_named(tmp_path):
    fast, slow = 0.01, 0.05
    pairs = {(0, 1): fast, (0, 2): fast, (1, 2): slow, (0, 3): fast, (1, 3): fast, (2, 3): fast}
    fig = link.parse_result(_result(tmp_path, world=4, pair_seconds=pairs), env={})
    assert len(fig.pairs) == 6
    assert len(fig.bad) == 1 and fig.bad[0].startswith("n2 <-> n3 (ranks 1, 2)")
    assert "BAD PAIR: n2 <-> n3" in link.words(fig)


def test_an_unreadable_result_is_one_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(link.LinkError, match="unreadable"):
        link.parse_result(bad)
    with pytest.raises(link.LinkError, match="unreadable"):
        link.parse_result(tmp_path / "missing.json")


def test_the_figure_is_kept_per_machine_set(tmp_path, fttui_home):
    fig = link.parse_result(_result(tmp_path, world=2), env={})
    link.store(fig)
    assert link.load(fig.key) == fig
    assert link.load("other+set/gloo") is None
    assert link.figure_for(2, "gloo") == fig and link.figure_for(3, "gloo") is None
    assert link.figure_for(2, "nccl") is None
    assert link.interconnect("nccl", {"NCCL_SOCKET_IFNAME": "ib0"}) == "nccl@ib0"
    assert link.link_key(["b", "a", "b"], "gloo") == "a+b/gloo"


def test_the_bytes_each_sharding_moves():
    params, trainable, world, bw = 1_000_000, 10_000, 4, 1e9
    f = (world - 1) / world
    ddp = comm_per_step("none", params, trainable, world, precision="bf16", bandwidth=bw)
    zero2 = comm_per_step("zero2", params, trainable, world, precision="bf16", bandwidth=bw)
    zero3 = comm_per_step("zero3", params, trainable, world, precision="bf16", bandwidth=bw, layers=2)
    fsdp = comm_per_step("fsdp", params, trainable, world, precision="bf16", bandwidth=bw, layers=2, accum=2,
                         checkpointing=True)
    assert ddp.bytes == pytest.approx(2 * f * trainable * 2)  # all-reduce of bf16 gradients
    assert zero2.bytes == pytest.approx(ddp.bytes)  # reduce-scatter + all-gather: the same volume
    assert zero3.bytes == pytest.approx(f * trainable * 2 + 2 * f * params * 2)  # + the forward and backward gathers
    assert fsdp.bytes == pytest.approx(f * trainable * 2 + 2 * 3 * f * params * 2)  # per micro batch, recomputed
    assert ddp.seconds == pytest.approx(ddp.bytes / bw)
    assert comm_per_step("zero3", params, params, 1, bandwidth=bw).seconds == 0  # one rank: nothing moves
    lat = comm_per_step("none", params, BUCKET_BYTES // 2 * 3, world, precision="bf16", bandwidth=bw, latency_s=1e-3)
    assert lat.collectives == 3 and lat.seconds == pytest.approx(lat.bytes / bw + 3e-3)


@pytest.fixture
def two_nodes(fttui_home):
    """tiny-full over 2 nodes of one CPU rank each: the plan's options without a link and over
    ``bandwidth``."""
    from fttui.core.experiments.planning import machine_budget, run_plan
    from fttui.core.profiles import apply_overrides, load_profile

    prof = apply_overrides(load_profile("tiny-full"), ["data.source=synthetic", "data.num_samples=16",
                                                       "data.max_seq_len=32", "devices.nodes=2"])
    budget = machine_budget(prof, gpus=0)

    def options(bandwidth: float | None, latency: float = 0.0):
        fig = None
        if bandwidth is not None:
            fig = link.LinkFigure(nodes=("n1", "n2"), interconnect="gloo", backend="gloo", world=2,
                                  bandwidth=bandwidth, latency_s=latency, key="n1+n2/gloo")
        return {(o.sharding, o.batch_size, o.gradient_checkpointing): o
                for o in run_plan(prof, budget, effective_batch=2, link=fig)}

    return prof, options


def test_zero3_over_a_slow_link_is_the_predicted_factor_of_the_ddp_step(two_nodes):
    """At 10 GbE-like and then a tenth of it, ZeRO-3's (FSDP's where DeepSpeed's ZeRO-3 is not
    planned) step over the DDP step is (compute + its bytes / bandwidth) over (compute + DDP's bytes
    / bandwidth), the bytes from the model's parameter count; the slower link, the larger."""
    from fttui.core.experiments.forecast import profile_shape
    from fttui.core.memory import estimate
    from fttui.core.profiles import apply_overrides

    prof, options = two_nodes
    alone = options(None)
    sharded = "zero3" if ("zero3", 1, False) in alone else "fsdp"
    key_ddp, key_z3 = ("none", 1, False), (sharded, 1, False)
    p = apply_overrides(prof, [f"sharding={sharded}", "train.batch_size=1"])
    shape = profile_shape(p, estimate(p).inputs)
    width = 4  # the CPU ranks' fp32
    f = 1 / 2
    factors = []
    for bw in (1.25e9, 1.25e8):
        over = options(bw)
        z3_bytes = f * shape.params_trainable * width + 2 * f * shape.params_total * width
        ddp_bytes = 2 * f * shape.params_trainable * width
        assert over[key_z3].step_seconds - alone[key_z3].step_seconds == pytest.approx(z3_bytes / bw, rel=1e-3)
        assert over[key_ddp].step_seconds - alone[key_ddp].step_seconds == pytest.approx(ddp_bytes / bw, rel=1e-3)
        predicted = (alone[key_z3].step_seconds + z3_bytes / bw) / (alone[key_ddp].step_seconds + ddp_bytes / bw)
        said = next(x for x in versus_ddp(list(over.values())) if x.startswith(("ZeRO-3 over", "FSDP over")))
        assert f"{predicted:.2f} times the DDP step" in said, said
        assert "communication" in over[key_z3].mfu_source and "measured link" in over[key_z3].mfu_source
        factors.append(predicted)
    assert factors[1] > factors[0] > 1  # a tenth of the bandwidth: ZeRO-3 further behind DDP


def test_where_and_when_a_kept_figure_was_measured(tmp_path, fttui_home):
    """The words a plan (and the app's plan screen) says of a kept figure: what ran the test and
    when, and where the figure is kept; without one, that communication is not counted."""
    import time

    fig = link.parse_result(_result(tmp_path, world=2), env={}, source="fttui plan --link (srun over 2 nodes)")
    path = link.store(fig)
    kept = link.figure_for(2, "gloo")
    assert kept is not None and kept.source == "fttui plan --link (srun over 2 nodes)"
    said = link.kept_words(kept)
    assert said == (f"measured {time.strftime('%Y-%m-%d %H:%M', time.localtime(fig.t))} by "
                    f"fttui plan --link (srun over 2 nodes), kept in {path}")
    none = link.none_kept(3, "nccl")
    assert none.startswith("no link figure kept for 3 nodes (nccl)") and "fttui plan --link" in none
    assert link.backend_for(0) == "gloo" and link.backend_for(8) == "nccl"


def test_the_srun_step_is_the_one_the_job_runs_first(tmp_path):
    """`fttui plan --link` over several nodes runs the step a `fttui submit` job runs first, asking
    srun for the nodes (and the cards a run gets); the job's script holds the same step."""
    import shlex
    import sys

    from fttui.core.run.slurm.slurmjob import link_test_argv, link_test_lines

    step = link_test_argv(tmp_path / "link.json", sys.executable)
    over = link_test_argv(tmp_path / "link.json", sys.executable, nodes=3, gpus_per_node=4)
    assert over == [*step[:3], "--nodes=3", "--job-name=fttui-link", "--gpus-per-node=4", *step[3:]]
    assert step[3:] == [sys.executable, "-m", "fttui.integrations.linktest", "--out", str(tmp_path / "link.json")]
    assert shlex.join(step) in "\n".join(link_test_lines(tmp_path, sys.executable))


def test_a_failed_link_test_says_why_in_one_line_and_exits_5():
    """The line of a failed test's output that says why (a rank's exception under torchrun's
    frames, srun's error) and the exit code of a link test's failure, not bad input's 2."""
    from fttui.core.base.constants import EXIT_BAD_INPUT, EXIT_LINK_FAILED
    from fttui.core.experiments.linkrun import failure_line

    torchrun = "\n".join([
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "linktest.py", line 80, in run',
        "[rank0]: RuntimeError: [enforce fail at gloo/transport/tcp/device.cc] Unable to find address for: nope0",
        "E1128 10:21:00 torch/distributed/elastic/multiprocessing/api.py] failed (exitcode: 1) local_rank: 0",
        "Traceback (most recent call last):",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "fttui.integrations.linktest FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-11-28_10:21:00",
        "  rank      : 0 (local_rank: 0)",
        "  exitcode  : 1 (pid: 123)",
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        "============================================================",
    ])
    assert failure_line(torchrun) == torchrun.splitlines()[2]  # the rank's exception, not torchrun's frames
    srun = "srun: error: Unable to allocate resources: Requested node configuration is not available\n"
    assert failure_line(srun) == srun.strip()
    assert failure_line("") == "no output"
    assert link.LinkError("x").exit_code == EXIT_LINK_FAILED != EXIT_BAD_INPUT


def test_plan_link_over_nodes_without_slurm_is_one_line_and_exit_2(tmp_path, fttui_home, monkeypatch, capsys):
    """`fttui plan --link` of a profile of several nodes measures through Slurm; where no Slurm
    client reaches a cluster (none on the PATH; one without a configuration) it is one line and
    exit 2, nothing measured or kept."""
    from fttui.cli.main import main

    plan = ["plan", "--profile", "tiny-full", "--gpus", "0", "--set", "devices.nodes=2", "--effective-batch", "2",
            "--link"]
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert main(plan) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "measured as a Slurm job step (srun)" in err and "scontrol not found" in err, err
    # a Slurm client that reaches no controller (no configuration), as `scontrol ping` says it
    fake = empty / "scontrol"
    fake.write_text("#!/bin/sh\necho 'scontrol: fatal: Could not establish a configuration source' >&2\nexit 1\n")
    fake.chmod(0o755)
    assert main(plan) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Could not establish a configuration source" in err, err
    assert not (fttui_home / "links").exists() or not list((fttui_home / "links").glob("*.json"))
