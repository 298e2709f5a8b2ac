"""The numbers of a model's architecture (sizes, heads, parameter count) from a resolved profile,
as the estimator and the activation model read them. Pure Python: no torch, no transformers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from fttui.core.base.errors import EstimateError
from fttui.core.models.archs import ARCHS, param_count, resolve_config


@dataclass(frozen=True)
class ArchNumbers:
    model_type: str
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    tied: bool
    params: int
    arch_name: str | None = None

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim


def arch_numbers(resolved: Mapping[str, Any]) -> ArchNumbers:
    """The numbers of the profile's architecture: an :data:`ARCHS` entry (``model.arch_name``,
    or ``model.arch`` naming one), else ``model.arch`` + ``model.arch_config``."""
    m = resolved.get("model") or {}
    name = m.get("arch_name") or (m.get("arch") if m.get("arch") in ARCHS else None)
    if name is None and isinstance(m.get("name_or_path"), str):
        # a pretrained profile without arch: match the hub id of an entry
        for entry in ARCHS.values():
            if entry.hub_id == m["name_or_path"]:
                name = entry.name
    if name is not None:
        model_type, cfg = resolve_config(name)
        cfg.update({k: v for k, v in (m.get("arch_config") or {}).items() if v is not None})
    elif m.get("arch"):
        model_type, cfg = str(m["arch"]), dict(m.get("arch_config") or {})
    else:
        raise EstimateError("the estimator needs the architecture numbers: set model.arch to an "
                            f"entry of fttui.core.models.archs ({', '.join(ARCHS)}) or model.arch + "
                            "model.arch_config")
    try:
        params = param_count({"model_type": model_type, **cfg})
    except (KeyError, ValueError) as e:
        raise EstimateError(f"model.arch_config: {e}") from None
    hidden = int(cfg.get("hidden_size") or cfg.get("n_embed") or cfg.get("n_embd"))
    layers = int(cfg.get("num_hidden_layers") or cfg.get("n_layer"))
    heads = int(cfg.get("num_attention_heads") or cfg.get("n_head"))
    kv = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    inter = int(cfg.get("intermediate_size") or 4 * hidden)
    tied = bool(cfg.get("tie_word_embeddings", model_type == "bloom"))
    return ArchNumbers(model_type, int(cfg["vocab_size"]), hidden, layers, heads, kv, head_dim,
                       inter, tied, params, name)


__all__ = ["ArchNumbers", "arch_numbers"]
