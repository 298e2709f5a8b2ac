"""FLOPs per token against what PyTorch counts (torch.utils.flop_counter) on tiny real models, and
the formula's N against the real parameters of the reference architectures (docs/performance.md).

The worker reports the model's shape (fttui.integrations.hf_info.model_shape); the core's formula
(fttui.core.models.flops) must give the multiplies a training step of that model runs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from fttui.core.models.archs import ARCHS  # noqa: E402
from fttui.core.models.flops import flops_per_token, matmul_params, shape_from  # noqa: E402
from fttui.core.models.numbers import arch_numbers  # noqa: E402
from fttui.core.profiles import load_profile  # noqa: E402
from tests.helpers import profile_of  # noqa: E402
from fttui.core.run.fold import perf  # noqa: E402
from fttui.core.run.files.events import StartEvent  # noqa: E402
from fttui.integrations.hf_info import model_shape  # noqa: E402
from fttui.worker.structure import count_params  # noqa: E402

B, S = 2, 64


def _tiny(tied: bool = False):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    # eager attention: its score and weighted-sum matmuls are what the flop counter sees
    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied,
                      attn_implementation="eager")
    return LlamaForCausalLM(cfg)


def _lora(model, method: str):
    from peft import LoraConfig, get_peft_model

    kw = dict(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    if method == "lora-emb":
        kw["modules_to_save"] = ["embed_tokens", "lm_head"]
        if model.config.tie_word_embeddings:
            kw["ensure_weight_tying"] = True
    pm = get_peft_model(model, LoraConfig(**kw))
    # what gradient checkpointing makes transformers do anyway: the first layer's input needs a
    # gradient, so every frozen multiply gets its activation gradient (4 N_base, the formula)
    pm.base_model.model.enable_input_require_grads()
    return pm


def _measured_and_formula(model, method: str, gc: bool = False) -> tuple[float, float, float]:
    """(FLOPs PyTorch counted per token, the formula's, the norm weights' share of the formula)."""
    model.train()
    ids = torch.randint(0, 512, (B, S), generator=torch.Generator().manual_seed(1))
    with FlopCounterMode(display=False) as fc:
        model(input_ids=ids, labels=ids).loss.backward()
    total, trainable = count_params(model)
    shape = shape_from(total, trainable, model_shape(model))
    norms = sum(p.numel() for n, p in model.named_parameters() if "norm" in n)
    # norm weights are in N (multiplied, elementwise) but not matmuls: 2 (or 4, 6) FLOPs each
    return fc.get_total_flops() / (B * S), flops_per_token(shape, method, S, gc).total, 6.0 * norms


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("method", ["full", "lora", "lora-emb"])
def test_formula_matches_what_pytorch_counts(method, tied):
    model = _tiny(tied)
    if method != "full":
        model = _lora(model, method)
    measured, formula, norms = _measured_and_formula(model, method)
    assert formula - norms <= measured <= formula, (measured, formula)
    assert measured == pytest.approx(formula, rel=0.005)


def test_gradient_checkpointing_counts_the_layers_forward_again():
    plain, formula, _ = _measured_and_formula(_tiny(), "full")
    model = _tiny()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})  # as the worker
    measured, formula_gc, norms = _measured_and_formula(model, "full", gc=True)
    recompute_counted = formula_gc - formula
    recompute_run = measured - plain
    # 2 (N - head) + 4 L a s, counted; PyTorch's non-reentrant checkpoint stops each layer's
    # recompute once backward has what it needs, so the last multiply (the MLP's down projection,
    # 2 x 256 x 128 per token and layer) is not run again: the count is an upper bound
    down = 2 * 4 * 256 * 128
    assert recompute_run == pytest.approx(recompute_counted - down, abs=norms)
    assert recompute_run <= recompute_counted


#: tiny mixtures of experts: Mixtral (every layer sparse), Qwen2-MoE (a shared expert and its
#: gate; layer 1 dense by mlp_only_layers), Qwen3-MoE (every second layer sparse)
MOE = {
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2, num_hidden_layers=2),
    "qwen2_moe": dict(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=64,
                      shared_expert_intermediate_size=128, num_hidden_layers=3, mlp_only_layers=[1]),
    "qwen3_moe": dict(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=64, num_hidden_layers=4,
                      decoder_sparse_step=2, head_dim=32),
}


@pytest.mark.parametrize("model_type", list(MOE))
def test_moe_formula_counts_the_experts_a_token_goes_through(model_type):
    """PyTorch counts the multiplies of the top-k experts each token is routed to (the eager
    experts loop; transformers 5's grouped kernels are invisible to the flop counter), the router
    and the shared expert: the formula's count, up to the norm weights and biases."""
    torch.manual_seed(0)
    numbers = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_attention_heads=4,
                   num_key_value_heads=2, **MOE[model_type])
    cfg = transformers.AutoConfig.for_model(model_type, **numbers, attn_implementation="eager",
                                            experts_implementation="eager")
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    measured, formula, norms = _measured_and_formula(model, "full")
    biases = 6.0 * sum(p.numel() for n, p in model.named_parameters() if n.endswith(".bias"))
    assert formula - norms - biases <= measured <= formula, (measured, formula)
    assert measured == pytest.approx(formula, rel=0.005)
    # the worker's shape is the profile's: the same MoE numbers from the config alone
    shape = model_shape(model)
    assert shape["sparse_layers"] == {"mixtral": 2, "qwen2_moe": 2, "qwen3_moe": 2}[model_type]
    prof = profile_of({"model": {"arch": model_type, "arch_config": numbers}})
    total, trainable = count_params(model)
    from_worker = perf.model_shape(StartEvent(params_total=total, params_trainable=trainable, model_shape=shape))
    from_profile = perf.model_shape(StartEvent(params_total=total, params_trainable=trainable, config=prof.to_dict()))
    assert from_worker == from_profile is not None and from_worker.idle_experts > 0
    assert arch_numbers(prof.model).params == total


