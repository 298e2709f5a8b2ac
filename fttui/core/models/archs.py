"""Architectures of the reference benchmarks, as native transformers configs (stdlib only).

Each :class:`Arch` names a published model (its hub id), the transformers ``model_type`` that
builds a model with the same tensor shapes without remote code, the config numbers for that
``model_type`` and the published parameter count. A profile's ``model.arch`` may name an entry
(``arch = "baichuan2-7b"``): resolution (``fttui.core.profiles``) turns it into the entry's
``model_type`` and fills ``model.arch_config`` with the numbers, so ``--set model.init=random``
builds the architecture from its config alone: no download, no remote code.

:func:`param_count` computes the parameter count from the numbers alone (no torch); it is exact
for the native mapping (checked against transformers on the meta device in
``tests/worker/test_arch_shapes.py``). See docs/architectures.md for where each mapping differs
from the original model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from fttui.core.models.layouts import layout

__all__ = ["ARCHS", "Arch", "param_count", "resolve_config"]


@dataclass(frozen=True)
class Arch:
    """One architecture.

    name: the key in :data:`ARCHS` (what ``model.arch`` names).
    hub_id: the original weights on the Hugging Face hub.
    model_type: the native transformers ``model_type`` the numbers are for.
    config: keyword arguments for ``AutoConfig.for_model(model_type, **config)`` (read-only).
    params_b: the published parameter count, in billions.
    needs_remote_code: the original hub repo needs ``trust_remote_code=True``.
    notes: what the native mapping does not capture.
    published_counts_tied_twice: the published figure counts a tied output matrix a second time
        (a state-dict count); :func:`param_count` counts unique parameters.
    hub_model_type: the ``model_type`` in the original's own config.json when it differs from
        :attr:`model_type` (a remote-code original: ``baichuan``, ``chatglm``, ``qwen``).
    """

    name: str
    hub_id: str
    model_type: str
    config: Mapping[str, Any]
    params_b: float
    needs_remote_code: bool
    notes: str = ""
    published_counts_tied_twice: bool = field(default=False)
    hub_model_type: str = ""

    @property
    def own_model_types(self) -> tuple[str, ...]:
        """The ``model_type`` values a config.json of this model may carry."""
        return tuple(dict.fromkeys(t for t in (self.model_type, self.hub_model_type) if t))

    def __post_init__(self) -> None:
        object.__setattr__(self, "config", MappingProxyType(dict(self.config)))

    def config_dict(self) -> dict[str, Any]:
        """A plain (mutable) copy of :attr:`config`."""
        return dict(self.config)


def _llama(
    vocab: int,
    hidden: int,
    inter: int,
    layers: int,
    heads: int,
    kv_heads: int,
    *,
    max_pos: int,
    eps: float,
    theta: float = 10000.0,
    tie: bool = False,
) -> dict[str, Any]:
    return {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "hidden_act": "silu",
        "max_position_embeddings": max_pos,
        "rms_norm_eps": eps,
        "rope_theta": theta,
        "tie_word_embeddings": tie,
    }


def _qwen2(
    vocab: int,
    hidden: int,
    inter: int,
    layers: int,
    heads: int,
    kv_heads: int,
    *,
    max_pos: int,
    eps: float,
    theta: float = 10000.0,
    tie: bool = False,
) -> dict[str, Any]:
    cfg = _llama(vocab, hidden, inter, layers, heads, kv_heads, max_pos=max_pos, eps=eps, theta=theta, tie=tie)
    cfg["use_sliding_window"] = False
    return cfg


_QWEN_V1_NOTES = (
    "Qwen (v1) QWenLMHeadModel (remote code) mapped onto qwen2: c_attn (fused qkv, with bias) = "
    "q/k/v_proj with bias, attn c_proj (no bias) = o_proj, w1/w2 = up/gate, mlp c_proj = down_proj. "
    "The original config's intermediate_size is twice the width of one SwiGLU branch; the mapping "
    "uses half. Not captured: logn attention scaling and dynamic NTK RoPE (use_logn_attn, "
    "use_dynamic_ntk; they only change attention past the training length), the fused c_attn "
    "module (LoRA on c_attn adapts q, k and v with one low-rank pair) and the module names."
)

#: architecture name -> :class:`Arch`
ARCHS: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch(
            name="baichuan2-7b",
            hub_id="baichuan-inc/Baichuan2-7B-Base",
            model_type="llama",
            config=_llama(125696, 4096, 11008, 32, 32, 32, max_pos=4096, eps=1e-6),
            params_b=7.51,
            needs_remote_code=True,
            hub_model_type="baichuan",
            notes=(
                "BaichuanForCausalLM (remote code) mapped onto llama: W_pack (fused q,k,v, no bias) "
                "has the shapes of q/k/v_proj together. Not captured: NormHead (the output layer "
                "normalises its weight rows before the matmul; same shape), the z-loss term of "
                "the original training loss, and the fused W_pack module (LoRA on W_pack adapts "
                "q, k and v with one low-rank pair; on the mapping all-linear gives each its own). "
                "Baichuan2-13B uses ALiBi instead of RoPE and is not included."
            ),
        ),
        Arch(
            name="baichuan-7b",
            hub_id="baichuan-inc/Baichuan-7B",
            model_type="llama",
            config=_llama(64000, 4096, 11008, 32, 32, 32, max_pos=4096, eps=1e-6),
            params_b=7.0,
            needs_remote_code=True,
            hub_model_type="baichuan",
            notes=(
                "BaiChuanForCausalLM (remote code) mapped onto llama: LLaMA layout with a fused "
                "W_pack (q,k,v, no bias) and a 64,000-token vocabulary. Not captured: the fused "
                "W_pack module (LoRA on W_pack adapts q, k and v with one low-rank pair)."
            ),
        ),
        Arch(
            name="chatglm3-6b",
            hub_id="THUDM/chatglm3-6b",
            # qwen2, not llama: qwen2 has bias on q, k and v only and none on o, exactly like
            # ChatGLM (add_qkv_bias = true, add_bias_linear = false); llama's attention_bias
            # would put a bias on o_proj too.
            model_type="qwen2",
            config=_qwen2(65024, 4096, 13696, 28, 32, 2, max_pos=8192, eps=1e-5),
            params_b=6.24,
            needs_remote_code=True,
            hub_model_type="chatglm",
            notes=(
                "ChatGLMForConditionalGeneration (remote code) mapped onto qwen2 (multi-query "
                "attention with 2 key/value groups, kv_channels 128 = head_dim, SwiGLU ffn 13,696 "
                "= dense_h_to_4h of 2 x 13,696, bias on q/k/v only, untied output layer, "
                "padded_vocab_size 65,024). Not captured: ChatGLM's RoPE rotates only half of "
                "each head (64 of 128 channels) with interleaved pairs (the mapping rotates the "
                "whole head, half-split), the fused query_key_value and dense_h_to_4h modules "
                "(LoRA on them uses one low-rank pair for q,k,v resp. gate,up), prefix tuning "
                "(pre_seq_len) and the module names."
            ),
        ),
        Arch(
            name="bloom-2b6",
            hub_id="YeungNLP/bloom-2b6-zh",
            model_type="bloom",
            config={
                "vocab_size": 46145,
                "hidden_size": 2560,
                "n_layer": 30,
                "n_head": 32,
                "layer_norm_epsilon": 1e-5,
                "apply_residual_connection_post_layernorm": False,
                "tie_word_embeddings": True,
            },
            # "2b6" and the pruner's "86.48% of bloom-3b" count the tied output matrix a second
            # time (2,596,567,040 = 2,478,435,840 unique + 46,145 x 2,560).
            params_b=2.6,
            published_counts_tied_twice=True,
            needs_remote_code=False,
            notes=(
                "Native bloom. bigscience/bloom-3b with its vocabulary pruned from 250,880 to "
                "46,145 Chinese/English tokens (LLMPruner, Firefly project); everything else is "
                "bloom-3b (30 layers, hidden 2,560, 32 heads, ALiBi, which transformers supports "
                "natively). Its name (2b6) counts the tied embedding/output matrix twice; the "
                "unique parameter count is 2.48B. bigscience/bloom-3b itself (3.00B) is the same "
                "with vocab_size 250,880."
            ),
        ),
        Arch(
            name="qwen-1.8b",
            hub_id="Qwen/Qwen-1_8B",
            model_type="qwen2",
            config=_qwen2(151936, 2048, 5504, 24, 16, 16, max_pos=8192, eps=1e-6),
            params_b=1.84,
            needs_remote_code=True,
            hub_model_type="qwen",
            notes=_QWEN_V1_NOTES,
        ),
        Arch(
            name="qwen-7b",
            hub_id="Qwen/Qwen-7B",
            model_type="qwen2",
            config=_qwen2(151936, 4096, 11008, 32, 32, 32, max_pos=8192, eps=1e-6),
            params_b=7.72,
            needs_remote_code=True,
            hub_model_type="qwen",
            notes=_QWEN_V1_NOTES,
        ),
        Arch(
            name="qwen-14b",
            hub_id="Qwen/Qwen-14B",
            model_type="qwen2",
            config=_qwen2(152064, 5120, 13696, 40, 40, 40, max_pos=8192, eps=1e-6),
            params_b=14.2,
            needs_remote_code=True,
            hub_model_type="qwen",
            notes=_QWEN_V1_NOTES,
        ),
        Arch(
            name="qwen-72b",
            hub_id="Qwen/Qwen-72B",
            model_type="qwen2",
            config=_qwen2(152064, 8192, 24576, 80, 64, 64, max_pos=32768, eps=1e-6, theta=1000000.0),
            params_b=72.3,
            needs_remote_code=True,
            hub_model_type="qwen",
            notes=_QWEN_V1_NOTES + " Qwen-72B uses RoPE base 1,000,000 for its 32K context.",
        ),
        Arch(
            name="llama-2-7b",
            hub_id="meta-llama/Llama-2-7b-hf",
            model_type="llama",
            config=_llama(32000, 4096, 11008, 32, 32, 32, max_pos=4096, eps=1e-5),
            params_b=6.74,
            needs_remote_code=False,
            notes="Native llama; nothing left out (the hub repo is gated: accept the licence).",
        ),
        Arch(
            name="tiny-llama",
            hub_id="tiny-llama",
            model_type="llama",
            config={
                "vocab_size": 512,
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "max_position_embeddings": 512,
            },
            params_b=0.000147776,
            needs_remote_code=False,
            notes="The tiny random Llama of the CI profiles (tiny-full, tiny-lora); no weights exist.",
        ),
    )
}


# --------------------------------------------------------------------------------------------
# parameter count


def resolve_config(arch: str | Arch | Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(model_type, config)`` for an :data:`ARCHS` name, an :class:`Arch`, or a config dict
    with a ``model_type`` key (the rest are the numbers)."""
    if isinstance(arch, Arch):
        return arch.model_type, arch.config_dict()
    if isinstance(arch, str):
        try:
            entry = ARCHS[arch]
        except KeyError:
            raise KeyError(f"unknown architecture {arch!r}; known: {', '.join(ARCHS)}") from None
        return entry.model_type, entry.config_dict()
    cfg = dict(arch)
    model_type = cfg.pop("model_type", None)
    if not model_type:
        raise ValueError("a config dict needs a 'model_type' key")
    return str(model_type), cfg


def param_count(arch: str | Arch | Mapping[str, Any], *, count_tied_twice: bool = False) -> int:
    """Number of parameters of the native model the numbers describe (unique tensors: a tied
    output layer counts once unless ``count_tied_twice``).

    Exact for the ``model_type`` values of :data:`fttui.core.models.layouts.FAMILIES` (Llama,
    Mistral, Qwen2/3, Phi-3, Gemma 1-3, Mixtral, Qwen-MoE, BLOOM, ...); any other decoder with
    the usual config keys is counted as a Llama-like one. ``KeyError``-free: a missing number
    raises :class:`~fttui.core.models.layouts.LayoutError` (a ``ValueError``).
    """
    model_type, cfg = resolve_config(arch)
    return layout(model_type, cfg).params(count_tied_twice)
