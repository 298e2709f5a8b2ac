"""Real tools' example configs against what fttui made of them (issue 27, items 8-13): a
pre-quantized checkpoint is never estimated as bf16 (GPTQ / AWQ: as stored), a plain LoRA estimate shows no 4-bit
quantisation, the GPU count of a DeepSpeed setup, QLoRA under FSDP shown with its refusal, no key
dropped without being listed, the tool's default optimizer written with a note, a DeepSpeed JSON
found beside the YAML or in its parent folders."""

from __future__ import annotations

import json

import pytest

from fttui.core.base.errors import EstimateError, ProfileError
from fttui.core.memory import estimate
from fttui.core.profiles import load_profile
from fttui.core.profiles.foreign import load_config_profile, read_config
from fttui.core.run.launching.preflight import preflight

LLAMA3 = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 128256, "hidden_size": 4096,
          "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
          "num_key_value_heads": 8, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}
AWQ_YAML = """### LLaMA-Factory examples/train_qlora/llama3_lora_sft_awq.yaml, model pointing at a local folder
model_name_or_path: {model}
trust_remote_code: true
stage: sft
do_train: true
finetuning_type: lora
lora_rank: 8
lora_target: all
dataset: identity,alpaca_en_demo
template: llama3
cutoff_len: 2048
max_samples: 1000
output_dir: saves/llama3-8b/lora/sft
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
num_train_epochs: 3.0
bf16: true
"""


def _model(tmp_path, name, quant=None):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA3 | ({"quantization_config": quant} if quant else {})))
    return folder


def test_awq_checkpoint_is_estimated_as_stored_never_as_bf16(tmp_path, monkeypatch):
    """Item 8: the AWQ example maps to plain LoRA (its YAML has no quantisation key); the model's
    config.json says AWQ: the estimate counts its 4-bit weights (issue 22), the preflight names
    the kernel package's extra when it is missing; a stored quantisation fttui does not read
    (HQQ) is refused by the mapping's note, the estimate and the preflight."""
    from fttui.core.run.launching import extras

    awq = _model(tmp_path, "Llama-3-8B-AWQ", {"quant_method": "awq", "bits": 4, "group_size": 128,
                                              "version": "gemm", "zero_point": True})
    cfg = tmp_path / "llama3_lora_sft_awq.yaml"
    cfg.write_text(AWQ_YAML.format(model=awq.name))
    m = read_config(cfg)
    assert m.data["method"] == "lora" and not any("refuse" in n for n in m.notes), m.notes
    resolved, _ = load_config_profile(cfg)
    plain = _model(tmp_path, "Llama-3-8B", None)  # the same model unquantised
    ok = load_profile("tiny-lora", ["model.init=pretrained", f"model.name_or_path={plain}", "model.arch=llama",
                                    "gpus=1", "precision=bf16"])
    bf16 = estimate(ok).breakdown["weights"]
    assert bf16 > 14 * 2**30
    stored = estimate(resolved.with_settings({"devices.gpus": 1})).breakdown["weights"]
    assert 0.25 * bf16 < stored < 0.4 * bf16  # int4 linears, bf16 embeddings and head
    monkeypatch.setattr(extras, "_installed", lambda name: name not in ("gptqmodel", "optimum"))
    with pytest.raises(ProfileError, match=r"needs fttui\[gptq\]") as e:
        preflight(resolved, gpu_count=(1, None))
    assert e.value.key == "model.name_or_path" and "\n" not in str(e.value)
    hqq = _model(tmp_path, "Llama-3-8B-HQQ", {"quant_method": "hqq", "nbits": 4})
    cfg.write_text(AWQ_YAML.format(model=hqq.name))
    m = read_config(cfg)
    assert any("pre-quantized HQQ 4-bit checkpoint" in n and "refuse" in n for n in m.notes), m.notes
    resolved, _ = load_config_profile(cfg)
    with pytest.raises(EstimateError, match="pre-quantized HQQ 4-bit checkpoint"):
        estimate(resolved)
    with pytest.raises(ProfileError, match="pre-quantized HQQ") as e:
        preflight(resolved, gpu_count=(1, None))
    assert e.value.key == "model.name_or_path" and "\n" not in str(e.value)


def test_bitsandbytes_checkpoint_goes_with_its_own_method(tmp_path):
    bnb = _model(tmp_path, "bnb-4bit", {"quant_method": "bitsandbytes", "load_in_4bit": True,
                                        "bnb_4bit_quant_type": "nf4"})
    over = ["model.init=pretrained", f"model.name_or_path={bnb}", "model.arch=llama", "gpus=1", "precision=bf16"]
    with pytest.raises(EstimateError, match="use method qlora"):
        estimate(load_profile("tiny-lora", over))
    q = estimate(load_profile("tiny-lora", over + ["method=qlora"])).breakdown["weights"]
    plain = load_profile("tiny-lora", over[:1] + [f"model.name_or_path={_model(tmp_path, 'plain', None)}"] + over[2:])
    assert q < 0.7 * estimate(plain).breakdown["weights"]  # its 4-bit weights, not bf16