@pytest.mark.parametrize("name", ["qwen-1.8b", "bloom-2b6", "chatglm3-6b", "baichuan2-7b"])
def test_n_is_the_real_parameters_but_the_input_embedding(name):
    arch = ARCHS[name]
    cfg = transformers.AutoConfig.for_model(arch.model_type, **arch.config_dict())
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    total, trainable = count_params(model)
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    # N counted directly: every tensor but the input embedding's, plus the output layer's when it
    # is the same tensor (its multiply runs all the same)
    direct = sum(p.numel() for p in model.parameters() if p is not emb) + (emb.numel() if head is emb else 0)
    shape = shape_from(total, trainable, model_shape(model))
    assert matmul_params(shape, "full").n == direct
    # the worker's shape is the architecture table's: the same N from the profile alone
    numbers = arch_numbers(profile_of({"model": {"arch": name}}).model)
    assert (shape.vocab, shape.hidden, shape.layers, shape.attn_dim, shape.tied) == \
        (numbers.vocab, numbers.hidden, numbers.layers, numbers.q_dim, numbers.tied)
    assert numbers.params == total


def test_profile_numbers_and_worker_shape_agree_on_tiny_lora():
    prof = load_profile("tiny-lora")
    cfg = transformers.AutoConfig.for_model(prof.model.arch, **prof.model.arch_config)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    total, trainable = count_params(model)
    from_worker = perf.model_shape(StartEvent(**{"params_total": total, "params_trainable": trainable, "model_shape": model_shape(model)}))
    from_profile = perf.model_shape(StartEvent(**{"params_total": total, "params_trainable": trainable, "config": prof.to_dict()}))
    assert from_worker == from_profile is not None


def test_step_event_reads_the_allocator_once_per_step(monkeypatch, tmp_path):
    """On CUDA the step event has the caching allocator's cumulative retries and OOMs beside the
    peaks, from one ``torch.cuda.memory_stats()`` call (the peaks used to cost two)."""
    from types import SimpleNamespace

    from fttui.core.run.files.events import read_jsonl
    from fttui.integrations.hf import FttuiCallback

    calls = []
    stats = {"allocated_bytes.all.peak": 3 * 2**30, "reserved_bytes.all.peak": 4 * 2**30,
             "allocated_bytes.all.current": 2 * 2**30, "reserved_bytes.all.current": 3 * 2**30,
             "num_alloc_retries": 2, "num_ooms": 0}
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda *a, **k: calls.append(1) or dict(stats))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a, **k: (5 * 2**30, 80 * 2**30))  # (free, total)
    for name in ("max_memory_allocated", "max_memory_reserved"):  # not called any more
        monkeypatch.setattr(torch.cuda, name, lambda *a, **k: pytest.fail("a second allocator call"))
    emitted = lambda: read_jsonl(tmp_path / "events.jsonl")  # noqa: E731
    cb = FttuiCallback(str(tmp_path), via="worker", strict=True)
    cb.active, cb.on_cuda, cb.t0, cb.total_steps = True, True, 0.0, 2
    cb.on_step_end(None, SimpleNamespace(global_step=1, epoch=0.5), None)
    ev = emitted()[-1]
    assert len(calls) == 1
    assert ev["torch_peak_alloc_mb"] == 3072.0 and ev["torch_peak_reserved_mb"] == 4096.0
    assert ev["torch_alloc_retries"] == 2 and ev["torch_ooms"] == 0
    # the same call's current figures (the memory trend) and the card's free memory
    assert (ev["torch_alloc_mb"], ev["torch_reserved_mb"], ev["cuda_free_mb"]) == (2048.0, 3072.0, 5120.0)
    cpu = FttuiCallback(str(tmp_path), via="worker", strict=True)
    cpu.active, cpu.on_cuda, cpu.t0, cpu.total_steps = True, False, 0.0, 2
    cpu.on_step_end(None, SimpleNamespace(global_step=1, epoch=0.5), None)
    assert emitted()[-1]["torch_alloc_retries"] is None and emitted()[-1]["torch_ooms"] is None and len(calls) == 1
