"""Each sharding run for real on CPU ranks (issue 15), and what ran read back from the ranks.

- FSDP over two gloo ranks: each rank holds half of the parameters and of the optimizer states
  that a DDP rank holds, read from the tensors of every rank (tests/worker/held_main.py).
- DeepSpeed ZeRO-2 and ZeRO-3 short runs complete, and their ``start`` event reports the stage
  read back from the engine.
- A sharding that is not the one asked for stops the run with one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fttui.core.base.errors import ConfigError
from fttui.worker.sharding import check_sharding

from .conftest import REPO, make_profile, read_events, run_worker, worker_env, write_run_dir


def _held(tmp_path: Path, name: str, sharding: str) -> list[dict]:
    prof = make_profile(**{"method": "full", "sharding": sharding, "train.max_steps": 2,
                           "data.num_samples": 16, "devices.cpu_processes": 2})
    rd = write_run_dir(tmp_path, prof, name)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
           "-m", "tests.worker.held_main", "--run-dir", str(rd)]
    res = subprocess.run(cmd, cwd=str(REPO), env=worker_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return [json.loads((rd / f"held-{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.multiprocess
def test_fsdp_two_gloo_ranks_each_hold_half_of_ddp(tmp_path):
    ddp = _held(tmp_path, "ddp", "none")
    fsdp = _held(tmp_path, "fsdp", "fsdp")
    assert {r["sharding"]["ran"] for r in ddp} == {"none"}
    assert {r["sharding"]["ran"] for r in fsdp} == {"fsdp"}
    assert {r["sharding"]["distributed_type"] for r in fsdp} == {"FSDP"}
    for part in ("params", "optimizer_states"):
        whole = ddp[0]["held"][part]
        assert whole > 0 and ddp[1]["held"][part] == whole  # DDP: every rank holds everything
        per_rank = [r["held"][part] for r in fsdp]
        # the two shards together are the whole, and each rank holds half of it
        assert sum(per_rank) == whole, (part, per_rank, whole)
        for held in per_rank:
            assert held == pytest.approx(whole / 2, rel=0.02), (part, per_rank, whole)
    # Adam keeps two states per parameter element, on DDP and on FSDP ranks alike
    assert ddp[0]["held"]["optimizer_states"] == 2 * ddp[0]["held"]["params"]


# DeepSpeed compiles its CPU communication op (deepspeed_shm_comm) on the first ZeRO run of a
# machine (about 60 s on two cores, then kept in torch's extension cache): the DeepSpeed runs share
# one xdist group so that one build serves them all.
@pytest.mark.slow
@pytest.mark.xdist_group("deepspeed")
@pytest.mark.parametrize("sharding,stage", [("zero2", 2), ("zero3", 3)])
def test_deepspeed_short_run_reports_the_stage_that_ran(tmp_path, sharding, stage):
    # one rank under torchrun (DeepSpeed needs a launcher's environment); no offload, so no
    # DeepSpeed op is compiled
    prof = make_profile(**{"method": "full", "sharding": sharding, "train.max_steps": 2})
    rd = write_run_dir(tmp_path, prof)
    res = run_worker(rd, torchrun_nproc=1, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    events = read_events(rd)
    assert [e["event"] for e in events] == ["start", "step", "step", "end"]
    start = events[0]
    assert start["wrapper"].endswith("DeepSpeedEngine")
    assert start["deepspeed"]["zero_stage"] == stage
    ran = start["sharding"]
    assert (ran["asked"], ran["ran"], ran["kind"], ran["zero_stage"]) == (sharding, sharding, "deepspeed", stage)
    assert ran["offload_optimizer"] == ran["offload_param"] == "none"
    assert ran["distributed_type"] == "DEEPSPEED"


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.xdist_group("deepspeed")
def test_zero3_two_cpu_ranks_partition_the_parameters(tmp_path):
    prof = make_profile(**{"method": "full", "sharding": "zero3", "train.max_steps": 2,
                           "data.num_samples": 16, "devices.cpu_processes": 2})
    rd = write_run_dir(tmp_path, prof)
    res = run_worker(rd, torchrun_nproc=2, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    starts = [e for e in read_events(rd) if e["event"] == "start"]
    assert sorted(e["rank"] for e in starts) == [0, 1]
    for e in starts:
        s = e["sharding"]
        assert s["ran"] == "zero3" and s["zero_stage"] == 3
        assert s["params_local"] == pytest.approx(s["params"] / 2, rel=0.02)
    assert sum(e["sharding"]["params_local"] for e in starts) >= starts[0]["sharding"]["params"]
    assert [e["event"] for e in read_events(rd)].count("end") == 2


def test_a_sharding_that_is_not_the_one_asked_stops_the_run():
    check_sharding("fsdp", {"ran": "fsdp"})
    with pytest.raises(ConfigError) as ei:
        check_sharding("fsdp", {"ran": "none", "distributed_type": "MULTI_CPU", "wrapper": "DistributedDataParallel"})
    text = str(ei.value)
    assert "\n" not in text and "'fsdp' was asked for but 'none' runs" in text
    assert "MULTI_CPU" in text and "DistributedDataParallel" in text


def test_fsdp_needs_a_process_group(tmp_path):
    rd = write_run_dir(tmp_path, make_profile(**{"method": "full", "sharding": "fsdp"}))
    res = run_worker(rd)
    assert res.returncode == 2
    (err,) = read_events(rd)
    assert "torchrun" in err["message"]


def test_fsdp_offload_is_refused_on_cpu_ranks(tmp_path):
    rd = write_run_dir(tmp_path, make_profile(**{"method": "full", "sharding": "fsdp-offload"}))
    res = run_worker(rd, torchrun_nproc=1, timeout=180)
    assert res.returncode != 0  # torchrun reports a failed rank as 1; the worker itself exits 2
    (err,) = read_events(rd)
    assert err["event"] == "error" and err["kind"] == "error" and "needs CUDA GPUs" in err["message"]
    assert "exited with code 2" in res.stderr or "exitcode  : 2" in res.stderr, res.stderr[-1500:]
