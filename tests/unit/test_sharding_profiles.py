"""The profile key ``sharding`` (issue 15): every method with every sharding loads or is refused in
one line naming what runs; ``full-zero3-offload`` is ``full`` + ``zero3-offload``; ``[zero3]`` is
the old name of ``[deepspeed]``; the launcher follows the sharding; the DeepSpeed config follows
the stage and the offload."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fttui.core.base.constants import METHODS, SHARDING_METHODS, SHARDINGS, ZERO3_OFFLOAD
from fttui.core.base.errors import ProfileError
from fttui.core.profiles import Profile, apply_overrides, load_profile
from fttui.core.profiles.summary import profile_summary, sharding_label
from fttui.core.run.launching.launch import build_command
from fttui.core.run.launching.preflight import preflight
from fttui.worker.sharding import deepspeed_config, fsdp_arguments, fsdp_checkpoint_format, sharding_of
from tests.conftest import run_fttui
from tests.helpers import profile_of

PAIRS = [(m, s) for m in METHODS if m != ZERO3_OFFLOAD for s in SHARDINGS]


@pytest.mark.parametrize("method,sharding", PAIRS, ids=[f"{m}+{s}" for m, s in PAIRS])
def test_every_method_with_every_sharding_loads_or_names_what_runs(method, sharding):
    sets = [f"method={method}", f"sharding={sharding}"]
    if method in SHARDING_METHODS[sharding]:
        r = load_profile("tiny-lora", sets)
        assert (r.method, r.sharding) == (method, sharding)
        prof = Profile.from_dict(r.to_dict())
        assert prof.sharding == sharding and prof.to_dict() == r.to_dict() and prof == r
        expected = {"none": "python"}.get(sharding, "deepspeed" if sharding.startswith("zero") else "torchrun")
        assert prof.launcher() == expected
        return
    with pytest.raises(ProfileError) as ei:
        load_profile("tiny-lora", sets)
    text = str(ei.value)
    assert "\n" not in text and ei.value.key == "sharding"
    assert f"method {method} cannot run with sharding {sharding}" in text
    # names what this sharding runs, and where this method runs
    assert ", ".join(SHARDING_METHODS[sharding]) in text
    assert ", ".join(s for s in SHARDINGS if method in SHARDING_METHODS[s]) in text


def test_matrix_is_what_the_docs_say():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "launchers.md").read_text()
    for sharding, methods in SHARDING_METHODS.items():
        rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in doc.splitlines()
                if line.startswith(f"| `{sharding}` |")]
        (cells,) = [r for r in rows if r[1] in ("yes", "no")]
        for method, cell in zip(("full", "lora", "lora-emb", "qlora", "lora-int8"), cells[1:6]):
            assert (cell == "yes") == (method in methods), (sharding, method, cell)


def test_full_zero3_offload_is_full_with_zero3_offload():
    r = load_profile("tiny-full-zero3")
    assert (r.method, r.sharding) == ("full", "zero3-offload")
    assert r.launcher() == "deepspeed"
    # the method given on the command line, on a profile without sharding
    r = load_profile("tiny-full", ["method=full-zero3-offload"])
    assert (r.method, r.sharding) == ("full", "zero3-offload")
    # re-resolving keeps it; a sharding given explicitly wins over the alias
    again = apply_overrides(r, ["batch_size=4"])
    assert (again.method, again.sharding) == ("full", "zero3-offload")
    r = load_profile("tiny-full-zero3", ["sharding=zero2"])
    assert (r.method, r.sharding) == ("full", "zero2")
    # a run folder's profile.json written before sharding reads the same way
    old = {"method": ZERO3_OFFLOAD, "zero3": {"offload_optimizer": True, "offload_params": False,
                                               "pin_memory": False}, "devices": {"gpus": 0}}
    prof = Profile.from_partial(old)
    assert prof.sharding_asked() == "zero3-offload" and prof.launcher() == "deepspeed"
    assert prof.deepspeed.offload_params is False
    assert sharding_of(profile_of(old)) == "zero3-offload"
    legacy = load_profile("tiny-full").with_settings({"method": ZERO3_OFFLOAD})
    assert profile_summary(legacy)["sharding"] == "zero3-offload"


def test_set_sharding_and_bad_values():
    r = load_profile("tiny-full", ["sharding=zero2"])
    assert r.sharding == "zero2" and r.overrides == ["sharding=zero2"]
    assert load_profile("tiny-full").sharding == "none"  # every resolved profile has the key
    with pytest.raises(ProfileError) as ei:
        load_profile("tiny-full", ["sharding=zero4"])
    assert ei.value.key == "sharding" and "zero3" in str(ei.value)
    # through the CLI: one line, exit 2
    proc = run_fttui("run", "--profile", "tiny-lora-int8", "--headless", "--set", "sharding=fsdp")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "method lora-int8 cannot run with sharding fsdp" in line and "none, zero2, zero2-offload" in line


def test_zero3_section_is_the_old_name_of_deepspeed(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('# fttui run --profile mine.toml\nextends = "tiny-full-zero3"\n[zero3]\noffload_params = false\n')
    r = load_profile(f)
    assert "zero3" not in r.to_dict() and r.deepspeed.offload_params is False
    assert r.deepspeed.offload_optimizer is True
    assert load_profile("tiny-full-zero3", ["zero3.offload_params=false"]).deepspeed.offload_params is False
    both = tmp_path / "both.toml"
    both.write_text('extends = "tiny-full"\n[zero3]\npin_memory = false\n[deepspeed]\npin_memory = true\n')
    with pytest.raises(ProfileError) as ei:
        load_profile(both)
    assert "old name" in str(ei.value)


def test_an_offload_sharding_must_offload_something():
    with pytest.raises(ProfileError) as ei:
        load_profile("tiny-full", ["sharding=zero2-offload", "deepspeed.offload_optimizer=false"])
    assert "offloads nothing" in str(ei.value) and 'sharding = "zero2"' in str(ei.value)
    # zero3-offload with parameters only on the host is a real setting
    r = load_profile("tiny-full", ["sharding=zero3-offload", "deepspeed.offload_optimizer=false"])
    zero = deepspeed_config(r, 1)["zero_optimization"]
    assert "offload_optimizer" not in zero and zero["offload_param"]["device"] == "cpu"


def test_bitsandbytes_optimizers_are_not_run_on_fsdp_shards():
    """FSDP2 hands the optimizer DTensor shards, which bitsandbytes' optimizers cannot step
    (NotImplementedError at the first step on an H100, docs/benchmarks.md): QLoRA's derived
    optimizer under FSDP is torch's AdamW, one given explicitly is refused at load naming the key
    and the fix; ZeRO-3 (flat plain tensors) keeps the paged one."""
    assert load_profile("tiny-qlora").train.optimizer == "paged_adamw_32bit"
    assert load_profile("tiny-qlora", ["sharding=fsdp"]).train.optimizer == "adamw_torch"
    assert load_profile("tiny-qlora", ["sharding=zero3"]).train.optimizer == "paged_adamw_32bit"
    # derived again when the sharding changes afterwards
    assert apply_overrides(load_profile("tiny-qlora"), ["sharding=fsdp"]).train.optimizer == "adamw_torch"
    for opt in ("paged_adamw_32bit", "adamw_bnb_8bit", "paged_adamw_8bit"):
        with pytest.raises(ProfileError) as ei:
            load_profile("tiny-lora", ["sharding=fsdp", f"train.optimizer={opt}"])
        assert ei.value.key == "train.optimizer" and "DTensor" in str(ei.value)
        assert 'train.optimizer = "adamw_torch"' in str(ei.value)
    # the shipped QLoRA profile names paged AdamW itself: under FSDP that is one clear line
    with pytest.raises(ProfileError) as ei:
        load_profile("llama2-7b-qlora", ["sharding=fsdp"])
    assert "llama2-7b-qlora.toml" in str(ei.value)


@pytest.mark.parametrize("sharding,stage,opt,param", [
    ("zero2", 2, False, False), ("zero2-offload", 2, True, False),
    ("zero3", 3, False, False), ("zero3-offload", 3, True, True)])
def test_deepspeed_config_per_sharding(sharding, stage, opt, param):
    r = load_profile("tiny-full", [f"sharding={sharding}", "batch_size=4", "grad_accum=2"])
    cfg = deepspeed_config(r, 2)
    zero = cfg["zero_optimization"]
    assert zero["stage"] == stage
    assert ("offload_optimizer" in zero) == opt and ("offload_param" in zero) == param
    assert (cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"], cfg["train_batch_size"]) == (4, 2, 16)
    assert ("stage3_prefetch_bucket_size" in zero) == (stage == 3)


def test_zero3_live_and_reuse_limits_reach_deepspeed_only_when_set():
    sets = ["deepspeed.stage3_max_reuse_distance=1000", "deepspeed.stage3_max_live_parameters=2000"]
    zero = deepspeed_config(load_profile("tiny-full", ["sharding=zero3", *sets]), 2)["zero_optimization"]
    assert (zero["stage3_max_reuse_distance"], zero["stage3_max_live_parameters"]) == (1000, 2000)
    unset = deepspeed_config(load_profile("tiny-full", ["sharding=zero3"]), 2)["zero_optimization"]
    assert not any(k.startswith("stage3_max_") for k in unset)  # DeepSpeed's defaults
    stage2 = deepspeed_config(load_profile("tiny-full", ["sharding=zero2", *sets]), 2)["zero_optimization"]
    assert not any(k.startswith("stage3_") for k in stage2)


def test_fsdp_arguments():
    for sharding, offload in (("fsdp", False), ("fsdp-offload", True)):
        args = fsdp_arguments(load_profile("tiny-full", [f"sharding={sharding}"]))
        assert args["fsdp_config"]["version"] == 2 and args["fsdp_config"]["cpu_offload"] is offload
        # checkpoints sharded: no rank gathers every rank's states to save or to resume (issue 44)
        assert args["fsdp_config"]["state_dict_type"] == "SHARDED_STATE_DICT"


def test_an_fsdp_checkpoint_is_resumed_in_the_format_it_was_written_in(tmp_path):
    sharded = tmp_path / "checkpoint-2"
    (sharded / "pytorch_model_fsdp_0").mkdir(parents=True)
    assert fsdp_checkpoint_format(str(sharded)) == "SHARDED_STATE_DICT"
    older = tmp_path / "checkpoint-4"  # an fttui before the change: the Trainer's full state dict
    older.mkdir()
    (older / "pytorch_model_fsdp.bin").write_bytes(b"")
    assert fsdp_checkpoint_format(str(older)) == "FULL_STATE_DICT"


def test_launcher_follows_the_sharding(tmp_path):
    def argv(*sets):
        return build_command(load_profile("tiny-full", list(sets)), tmp_path)

    assert argv("sharding=zero2")[1:3] == ["-m", "deepspeed.launcher.runner"]
    assert argv("sharding=zero3", "devices.launcher=torchrun", "cpu_processes=2")[1:4] == [
        "-m", "torch.distributed.run", "--nproc-per-node=2"]
    assert argv("sharding=fsdp")[1:5] == ["-m", "torch.distributed.run", "--nproc-per-node=1", "--standalone"]
    assert argv("sharding=fsdp", "devices.launcher=accelerate", "cpu_processes=2")[1:3] == [
        "-m", "accelerate.commands.launch"]
    for sets, allowed in ((("sharding=zero2", "devices.launcher=python"), '"auto" or "deepspeed" or "torchrun"'),
                          (("sharding=zero3", "devices.launcher=accelerate"), '"auto" or "deepspeed" or "torchrun"'),
                          (("sharding=fsdp", "devices.launcher=deepspeed", "cpu_processes=2"), '"auto" or "torchrun" or "accelerate"'),
                          (("sharding=fsdp", "devices.launcher=accelerate"), '"auto" or "torchrun"')):
        with pytest.raises(ProfileError) as ei:
            argv(*sets)
        assert ei.value.key == "devices.launcher" and allowed in str(ei.value), str(ei.value)


def test_fsdp_offload_is_refused_on_cpu():
    r = load_profile("tiny-full", ["sharding=fsdp-offload", "devices.gpus=0"])
    with pytest.raises(ProfileError) as ei:
        preflight(r, (0, "no NVIDIA driver"))
    assert ei.value.key == "sharding" and "CUDA" in str(ei.value) and 'sharding = "fsdp"' in str(ei.value)
    preflight(load_profile("tiny-full", ["sharding=fsdp", "devices.gpus=0"]), (0, "no NVIDIA driver"))


def test_a_refusal_names_set_when_the_key_came_from_set_and_the_file_otherwise(tmp_path):
    """The line names where the refused value was written: ``--set`` for an override (a table's
    entry included), the profile's file for its own value."""
    with pytest.raises(ProfileError) as ei:
        preflight(load_profile("tiny-full", ["sharding=fsdp-offload"]), (0, "no NVIDIA driver"))
    assert (ei.value.file, ei.value.key) == ("--set", "sharding")
    assert str(ei.value).startswith("--set: sharding: ")
    toml = tmp_path / "mine.toml"
    toml.write_text('extends = "tiny-full"\nsharding = "fsdp-offload"\n')
    with pytest.raises(ProfileError) as ei:
        preflight(load_profile(str(toml), ["train.batch_size=2"]), (0, "no NVIDIA driver"))
    assert (ei.value.file, ei.value.key) == (str(toml), "sharding")
    prof = load_profile("tiny-lora", ["lora.target_modules=all-linear", "train.seed=3"])
    assert prof.origin_of("lora.target_modules") == prof.origin_of("train.seed") == "--set"
    assert prof.origin_of("train.batch_size") == prof.source and prof.source.endswith("tiny-lora.toml")


def test_sharding_label_says_what_goes_where():
    assert sharding_label(load_profile("tiny-full-zero3")) == (
        "zero3-offload (DeepSpeed ZeRO-3; optimizer states, parameters on the host)")
    assert sharding_label(load_profile("tiny-lora", ["cpu_processes=2"])) == "none (DDP over 2 processes)"
    assert sharding_label(load_profile("tiny-lora", ["sharding=fsdp"])) == "fsdp (PyTorch FSDP2)"


def test_bundled_profiles_still_load_and_start_with_their_command():
    root = Path(__file__).resolve().parents[2] / "profiles"
    for f in sorted(root.glob("*.toml")):
        assert f.read_text().splitlines()[0] == f"# fttui run --profile {f.stem}", f.name
        r = load_profile(f.stem)
        assert r.sharding in SHARDINGS and r.method != ZERO3_OFFLOAD
        json.dumps(r.to_dict())
