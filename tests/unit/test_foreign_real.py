"""Real tools' example configs against what fttui made of them (issue 27, items 8-13): a
pre-quantized checkpoint is never estimated as bf16, a plain LoRA estimate shows no 4-bit
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
from fttui.core.run.preflight import preflight

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


def test_awq_checkpoint_is_refused_not_estimated_as_bf16(tmp_path):
    """Item 8: the AWQ example maps to plain LoRA (its YAML has no quantisation key); the model's
    config.json says AWQ: the mapping notes it, the estimate and the preflight refuse it."""
    awq = _model(tmp_path, "Llama-3-8B-AWQ", {"quant_method": "awq", "bits": 4, "group_size": 128})
    cfg = tmp_path / "llama3_lora_sft_awq.yaml"
    cfg.write_text(AWQ_YAML.format(model=awq.name))
    m = read_config(cfg)
    assert m.data["method"] == "lora"
    assert any("pre-quantized AWQ 4-bit checkpoint" in n and "refuse" in n for n in m.notes), m.notes
    resolved, _ = load_config_profile(cfg)
    with pytest.raises(EstimateError, match="pre-quantized AWQ 4-bit checkpoint"):
        estimate(resolved)
    with pytest.raises(ProfileError, match="pre-quantized AWQ") as e:
        preflight(resolved, gpu_count=(1, None))
    assert e.value.key == "model.name_or_path" and "\n" not in str(e.value)
    plain = _model(tmp_path, "Llama-3-8B", None)  # the same model unquantised: estimated
    ok = load_profile("tiny-lora", ["model.init=pretrained", f"model.name_or_path={plain}", "model.arch=llama",
                                    "gpus=1", "precision=bf16"])
    assert estimate(ok).breakdown["weights"] > 14 * 2**30


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
