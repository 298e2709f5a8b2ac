"""Save and resume under the shardings that CPU ranks run (issue 16, part 2): a run saves a
checkpoint every 2 steps; a second run continues from the first checkpoint (the worker's
``--resume-from``, what ``fttui run --resume`` passes) and ends at the same step with the same
weights as the run that went through. ZeRO-2 and ZeRO-3 on one rank (DeepSpeed writes one
optimizer shard per rank: ``global_stepN/zero_pp_rank_R_*``), FSDP over two gloo ranks (the
Trainer's FSDP2 full state dict: ``pytorch_model_fsdp.bin``, ``optimizer.bin``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, make_profile, read_events, worker_env, write_run_dir


def _run(rd: Path, nproc: int, *extra: str) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--standalone",
           "-m", "fttui.worker.train", "--run-dir", str(rd), *extra]
    res = subprocess.run(cmd, cwd=str(REPO), env=worker_env(), capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.xdist_group("deepspeed")
@pytest.mark.parametrize("sharding,nproc,shard_file", [
    ("zero2", 1, "global_step2/zero_pp_rank_0_mp_rank_00_optim_states.pt"),
    ("zero3", 1, "global_step2/zero_pp_rank_0_mp_rank_00_model_states.pt"),
    ("fsdp", 2, "pytorch_model_fsdp.bin"),
])
def test_sharded_checkpoint_resumes_to_the_same_weights(tmp_path, sharding, nproc, shard_file):
    import torch
    from safetensors.torch import load_file

    def profile():
        p = make_profile(**{"method": "full", "sharding": sharding, "train.max_steps": 4,
                            "devices.cpu_processes": nproc})
        p["train"].update(save="steps", save_steps=2, output_dir=None)
        return p

    whole = write_run_dir(tmp_path, profile(), "whole")
    _run(whole, nproc)
    # the sharding that ran, read back from the engine (the run that goes through)
    for e in (e for e in read_events(whole) if e["event"] == "start"):
        ran = e["sharding"]
        assert (ran["asked"], ran["ran"]) == (sharding, sharding)
        if sharding.startswith("zero"):
            stage = int(sharding[-1])
            assert e["wrapper"].endswith("DeepSpeedEngine") and e["deepspeed"]["zero_stage"] == stage
            assert (ran["kind"], ran["zero_stage"], ran["distributed_type"]) == ("deepspeed", stage, "DEEPSPEED")
            assert ran["offload_optimizer"] == ran["offload_param"] == "none"
        else:
            assert (ran["kind"], ran["distributed_type"]) == ("fsdp", "FSDP")
    checkpoint = whole / "output" / "checkpoint-2"
    assert (checkpoint / shard_file).is_file() and (checkpoint / "trainer_state.json").is_file()
    resumed = write_run_dir(tmp_path, profile(), "resumed")
    _run(resumed, nproc, "--resume-from", str(checkpoint))
    events = read_events(resumed)
    starts = [e for e in events if e["event"] == "start"]
    assert len(starts) == nproc and {e["resumed_step"] for e in starts} == {2}
    assert [e["step"] for e in events if e["event"] == "step" and e["rank"] == 0] == [3, 4]
    a = load_file(whole / "output" / "model.safetensors")
    b = load_file(resumed / "output" / "model.safetensors")
    assert set(a) == set(b) and a
    for k in a:
        assert torch.equal(a[k], b[k]), k