def test_plain_lora_estimate_shows_no_4bit_quantisation():
    """Item 8: a LoRA run quantises nothing; its estimate's inputs say so (no nf4 defaults)."""
    lora = estimate(load_profile("tiny-lora")).to_dict()
    assert lora["inputs"]["quant"] is None
    q = estimate(load_profile("tiny-lora", ["method=qlora", "gpus=1"])).to_dict()
    assert q["inputs"]["quant"]["type"] == "nf4"
    int8 = estimate(load_profile("tiny-lora", ["method=lora-int8", "gpus=1"])).to_dict()
    assert int8["inputs"]["quant"]["type"] == "int8"


QWEN3 = {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 2560, "intermediate_size": 9728,
         "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
         "max_position_embeddings": 40960, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
Z3 = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"},
      "zero_optimization": {"stage": 3, "overlap_comm": False, "contiguous_gradients": True,
                            "stage3_gather_16bit_weights_on_model_save": True}}
FULL_SFT = """model_name_or_path: {model}
trust_remote_code: true
stage: sft
do_train: true
finetuning_type: full
deepspeed: examples/deepspeed/ds_z3_config.json
dataset: identity,alpaca_en_demo
template: qwen3_nothink
cutoff_len: 2048
output_dir: saves/qwen3-4b/full/sft
per_device_train_batch_size: 1
gradient_accumulation_steps: 2
learning_rate: 1.0e-5
num_train_epochs: 3.0
bf16: true
"""


def _llamafactory_tree(tmp_path):
    """LLaMA-Factory's layout: the YAML in examples/train_full/, the DeepSpeed JSON named from
    the root (examples/deepspeed/), a local model folder."""
    root = tmp_path / "LLaMA-Factory"
    (root / "examples" / "train_full").mkdir(parents=True)
    (root / "examples" / "deepspeed").mkdir()
    (root / "examples" / "deepspeed" / "ds_z3_config.json").write_text(json.dumps(Z3))
    model = tmp_path / "Qwen3-4B"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN3))
    cfg = root / "examples" / "train_full" / "qwen3_full_sft.yaml"
    cfg.write_text(FULL_SFT.format(model=model))
    return root, cfg


