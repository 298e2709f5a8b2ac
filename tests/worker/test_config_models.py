"""Models from their own config.json: the torch-free layouts (fttui.core.models.layouts) count
exactly the parameters transformers builds (meta device: no memory, no download), for every
family they know and for the published configs of tests/data/model_configs; a folder holding
only a tiny config.json random-initialises and trains a few steps through the worker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from fttui.core.models.hfconfig import read_config  # noqa: E402
from fttui.core.models.layouts import FAMILIES, layout  # noqa: E402
from fttui.core.models.numbers import config_numbers  # noqa: E402
from fttui.core.profiles import load_profile  # noqa: E402

from .conftest import read_events, run_worker, write_run_dir  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model_configs"
#: published parameter counts of the fixture configs (model cards / papers)
PUBLISHED = {"mistral-7b": 7.24e9, "phi-3-mini": 3.82e9, "gemma-2b": 2.51e9, "mixtral-8x7b": 46.7e9,
             "qwen1.5-moe-a2.7b": 14.3e9}

_TINY = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
         "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
#: extra numbers per family (head_dim default of gemma/qwen3 is large: keep the tiny size)
_EXTRA = {
    "qwen3": {"head_dim": 8}, "gemma": {"head_dim": 8}, "gemma2": {"head_dim": 8},
    "gemma3_text": {"head_dim": 8},
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                  "shared_expert_intermediate_size": 24},
    "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "head_dim": 8},
    "bloom": {"n_layer": 3, "n_head": 4},
}
#: variants: biases, tied / untied, explicit head_dim, sparse steps and dense-only layers
_VARIANTS = [
    ("llama", {"attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True}),
    ("llama", {"head_dim": 16}),
    ("granite", {"attention_bias": True}),
    ("mistral", {"head_dim": 12, "num_key_value_heads": 1}),
    ("qwen2", {"tie_word_embeddings": True}),
    ("qwen3", {"attention_bias": True, "tie_word_embeddings": True}),
    ("olmo2", {"attention_bias": True}),
    ("gemma", {"tie_word_embeddings": False, "attention_bias": True}),
    ("qwen2_moe", {"decoder_sparse_step": 2, "qkv_bias": False}),
    ("qwen2_moe", {"mlp_only_layers": [0], "shared_expert_intermediate_size": 0}),
    ("qwen3_moe", {"mlp_only_layers": [1, 2]}),
]
CASES = [(t, {}) for t in FAMILIES] + _VARIANTS


def _meta(model_type: str, numbers: dict):
    cfg = transformers.AutoConfig.for_model(model_type, **numbers)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(cfg)


def _counts(model) -> tuple[int, int]:
    """(unique parameters, weights of the decoder layers' nn.Linear modules)."""
    total = sum(p.numel() for p in model.parameters())
    layers = model.base_model.h if hasattr(model.base_model, "h") else model.base_model.layers
    linear = sum(m.weight.numel() for m in layers.modules() if isinstance(m, torch.nn.Linear))
    return total, linear


@pytest.mark.parametrize("model_type,extra", CASES, ids=[f"{t}-{i}" for i, (t, _e) in enumerate(CASES)])
def test_layout_counts_what_transformers_builds(model_type, extra):
    numbers = {**_TINY, **_EXTRA.get(model_type, {}), **extra}
    if model_type == "bloom":
        numbers = {k: v for k, v in numbers.items() if k not in ("num_hidden_layers", "num_attention_heads")}
    lay = layout(model_type, numbers)
    total, linear = _counts(_meta(model_type, numbers))
    assert lay.params() == total, (model_type, extra)
    assert lay.linear_params() == linear, (model_type, extra)
    assert not lay.note


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_configs_count_like_transformers(name):
    model_type, numbers = config_numbers(read_config(CONFIGS / name / "config.json"))
    lay = layout(model_type, numbers)
    total, linear = _counts(_meta(model_type, numbers))
    assert lay.params() == total and lay.linear_params() == linear
    assert abs(total - PUBLISHED[name]) / PUBLISHED[name] < 0.01, (name, total)


@pytest.mark.slow
def test_random_init_from_a_config_folder_trains(tmp_path):
    folder = tmp_path / "tiny-mistral"
    folder.mkdir()
    numbers = {"model_type": "mistral", **_TINY, "head_dim": 12, "sliding_window": None}
    (folder / "config.json").write_text(json.dumps(numbers))
    profile = tmp_path / "from-config.toml"
    profile.write_text(
        "method = \"full\"\n[model]\nname_or_path = \"tiny-mistral\"\ninit = \"random\"\n"
        "[data]\nmax_seq_len = 16\nnum_samples = 8\n[train]\nbatch_size = 2\nmax_steps = 3\n"
        "[devices]\ngpus = 0\n")
    r = load_profile(str(profile))
    assert r.model.config == str(folder / "config.json") and "model.config" in r.derived
    assert r.model.arch is None and r.model.tokenizer == "byte"
    run_dir = write_run_dir(tmp_path, r)
    proc = run_worker(run_dir, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = read_events(run_dir)
    start = next(e for e in events if e.get("event") == "start")
    assert start["params_total"] == layout("mistral", numbers).params()
    steps = [e for e in events if e.get("event") == "step"]
    assert len(steps) == 3 and all(e["loss"] > 0 for e in steps)


@pytest.mark.parametrize("targets", ["all-linear", ["qkv_proj", "o_proj"], ["gate_up_proj", "down_proj"]])
def test_phi3_lora_counts_the_fused_modules_peft_adapts(tmp_path, targets):
    """Phi-3 fuses q/k/v (qkv_proj) and gate/up (gate_up_proj): the estimate's LoRA parameters
    equal what peft adds to a Phi-3 built from the same config (meta device)."""
    peft = pytest.importorskip("peft")
    from fttui.core.memory import estimate

    # tiny-lora's own [model.arch_config] numbers win over the folder's: use the same ones
    numbers = {**_TINY, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 512}
    folder = tmp_path / "phi3"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "phi3", **numbers}))
    resolved = load_profile("tiny-lora", [f"model.name_or_path={folder}", "model.init=random",
                                          "model.arch=phi3", "model.arch_config.num_key_value_heads=2",
                                          f"lora.target_modules={json.dumps(targets)}"])
    model = _meta("phi3", numbers)
    lora = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules=targets))
    added = sum(p.numel() for n, p in lora.named_parameters() if "lora_" in n)
    assert estimate(resolved).inputs["lora_params"] == added
