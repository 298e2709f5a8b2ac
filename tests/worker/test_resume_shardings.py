"""Save and resume under the shardings that CPU ranks run (issue 16, part 2; issue 44, item 3): a
run saves a checkpoint every 2 steps; a second run continues from the first checkpoint (the
worker's ``--resume-from``, what ``fttui run --resume`` passes) and ends at the same step with the
same weights as the run that went through. ZeRO-2 and ZeRO-3 on one rank (DeepSpeed writes one
optimizer shard per rank: ``global_stepN/zero_pp_rank_R_*``), FSDP over two gloo ranks (sharded
checkpoints: each rank writes its own shard of the model and of the optimizer's states through
torch.distributed.checkpoint, ``pytorch_model_fsdp_0/`` and ``optimizer_0/``; the final model
saved whole; a checkpoint in the full state dict of an older fttui still resumes)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, make_profile, read_events, worker_env, write_run_dir

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess, pytest.mark.xdist_group("deepspeed")]


def _run(rd: Path, nproc: int, *extra: str) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--standalone",
           "-m", "fttui.worker.train", "--run-dir", str(rd), *extra]
    res = subprocess.run(cmd, cwd=str(REPO), env=worker_env(), capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]


def _profile(sharding: str, nproc: int) -> dict:
    p = make_profile(**{"method": "full", "sharding": sharding, "train.max_steps": 4,
                        "devices.cpu_processes": nproc})
    p["train"].update(save="steps", save_steps=2, output_dir=None)
    return p


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory):
    """The run that goes through (4 steps, a checkpoint every 2), once per sharding in the module."""
    made: dict[str, Path] = {}

    def get(sharding: str, nproc: int) -> Path:
        if sharding not in made:
            rd = write_run_dir(tmp_path_factory.mktemp(sharding), _profile(sharding, nproc), "whole")
            _run(rd, nproc)
            made[sharding] = rd
        return made[sharding]

    return get


def _resume_to_the_same_weights(whole: Path, checkpoint: Path, sharding: str, nproc: int, name: str) -> None:
    """A run resumed from ``checkpoint`` (of step 2) trains steps 3 and 4 and ends with the
    weights of the run that went through."""
    import torch
    from safetensors.torch import load_file

    resumed = write_run_dir(whole.parent, _profile(sharding, nproc), name)
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


@pytest.mark.parametrize("sharding,nproc,shard_files", [
    ("zero2", 1, ["global_step2/zero_pp_rank_0_mp_rank_00_optim_states.pt"]),
    ("zero3", 1, ["global_step2/zero_pp_rank_0_mp_rank_00_model_states.pt"]),
    ("fsdp", 2, [f"{d}/{f}" for d in ("pytorch_model_fsdp_0", "optimizer_0")
                 for f in (".metadata", "__0_0.distcp", "__1_0.distcp")]),
])
def test_sharded_checkpoint_resumes_to_the_same_weights(whole_run, sharding, nproc, shard_files):
    whole = whole_run(sharding, nproc)
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
    assert (checkpoint / "trainer_state.json").is_file()
    for f in shard_files:
        assert (checkpoint / f).is_file(), f
    if sharding == "fsdp":  # no rank gathered the whole model or the whole states into the checkpoint
        gathered = {"pytorch_model_fsdp.bin", "optimizer.bin", "model.safetensors"}
        assert not gathered & {p.name for p in checkpoint.iterdir()}
    _resume_to_the_same_weights(whole, checkpoint, sharding, nproc, "resumed")


def test_fsdp_s_final_model_is_saved_whole(whole_run):
    from transformers import AutoModelForCausalLM

    whole = whole_run("fsdp", 2)
    model, info = AutoModelForCausalLM.from_pretrained(str(whole / "output"), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    start = next(e for e in read_events(whole) if e["event"] == "start")
    assert sum(p.numel() for p in model.parameters()) == start["params_total"]


def _as_full_state_dict(src: Path, dst: Path) -> None:
    """``src`` (a sharded FSDP checkpoint) as an fttui before the change wrote it: the Trainer's
    full state dicts ``pytorch_model_fsdp.bin`` and ``optimizer.bin``, no sharded folders."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    shutil.copytree(src, dst)
    for folder, name, key in (("pytorch_model_fsdp_0", "pytorch_model_fsdp.bin", "model"),
                              ("optimizer_0", "optimizer.bin", "optimizer")):
        whole = dst / f"{key}.pt"
        dcp_to_torch_save(str(dst / folder), str(whole))
        torch.save(torch.load(whole, weights_only=True)[key], dst / name)
        whole.unlink()
        shutil.rmtree(dst / folder)


def test_fsdp_checkpoint_of_an_older_run_in_the_full_state_dict_resumes(whole_run):
    whole = whole_run("fsdp", 2)
    older = whole.parent / "older" / "checkpoint-2"
    _as_full_state_dict(whole / "output" / "checkpoint-2", older)
    assert {"pytorch_model_fsdp.bin", "optimizer.bin"} <= {p.name for p in older.iterdir()}
    assert not (older / "pytorch_model_fsdp_0").exists() and not (older / "optimizer_0").exists()
    _resume_to_the_same_weights(whole, older, "fsdp", 2, "resumed-older")