def test_deepspeed_json_named_from_the_tool_root_is_found(tmp_path, monkeypatch):
    """Item 13: run from anywhere, the JSON named relative to LLaMA-Factory's root is found in a
    folder above the YAML, and the notes say which file was used."""
    root, cfg = _llamafactory_tree(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    m = read_config(cfg)
    assert m.data["sharding"] == "zero3" and m.deepspeed_file.resolve() == (
        root / "examples" / "deepspeed" / "ds_z3_config.json").resolve()
    assert any("examples/deepspeed/ds_z3_config.json: ZeRO stage 3" in n for n in m.notes), m.notes
    (root / "examples" / "deepspeed" / "ds_z3_config.json").unlink()
    with pytest.raises(ProfileError, match="DeepSpeed config not found.*each folder above it"):
        read_config(cfg)


def test_gpu_count_of_a_deepspeed_setup_is_noted_and_set(tmp_path, monkeypatch):
    """Item 9: the YAML does not say how many GPUs; the note says so, the estimate says that
    ZeRO-3 over one card shards nothing, --set devices.gpus=8 (profiles --from too) fixes it."""
    from fttui.core.profiles.foreign import with_overrides

    _root, cfg = _llamafactory_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    m = read_config(cfg)
    assert m.gpu_note and m.gpu_note in m.notes and "takes it from the launch" in m.gpu_note
    assert "shards nothing" in m.gpu_note
    one, _ = load_config_profile(cfg)
    eight, _ = load_config_profile(cfg, ["devices.gpus=8"])
    e1, e8 = estimate(one), estimate(eight)
    assert any("over 1 process shards nothing" in n for n in e1.notes)
    assert max(e8.gpu_peak_bytes) < 0.5 * max(e1.gpu_peak_bytes)
    shown = with_overrides(m, ["devices.gpus=8"])
    assert shown.data["devices"]["gpus"] == 8 and m.gpu_note not in shown.notes
    assert "--set devices.gpus=8" in shown.notes


def test_cli_profiles_from_takes_set_and_run_says_the_gpu_count(tmp_path, fttui_home):
    from tests.conftest import run_fttui

    _root, cfg = _llamafactory_tree(tmp_path)
    shown = run_fttui("profiles", "--from", str(cfg), "--set", "devices.gpus=8", check=True).stdout
    assert "\ngpus = 8\n" in shown and "#   --set devices.gpus=8" in shown
    est = run_fttui("estimate", "--from", str(cfg), "--json")
    assert est.returncode == 0, est.stderr
    assert "number of GPUs: LLaMA-Factory takes it from the launch" in est.stderr
    assert "DeepSpeed config " in est.stderr and "ds_z3_config.json" in est.stderr
    est8 = run_fttui("estimate", "--from", str(cfg), "--set", "gpus=8", "--json")
    assert est8.returncode == 0 and "number of GPUs" not in est8.stderr


QLORA_FSDP = """base_model: casperhansen/llama-3-70b-fp16
model_type: LlamaForCausalLM
tokenizer_type: AutoTokenizer
load_in_4bit: true
adapter: qlora
sequence_len: 512
pad_to_sequence_len: true
lora_r: 8
lora_alpha: 16
lora_dropout: 0.05
lora_target_linear: true
gradient_accumulation_steps: 4
micro_batch_size: 1
num_epochs: 4
optimizer: adamw_torch
learning_rate: 0.00001
bf16: auto
gradient_checkpointing: true
gradient_checkpointing_kwargs:
  use_reentrant: true
flash_attention: true
fsdp:
  - full_shard
  - auto_wrap
fsdp_config:
  fsdp_limit_all_gathers: true
  fsdp_sync_module_states: true
  fsdp_offload_params: true
  fsdp_use_orig_params: false
  fsdp_cpu_ram_efficient_loading: true
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
  fsdp_state_dict_type: FULL_STATE_DICT
  fsdp_sharding_strategy: FULL_SHARD
"""


def test_qlora_fsdp_maps_and_no_key_dropped(tmp_path, fttui_home):
    """Items 10 and 11 on the shape of axolotl's examples/llama-3/qlora-fsdp-70b.yaml: every
    fsdp_config key but offload and the strategy, and gradient_checkpointing_kwargs, are listed;
    the profile maps (QLoRA under FSDP, issue 22: 4-bit weights stored in the compute dtype) and
    is estimated (each card holds the whole quantised model while it loads)."""
    from tests.conftest import run_fttui

    cfg = tmp_path / "qlora-fsdp-70b.yaml"
    cfg.write_text(QLORA_FSDP)
    m = read_config(cfg)
    assert (m.data["method"], m.data["sharding"]) == ("qlora", "fsdp-offload")
    listed = {k for k, _, _ in m.unmapped}
    assert {f"fsdp_config.fsdp_{k}" for k in ("state_dict_type", "cpu_ram_efficient_loading", "sync_module_states",
                                               "auto_wrap_policy", "transformer_layer_cls_to_wrap", "use_orig_params",
                                               "limit_all_gathers")} <= listed
    assert "gradient_checkpointing_kwargs" in listed
    assert not {"fsdp_config.fsdp_offload_params", "fsdp_config.fsdp_sharding_strategy"} & listed
    assert any("bnb_4bit_quant_storage" in n for n in m.notes)
    shown = run_fttui("profiles", "--from", str(cfg))
    assert shown.returncode == 0, shown.stderr
    assert "REFUSED" not in shown.stdout
    assert 'method = "qlora"' in shown.stdout and 'sharding = "fsdp-offload"' in shown.stdout
    assert "#   fsdp_config.fsdp_state_dict_type = " in shown.stdout
    est = run_fttui("estimate", "--from", str(cfg), "--set", "gpus=2", "--set", "model.arch=llama-2-7b",
                    "--set", "model.init=random", "--json")
    assert est.returncode == 0, est.stderr


def test_tool_default_optimizer_is_written_with_a_note(tmp_path):
    """Item 12: a LLaMA-Factory QLoRA file without optim runs the Trainer's default, as
    LLaMA-Factory would (not fttui's paged optimizer); axolotl's schema default likewise."""
    lf = tmp_path / "qlora.yaml"
    lf.write_text("model_name_or_path: m\nfinetuning_type: lora\nquantization_bit: 4\n")
    m = read_config(lf)
    assert m.data["method"] == "qlora" and m.data["train"]["optimizer"] == "adamw_torch"
    assert "optim not given: LLaMA-Factory's default 'adamw_torch'" in m.notes
    resolved, _ = load_config_profile(lf, ["model.init=random", "model.arch=tiny-llama"])
    assert resolved.train.optimizer == "adamw_torch"
    given = tmp_path / "given.yaml"
    given.write_text("model_name_or_path: m\nfinetuning_type: lora\nquantization_bit: 4\noptim: paged_adamw_8bit\n")
    assert read_config(given).data["train"]["optimizer"] == "paged_adamw_8bit"
    ax = tmp_path / "ax.yml"
    ax.write_text("base_model: m\nadapter: qlora\nload_in_4bit: true\n")
    am = read_config(ax)
    assert am.data["train"]["optimizer"] == "adamw_torch_fused"
    assert "optimizer not given: axolotl's default 'adamw_torch_fused'" in am.notes
