"""FLOPs per token of a mixture of experts (issue 40 item 5): a token runs through top-k of a
sparse layer's routed experts (plus a shared expert, and the router), not every expert held; in
the forecast (the profile's numbers), the worker's ``start`` event and the live and stored MFU
(fttui.core.run.fold.perf). Torch-free; tests/unit/test_flops_count.py checks the count against
what PyTorch counts on tiny MoE models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fttui.core.base.errors import EstimateError
from fttui.core.experiments.forecast import forecast, profile_shape
from fttui.core.memory import estimate
from fttui.core.models.archs import param_count
from fttui.core.models.flops import ModelShape, flops_per_token, matmul_params, shape_from
from fttui.core.models.layouts import LayoutError, layout
from fttui.core.models.numbers import arch_numbers
from fttui.core.profiles import load_profile
from fttui.core.run.fold import perf
from fttui.core.run.files.events import StartEvent

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model_configs"
MIXTRAL = json.loads((CONFIGS / "mixtral-8x7b" / "config.json").read_text())
QWEN_MOE = json.loads((CONFIGS / "qwen1.5-moe-a2.7b" / "config.json").read_text())


@pytest.fixture(autouse=True)
def empty_cache(tmp_path, monkeypatch):
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("FTTUI_HOME", str(tmp_path / "home"))


def _profile(tmp_path: Path, config: dict, method: str = "full", name: str = "m"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    path = tmp_path / f"{name}.toml"
    path.write_text(f'method = "{method}"\n[model]\nname_or_path = "{folder}"\n'
                    '[train]\nprecision = "bf16"\n[devices]\ngpus = 1\n')
    return load_profile(str(path))


def _mixtral_active_non_embedding(cfg: dict) -> int:
    """Mixtral's parameters one token multiplies, from the config's numbers alone: per layer the
    attention, top-k of the experts' gated MLPs, the router and two RMSNorms; the final norm and
    the output layer (its multiply runs; only the input embedding is a lookup)."""
    h, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    head = h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * head, cfg["num_key_value_heads"] * head
    attention = h * q + 2 * h * kv + q * h
    experts = cfg["num_experts_per_tok"] * 3 * h * inter
    router = h * cfg["num_local_experts"]
    per_layer = attention + experts + router + 2 * h
    return cfg["num_hidden_layers"] * per_layer + h + vocab * h


def test_mixtral_6n_is_six_times_its_active_parameters(tmp_path):
    prof = _profile(tmp_path, MIXTRAL)
    shape = profile_shape(prof, estimate(prof).inputs)
    assert shape.params_total == param_count(dict(MIXTRAL)) == 46_702_792_704  # every expert held: 46.7B
    active = _mixtral_active_non_embedding(MIXTRAL)
    assert active == pytest.approx(12.75e9, rel=0.01)  # 12.9B active, the input embedding's 0.13B aside
    six_n = flops_per_token(shape, "full", 0.0).total  # s = 0: the 6N term alone
    assert six_n == pytest.approx(6 * active, rel=0.01)
    assert six_n == 6 * active  # exact: nothing else is left out
    # before: 6 x every parameter but the embedding, 3.65x as much
    dense = ModelShape(shape.params_total, shape.params_total, shape.vocab, shape.hidden, shape.layers,
                       shape.attn_dim, shape.tied)
    assert flops_per_token(dense, "full", 0.0).total / six_n == pytest.approx(3.65, abs=0.01)


def test_the_count_depends_on_top_k_not_on_the_experts_held(tmp_path):
    two = dict(MIXTRAL, num_local_experts=2, num_experts_per_tok=2)
    eight = _profile(tmp_path, MIXTRAL, name="eight")
    of_two = _profile(tmp_path, two, name="two")
    fpt = {}
    for key, prof in (("eight", eight), ("two", of_two)):
        shape = profile_shape(prof, estimate(prof).inputs)
        fpt[key] = flops_per_token(shape, "full", 4096).total
    assert arch_numbers(of_two.model).params < arch_numbers(eight.model).params / 3  # 2 experts held, not 8
    # the same work per token, but the router's h x 6 more rows per layer
    assert fpt["eight"] == pytest.approx(fpt["two"], rel=1e-3)
    assert fpt["eight"] - fpt["two"] == 6 * 32 * 4096 * 6


def test_qwen2_moe_counts_the_shared_expert_and_the_routers(tmp_path):
    prof = _profile(tmp_path, QWEN_MOE)
    shape = profile_shape(prof, estimate(prof).inputs)
    c = QWEN_MOE
    h, L, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    attention = 4 * h * h + 3 * h  # q, k, v, o and the q/k/v biases (32 heads of 64)
    routed = c["num_experts_per_tok"] * 3 * h * c["moe_intermediate_size"]
    shared = 3 * h * c["shared_expert_intermediate_size"] + h  # the shared expert and its one-row gate
    router = h * c["num_experts"]
    active = L * (attention + routed + shared + router + 2 * h) + h + vocab * h
    assert shape.params_total == 14_315_784_192
    assert matmul_params(shape, "full").n == active
    assert active + vocab * h == pytest.approx(2.7e9, rel=0.01)  # A2.7B: 2.7B active, embedding in


def test_qwen3_moe_dense_layers_count_whole(tmp_path):
    cfg = {"model_type": "qwen3_moe", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 256,
           "moe_intermediate_size": 32, "num_experts": 16, "num_experts_per_tok": 4, "num_hidden_layers": 6,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "decoder_sparse_step": 2,
           "mlp_only_layers": [3]}
    numbers = arch_numbers(_profile(tmp_path, cfg).model)
    assert numbers.sparse_layers == 2  # layers 1 and 5 (3 is dense by mlp_only_layers)
    shape = shape_from(numbers.params, numbers.params, numbers.shape_numbers())
    assert shape is not None and shape.idle_experts == 2 * 12 * 3 * 64 * 32
    assert matmul_params(shape, "full").n == numbers.params - 1000 * 64 - shape.idle_experts


def test_adapters_leave_the_idle_experts_out_of_the_frozen_base():
    shape = ModelShape(params_total=1_000_000, params_trainable=1000, vocab=100, hidden=10, layers=2, attn_dim=10,
                       tied=False, experts=8, top_k=2, expert_inter=20, sparse_layers=2)
    idle = 2 * 6 * 3 * 10 * 20
    p = matmul_params(shape, "lora")
    assert (p.n, p.trained) == (1_000_000 - 1000 - 100 * 10 - idle + 1000, 1000)
    full = matmul_params(shape, "full")
    assert full.n == full.trained == 1_000_000 - 100 * 10 - idle
    # numbers that do not fit together (top-k above the experts) count as dense
    assert ModelShape(10**6, 10**6, 100, 10, 2, 10, False, 2, 4, 20, 2).idle_experts == 0


def _start(shape: dict | None, config: dict | None = None, total: int = 46_702_792_704) -> StartEvent:
    return StartEvent(params_total=total, params_trainable=total, model_shape=shape, config=config)


def test_the_start_event_carries_the_moe_numbers_and_old_events_stay_readable(tmp_path):
    dense = {"vocab": 32000, "hidden": 4096, "layers": 32, "attn_dim": 4096, "tied": False}
    moe = dict(dense, experts=8, top_k=2, expert_inter=14336, sparse_layers=32)
    new, old = perf.model_shape(_start(moe)), perf.model_shape(_start(dense))
    assert new is not None and old is not None
    assert matmul_params(new, "full").n == _mixtral_active_non_embedding(MIXTRAL)
    assert matmul_params(old, "full").n == 46_702_792_704 - 32000 * 4096  # an older event: counted as before
    # an event without model_shape: the profile's numbers, the MoE ones too
    prof = _profile(tmp_path, MIXTRAL)
    assert perf.model_shape(_start(None, prof.to_dict())) == new
    # a start event read back from JSON keeps the keys
    assert StartEvent.from_dict(json.loads(json.dumps(_start(moe).to_dict()))).model_shape == moe


def test_mixtral_forecast_is_the_routed_work(tmp_path):
    prof = _profile(tmp_path, MIXTRAL)
    shape = profile_shape(prof, estimate(prof).inputs)
    dense = ModelShape(shape.params_total, shape.params_total, shape.vocab, shape.hidden, shape.layers,
                       shape.attn_dim, shape.tied)
    kw = dict(samples=1000, fed_tokens_per_sample=4096, real_tokens_per_sample=4096, rows=[], card="NVIDIA H100 80GB HBM3",
              cards=1)
    routed, before = forecast(prof, shape, **kw), forecast(prof, dense, **kw)
    assert routed.flops_per_token == pytest.approx(flops_per_token(shape, "full", 4096).total, rel=1e-6)
    assert before.flops_per_token / routed.flops_per_token == pytest.approx(3.45, abs=0.01)
    # the stated per-pass fixed cost does not scale with the work: the run 3.1x shorter than before
    assert 3.0 < before.run_seconds / routed.run_seconds < 3.45


@pytest.mark.parametrize("model_type", ["deepseek_v2", "deepseek_v3"])
def test_deepseek_moe_is_still_refused_in_one_line(tmp_path, model_type):
    cfg = {"model_type": model_type, "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432,
           "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
           "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128, "q_lora_rank": 1536,
           "kv_lora_rank": 512, "first_k_dense_replace": 3}
    with pytest.raises(LayoutError):
        layout(model_type, {k: v for k, v in cfg.items() if k != "model_type"})
    with pytest.raises(EstimateError) as ei:
        estimate(_profile(tmp_path, cfg))
    msg = str(ei.value)
    assert "\n" not in msg and "mixture of experts" in msg and model_type in msg
