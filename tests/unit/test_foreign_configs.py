"""`--from FILE.yaml`: LLaMA-Factory and axolotl training configs read into profiles.

The fixtures in tests/data/foreign follow the shape of the tools' own example configs. Checked:
the profile each gives, key by key; that the TOML `fttui profiles --from` prints loads back to
the same resolved profile (two ways); keys that do not map are listed with a reason; unknown keys,
contradictions and a missing DeepSpeed JSON are one line naming the YAML and the key, exit 2.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fttui.core.base.errors import ProfileError
from fttui.core.profiles import load_profile
from fttui.core.profiles.foreign import load_config_profile, profile_toml, read_config

DATA = Path(__file__).resolve().parent.parent / "data" / "foreign"
LF = DATA / "llamafactory_lora_sft.yaml"
AX = DATA / "axolotl_qlora.yml"
TINY = ["model.init=random", "model.arch=tiny-llama", "model.tokenizer=byte", "gpus=0"]


def test_llamafactory_lora_with_deepspeed(monkeypatch):
    monkeypatch.chdir(DATA.parent)  # the DeepSpeed JSON is found beside the YAML too
    m = read_config(LF)
    assert m.tool == "LLaMA-Factory"
    d = m.data
    assert (d["method"], d["sharding"]) == ("lora-emb", "zero2-offload")
    assert d["deepspeed"] == {"offload_optimizer": True, "pin_memory": True}
    assert d["model"] == {"name_or_path": "Qwen/Qwen2.5-7B-Instruct", "trust_remote_code": True,
                          "attn_implementation": "flash_attention_2"}
    assert d["data"] == {"max_seq_len": 1024, "num_samples": 500, "eval_ratio": 0.1}
    assert d["lora"] == {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": ["q_proj", "v_proj"]}
    t = d["train"]
    assert (t["batch_size"], t["grad_accum"], t["epochs"], t["lr"]) == (2, 4, 2.0, 1e-4)
    assert (t["precision"], t["gradient_checkpointing"], t["lr_scheduler"], t["warmup_ratio"]) == ("bf16", True, "cosine", 0.1)
    assert (t["save"], t["save_steps"], t["eval_steps"], t["report_to"]) == ("steps", 200, 100, ["tensorboard"])
    assert t["output_dir"] == "saves/qwen2.5-7b/lora/sft"
    unmapped = {k: why for k, _, why in m.unmapped}
    assert {"dataset", "template", "preprocessing_num_workers", "plot_loss"} <= set(unmapped)
    assert "dataset_info.json" in unmapped["dataset"]
    assert not {"lora_rank", "cutoff_len", "deepspeed", "bf16"} & set(unmapped)


def test_axolotl_qlora():
    m = read_config(AX)
    assert m.tool == "axolotl"
    d = m.data
    assert d["method"] == "qlora" and "sharding" not in d
    assert d["quant"] == {"type": "nf4", "double_quant": True}
    assert d["model"] == {"name_or_path": "NousResearch/Meta-Llama-3-8B", "attn_implementation": "flash_attention_2"}
    assert d["data"] == {"max_seq_len": 4096, "pad_to_max": True, "eval_ratio": 0.05}
    assert d["lora"] == {"r": 32, "alpha": 16, "dropout": 0.05, "target_modules": "all-linear"}
    t = d["train"]
    assert (t["batch_size"], t["grad_accum"], t["epochs"], t["lr"], t["optimizer"]) == (2, 4, 4.0, 2e-4, "paged_adamw_32bit")
    assert (t["precision"], t["gradient_checkpointing"], t["weight_decay"]) == ("bf16", True, 0.0)
    unmapped = {k for k, _, _ in m.unmapped}
    assert {"sample_packing", "datasets", "saves_per_epoch", "special_tokens", "model_type"} <= unmapped
    assert not {"wandb_project", "wandb_entity", "lora_model_dir", "dataset_prepared_path"} & unmapped  # empty
    assert any("bf16: auto" in n for n in m.notes)


@pytest.mark.parametrize("path", [LF, AX])
def test_printed_toml_loads_back_to_the_same_profile(tmp_path, monkeypatch, path):
    monkeypatch.chdir(DATA)
    resolved, mapped = load_config_profile(path, TINY)
    text = profile_toml(mapped)
    assert text.startswith(f"# fttui run -p {path.stem}")
    tomllib.loads(text)  # valid TOML
    saved = tmp_path / f"{path.stem}.toml"
    saved.write_text(text)
    again = load_profile(saved, TINY)
    skip = {"source", "origin", "overrides", "description"}
    assert {k: v for k, v in again.to_dict().items() if k not in skip} == \
        {k: v for k, v in resolved.to_dict().items() if k not in skip}


def test_axolotl_local_dataset_and_fsdp(tmp_path):
    data = tmp_path / "alpaca.jsonl"
    data.write_text('{"instruction": "hi", "output": "there"}\n')
    cfg = tmp_path / "ax.yml"
    cfg.write_text("base_model: m\nadapter: lora\ndatasets:\n  - path: alpaca.jsonl\n    type: alpaca\n"
                   "fsdp_version: 2\nfsdp_config:\n  offload_params: true\n  reshard_after_forward: true\n")
    d = read_config(cfg).data
    assert d["data"]["source"] == str(data.resolve()) and d["data"]["format"] == "instruction"
    assert (d["method"], d["sharding"], d["devices"]["launcher"]) == ("lora", "fsdp-offload", "torchrun")


@pytest.mark.parametrize("text, key, words", [
    ("model_name_or_path: m\nlora_rnak: 8\n", "lora_rnak", "did you mean 'lora_rank'"),
    ("model_name_or_path: m\nbf16: true\nfp16: true\n", "fp16", "both true"),
    ("model_name_or_path: m\nfinetuning_type: freeze\n", "finetuning_type", "not a method fttui runs"),
    ("model_name_or_path: m\nstage: dpo\n", "stage", "supervised fine-tuning"),
    ("model_name_or_path: m\nfinetuning_type: full\nquantization_bit: 4\n", "quantization_bit", "full"),
    ("model_name_or_path: m\ndeepspeed: nowhere/ds_z3.json\n", "deepspeed", "DeepSpeed config not found"),
    ("base_model: m\nadapter: qlora\n", "adapter", "load_in_4bit"),
    ("base_model: m\nload_in_4bit: true\n", "adapter", "without an adapter"),
    ("base_model: m\nadapter: lora\ndeepspeed: ds.json\nfsdp: [full_shard]\n", "fsdp", "both deepspeed and fsdp"),
    ("base_model: m\nrl: dpo\n", "rl", "supervised fine-tuning"),
    ("base_model: m\nmicro_batch_sise: 2\n", "micro_batch_sise", "did you mean 'micro_batch_size'"),
    ("hello: 1\n", None, "not a LLaMA-Factory or axolotl training config"),
    ("base_model: [unclosed\n", None, "not valid YAML"),
])
def test_bad_configs_are_one_line(tmp_path, text, key, words):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    with pytest.raises(ProfileError) as e:
        read_config(cfg)
    msg = str(e.value)
    assert "\n" not in msg and "bad.yaml" in msg and words in msg
    if key:
        assert e.value.key == key


def test_zero1_and_nvme_are_refused(tmp_path):
    for zero, words in (({"stage": 1}, "ZeRO stage 1"), ({"stage": 3, "offload_param": {"device": "nvme"}}, "nvme")):
        (tmp_path / "ds.json").write_text(__import__("json").dumps({"zero_optimization": zero}))
        cfg = tmp_path / "lf.yaml"
        cfg.write_text("model_name_or_path: m\ndeepspeed: ds.json\n")
        with pytest.raises(ProfileError, match=words):
            read_config(cfg)


def _fttui(*args, cwd):
    return subprocess.run([sys.executable, "-m", "fttui", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_cli_profiles_estimate_and_bad_input(tmp_path, fttui_home):
    work = tmp_path / "work"
    shutil.copytree(DATA, work)
    out = _fttui("profiles", "--from", "llamafactory_lora_sft.yaml", cwd=work)
    assert out.returncode == 0, out.stderr
    assert 'sharding = "zero2-offload"' in out.stdout and "#   template = " in out.stdout
    sets = [a for s in TINY for a in ("--set", s)]
    est = _fttui("estimate", "--from", "axolotl_qlora.yml", *sets, "--json", cwd=work)
    assert est.returncode == 0, est.stderr
    assert "not mapped: " in est.stderr and "sample_packing" in est.stderr
    assert '"method": "qlora"' in est.stdout
    both = _fttui("estimate", "--from", "axolotl_qlora.yml", "-p", "tiny-lora", cwd=work)
    neither = _fttui("estimate", cwd=work)
    (work / "lf.yaml").write_text("model_name_or_path: m\ndeepspeed: missing.json\n")
    missing = _fttui("run", "--headless", "--from", "lf.yaml", cwd=work)
    for res, words in ((both, "not both"), (neither, "give a profile"), (missing, "DeepSpeed config not found")):
        assert res.returncode == 2, res.stderr
        assert words in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (fttui_home / "runs").exists() or not any((fttui_home / "runs").iterdir())


def test_a_value_with_newlines_never_becomes_live_toml(tmp_path):
    """Issue 36: an unmapped value (``template``) with newlines printed into a comment ended the
    comment, and the next line, `[command]`, became live TOML in the profile the user saves."""
    cfg = tmp_path / "inj.yaml"
    cfg.write_text('model_name_or_path: org/model\nstage: sft\nfinetuning_type: lora\n'
                   "template: \"llama3\\n[command]\\nargv = ['touch', 'PWNED']\\n[model.arch_config]\\n#\"\n")
    text = profile_toml(read_config(cfg))
    data = tomllib.loads(text)
    assert "command" not in data and "arch_config" not in data.get("model", {}), data
    assert all(line.startswith("#") or "=" in line or line.startswith("[") or not line.strip()
               for line in text.splitlines())
    assert "\\n[command]" in text  # the value shown as it was, on one line
