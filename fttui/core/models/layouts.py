"""The tensors of a decoder a transformers config describes, from the config's numbers alone.

:func:`layout` reads the numbers of a ``config.json`` (or an ``arch_config`` table) of any
decoder: vocabulary, width, layers, attention heads and key/value heads (GQA), ``head_dim``
when the config gives it (else the family's default, else width / heads), the MLP width, tied
embeddings and mixture-of-experts numbers (experts, experts per token, expert and shared-expert
widths, which layers are sparse). :meth:`Layout.params` counts the parameters as transformers
builds them for the model types of :data:`FAMILIES` (exact: checked against the meta-device
models in ``tests/worker/test_config_models.py``); any other ``model_type`` with the usual keys
is counted as a Llama-like decoder and says so in :attr:`Layout.note`. MoE: every expert's
weights are counted (they are all held); the per-token MLP width is the routed experts' plus
the shared expert's. Pure Python. See docs/architectures.md for what is and is not covered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FAMILIES", "Family", "Layout", "LayoutError", "layout"]


class LayoutError(ValueError):
    """The numbers do not describe a decoder (a key is missing or wrong); one line."""


@dataclass(frozen=True)
class Family:
    """How a ``model_type`` lays out its parameters.

    norm: ``rms`` (a weight), ``ln`` (weight and bias). layer_norms: norms per decoder layer.
    qk_norm: ``head`` (q_norm and k_norm over head_dim), ``full`` (over all q / kv channels).
    qkv_bias / o_bias / mlp_bias: True, False or the config key that says (``"key"``: default
    False, ``"key=1"``: default True).
    moe: ``all`` (every layer sparse: Mixtral) or ``step`` (Qwen-MoE: ``decoder_sparse_step``
    and ``mlp_only_layers``). shared_expert: an MoE layer has a shared expert (its width may be
    0) and its one-row gate. tie: transformers' default of ``tie_word_embeddings``.
    head_dim: the config class's default ``head_dim`` (0: width / heads).
    """

    norm: str = "rms"
    layer_norms: int = 2
    qk_norm: str = ""
    qkv_bias: bool | str = False
    o_bias: bool | str = False
    mlp_bias: bool | str = False
    moe: str = ""
    shared_expert: bool = False
    tie: bool = False
    head_dim: int = 0


_LLAMA = Family(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias")

#: model_type -> Family: the decoders whose parameter count is exact
FAMILIES: dict[str, Family] = {
    "llama": _LLAMA,
    "granite": _LLAMA,
    "mistral": Family(),
    "qwen2": Family(qkv_bias=True),
    "qwen3": Family(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head", head_dim=128),
    "olmo2": Family(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="full"),
    "phi3": Family(),
    "gemma": Family(qkv_bias="attention_bias", o_bias="attention_bias", tie=True, head_dim=256),
    "gemma2": Family(qkv_bias="attention_bias", o_bias="attention_bias", layer_norms=4, tie=True, head_dim=256),
    "gemma3_text": Family(
        qkv_bias="attention_bias", o_bias="attention_bias", layer_norms=4, qk_norm="head", tie=True, head_dim=256
    ),
    "mixtral": Family(moe="all"),
    "qwen2_moe": Family(qkv_bias="qkv_bias=1", moe="step", shared_expert=True),
    "qwen3_moe": Family(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head", moe="step"),
    "bloom": Family(norm="ln", tie=True),  # fused query_key_value, 4h MLP, ALiBi: see _bloom
}

#: config keys that mean the same number, first found wins
_KEYS = {
    "vocab": ("vocab_size",),
    "hidden": ("hidden_size", "n_embd", "n_embed", "d_model"),
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "heads": ("num_attention_heads", "n_head"),
    "kv": ("num_key_value_heads", "num_kv_heads", "n_head_kv"),
    "inter": ("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"),
    "experts": ("num_local_experts", "num_experts", "n_routed_experts"),
    "top_k": ("num_experts_per_tok", "moe_top_k"),
}


#: the largest architecture number taken (2^31: no width, count or vocabulary comes near it)
MAX_NUMBER = 2**31


def _num(cfg: Mapping[str, Any], what: str, default: int | None = None) -> int:
    for key in _KEYS[what]:
        value = cfg.get(key)
        if value is not None:
            whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not whole or value < 0:
                raise LayoutError(f"{key} must be a whole non-negative number, got {value!r}")
            if value > MAX_NUMBER:
                raise LayoutError(f"{key} = {value!r} is beyond any model (at most {MAX_NUMBER})")
            return int(value)
    if default is None:
        raise LayoutError(f"config needs {' or '.join(_KEYS[what])}")
    return default


def _flag(cfg: Mapping[str, Any], spec: bool | str) -> bool:
    if not isinstance(spec, str):
        return spec
    key, _, default = spec.partition("=")
    value = cfg.get(key)
    return default == "1" if value is None else bool(value)


@dataclass(frozen=True)
class Layout:
    """The numbers of one decoder. ``inter``: the MLP width one token passes through (dense:
    intermediate_size; MoE: experts per token x expert width + shared-expert width);
    ``dense_inter``: the MLP width of dense layers; ``sparse_layers``: how many layers are MoE."""

    model_type: str
    family: Family
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    dense_inter: int
    tied: bool
    experts: int = 0
    top_k: int = 0
    expert_inter: int = 0
    shared_inter: int = 0
    sparse_layers: int = 0
    cfg: Mapping[str, Any] = field(default_factory=dict, repr=False)
    note: str = ""

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def _attn(self) -> tuple[int, int]:
        """(linear weights, other parameters) of one attention block."""
        f, h, q, kv = self.family, self.hidden, self.q_dim, self.kv_dim
        weights = h * q + 2 * h * kv + q * h
        other = (q + 2 * kv if _flag(self.cfg, f.qkv_bias) else 0) + (h if _flag(self.cfg, f.o_bias) else 0)
        other += {"head": 2 * self.head_dim, "full": q + kv}.get(f.qk_norm, 0)
        return weights, other

    def linear_params(self) -> int:
        """Weights of the decoder layers' ``nn.Linear`` modules (what bitsandbytes quantises;
        the experts of an MoE layer are 3-D parameters, not linear modules, and are left out)."""
        if self.model_type == "bloom":
            h = self.hidden
            return self.layers * (3 * h * h + h * h + 8 * h * h)
        attn, _ = self._attn()
        dense = 3 * self.hidden * self.dense_inter
        shared = 3 * self.hidden * self.shared_inter + (self.hidden if self.family.shared_expert else 0)
        return self.layers * attn + (self.layers - self.sparse_layers) * dense + self.sparse_layers * shared

    def params(self, count_tied_twice: bool = False) -> int:
        """Parameters of the model (unique tensors: a tied output layer counts once unless
        ``count_tied_twice``)."""
        h, L, embed = self.hidden, self.layers, self.vocab * self.hidden
        if self.model_type == "bloom":
            i = 4 * h
            per_layer = (3 * h * h + 3 * h + h * h + h) + (h * i + i + i * h + h) + 2 * 2 * h
            total = embed + 2 * h + L * per_layer + 2 * h  # + embedding LayerNorm, final LayerNorm
        else:
            f = self.family
            norm = h * (2 if f.norm == "ln" else 1)
            attn_w, attn_other = self._attn()
            mlp_bias = _flag(self.cfg, f.mlp_bias)
            dense = 3 * h * self.dense_inter + ((2 * self.dense_inter + h) if mlp_bias else 0)
            sparse = self.experts * (3 * h * self.expert_inter + h)  # experts and the router row each
            if f.shared_expert:
                sparse += 3 * h * self.shared_inter + h  # shared expert and its gate
            total = (
                embed
                + L * (attn_w + attn_other + f.layer_norms * norm)
                + norm
                + (L - self.sparse_layers) * dense
                + self.sparse_layers * sparse
            )
        if not self.tied or count_tied_twice:
            total += embed  # the output layer
        return total


def _sparse_layers(f: Family, cfg: Mapping[str, Any], layers: int, experts: int) -> int:
    if not f.moe or experts <= 0:
        return 0
    if f.moe == "all":
        return layers
    step = int(cfg.get("decoder_sparse_step") or 1)
    dense_only = set(cfg.get("mlp_only_layers") or ())
    return sum(1 for i in range(layers) if i not in dense_only and (i + 1) % step == 0)


def layout(model_type: str, cfg: Mapping[str, Any]) -> Layout:
    """The :class:`Layout` of a ``model_type`` with a config's numbers (``cfg`` without the
    ``model_type`` key); :class:`LayoutError` when a number the count needs is missing."""
    family = FAMILIES.get(model_type)
    note = ""
    if family is None:
        family = _LLAMA
        note = (
            f"model_type {model_type} is not among the layouts the estimator counts exactly "
            f"({', '.join(FAMILIES)}); counted as a Llama-like decoder from its config's numbers"
        )
    vocab, hidden, layers = _num(cfg, "vocab"), _num(cfg, "hidden"), _num(cfg, "layers")
    heads = _num(cfg, "heads")
    if heads <= 0 or hidden <= 0:
        raise LayoutError("hidden_size and num_attention_heads must be > 0")
    kv = 1 if cfg.get("multi_query") else (_num(cfg, "kv", 0) or heads)
    if heads % kv:
        raise LayoutError(f"num_key_value_heads ({kv}) must divide num_attention_heads ({heads})")
    head_dim = int(cfg.get("head_dim") or family.head_dim or hidden // heads)
    dense_inter = _num(cfg, "inter", 4 * hidden)
    experts = _num(cfg, "experts", 0) if family.moe or note else 0
    top_k = _num(cfg, "top_k", 0) if experts else 0
    expert_inter = int(cfg.get("moe_intermediate_size") or dense_inter) if experts else 0
    shared_inter = int(cfg.get("shared_expert_intermediate_size") or 0) if experts else 0
    sparse = _sparse_layers(family, cfg, layers, experts)
    if note and experts:
        raise LayoutError(
            f"model_type {model_type} is a mixture of experts the estimator has no "
            f"layout for (it counts {', '.join(k for k, f in FAMILIES.items() if f.moe)})"
        )
    if sparse and layers:
        routed = top_k * expert_inter + shared_inter
        inter = (sparse * routed + (layers - sparse) * dense_inter) // layers
    else:
        inter = dense_inter
    tied = bool(cfg.get("tie_word_embeddings", family.tie))
    return Layout(
        model_type,
        family,
        vocab,
        hidden,
        layers,
        heads,
        kv,
        head_dim,
        inter,
        dense_inter,
        tied,
        experts,
        top_k,
        expert_inter,
        shared_inter,
        sparse,
        dict(cfg),
        note,
    )
