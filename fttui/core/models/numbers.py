"""The numbers of a model's architecture (sizes, heads, parameter count) from a resolved profile's
``[model]`` table (:class:`ModelTable`: the typed profile's, read by attribute), as the estimator
and the activation model read them. Pure Python: no torch, no transformers.

Where the numbers come from, first that applies:

1. ``model.config``: a ``config.json`` (given, or found by resolution in the model folder or
   the local Hugging Face cache for ``model.name_or_path``). With ``init = "random"`` the
   ``model.arch_config`` numbers go on top, as the worker builds it. A config of a remote-code
   original that an :data:`~fttui.core.models.archs.ARCHS` entry maps (``model_type``
   ``baichuan``, ``chatglm``, ``qwen``) is read through the entry instead.
2. an :data:`~fttui.core.models.archs.ARCHS` entry (``model.arch_name``, ``model.arch`` naming
   one, or ``model.name_or_path`` equal to an entry's hub id) with ``model.arch_config`` on top.
3. ``model.arch`` (a transformers ``model_type``) with the ``model.arch_config`` numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from fttui.core.base.errors import EstimateError
from fttui.core.models.archs import ARCHS, resolve_config
from fttui.core.models.hfconfig import ConfigReadError, download_command, is_hub_id, read_config
from fttui.core.models.layouts import LayoutError, layout


class ModelTable(Protocol):
    """A resolved profile's ``[model]`` table, read by attribute: what
    ``fttui.core.profiles.typed.ModelSettings`` (above this package, which cannot import it) is."""

    @property
    def name_or_path(self) -> str | None: ...
    @property
    def init(self) -> str: ...
    @property
    def arch(self) -> str | None: ...
    @property
    def config(self) -> str | None: ...
    @property
    def arch_config(self) -> Mapping[str, Any]: ...
    @property
    def arch_name(self) -> str | None: ...


#: keys of a config.json that are not architecture numbers
_META = ("model_type", "architectures", "transformers_version", "_name_or_path", "auto_map")


@dataclass(frozen=True)
class ArchNumbers:
    """``inter``: the MLP width one token passes through (MoE: experts per token x expert
    width + shared expert); ``experts``: routed experts per MoE layer (0: dense);
    ``linear_params``: weights of the decoder layers' linear modules; ``note``: what the
    numbers leave out (an inexact layout), or ""; ``shared_inter``: the width of an MoE
    layer's shared expert (0: none); ``expert_inter``: one routed expert's width;
    ``sparse_layers``: how many layers are MoE."""

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
    experts: int = 0
    top_k: int = 0
    linear_params: int = 0
    note: str = ""
    shared_inter: int = 0
    expert_inter: int = 0
    sparse_layers: int = 0

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    def shape_numbers(self) -> dict[str, Any]:
        """What FLOPs per token need, keyed as the worker's ``model_shape``
        (:func:`fttui.core.models.flops.shape_from`); the MoE numbers only for a mixture of experts."""
        numbers: dict[str, Any] = {
            "vocab": self.vocab,
            "hidden": self.hidden,
            "layers": self.layers,
            "attn_dim": self.q_dim,
            "tied": self.tied,
        }
        if self.experts and self.sparse_layers:
            numbers.update(
                experts=self.experts,
                top_k=self.top_k,
                expert_inter=self.expert_inter,
                sparse_layers=self.sparse_layers,
            )
        return numbers

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim


def config_numbers(raw: Mapping[str, Any], fallback_type: str | None = None) -> tuple[str, dict[str, Any]]:
    """``(model_type, numbers)`` of a config.json's object; a multimodal config's decoder is its
    ``text_config``."""
    cfg = dict(raw)
    text = cfg.get("text_config")
    if not cfg.get("hidden_size") and isinstance(text, dict) and text.get("hidden_size"):
        cfg = dict(text)
    model_type = cfg.get("model_type") or fallback_type
    if not model_type:
        raise EstimateError("the model's config.json has no model_type (set model.arch)")
    return str(model_type), {k: v for k, v in cfg.items() if k not in _META}


def _entry_of(m: ModelTable) -> str | None:
    name = m.arch_name or (m.arch if m.arch in ARCHS else None)
    if name is None and isinstance(m.name_or_path, str):
        for entry in ARCHS.values():  # a pretrained profile without arch: the entry of its hub id
            if entry.hub_id == m.name_or_path:
                name = entry.name
    return name


def _plain(value: Any) -> Any:
    """A typed profile's read-only table (a nested ``rope_scaling``) as the dict a config holds."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return list(value) if isinstance(value, tuple) else value


def model_numbers(m: ModelTable) -> tuple[str, dict[str, Any], str | None]:
    """``(model_type, config numbers, ARCHS entry or None)`` of a resolved ``[model]`` table."""
    name = _entry_of(m)
    arch_config = {k: _plain(v) for k, v in (m.arch_config or {}).items() if v is not None}
    if m.config:
        try:
            raw = read_config(m.config)
        except ConfigReadError as e:
            raise EstimateError(f"model.config: {e}") from None
        model_type, cfg = config_numbers(raw, m.arch)
        own = ARCHS[name] if name else None
        if own is None or model_type == own.model_type or model_type not in own.own_model_types:
            if m.init == "random":
                cfg.update(arch_config)
            return model_type, cfg, name if own is not None and model_type == own.model_type else None
    if name is not None:
        model_type, cfg = resolve_config(name)
        cfg.update(arch_config)
        return model_type, cfg, name
    if m.arch:
        return str(m.arch), arch_config, None
    where = m.name_or_path
    hint = ""
    if m.init == "pretrained" and isinstance(where, str) and is_hub_id(where):
        hint = f"; {where} is not in the local Hugging Face cache ({download_command(where)})"
    raise EstimateError(
        "the estimator needs the architecture numbers: give a model folder or a cached hub "
        f"id with its config.json, model.config, model.arch naming an entry of "
        f"fttui.core.models.archs ({', '.join(ARCHS)}), or model.arch + model.arch_config" + hint
    )


def arch_numbers(m: ModelTable) -> ArchNumbers:
    """The numbers of a profile's architecture, from its ``[model]`` table (see the module text for
    where they come from)."""
    model_type, cfg, name = model_numbers(m)
    try:
        lay = layout(model_type, cfg)
        params = lay.params()
    except LayoutError as e:
        raise EstimateError(
            f"model {model_type}: {e} (give it in model.arch_config, or point model.config / "
            "model.name_or_path at the model's config.json)"
        ) from None
    return ArchNumbers(
        model_type,
        lay.vocab,
        lay.hidden,
        lay.layers,
        lay.heads,
        lay.kv_heads,
        lay.head_dim,
        lay.inter,
        lay.tied,
        params,
        name,
        lay.experts,
        lay.top_k,
        lay.linear_params(),
        lay.note,
        lay.shared_inter,
        lay.expert_inter,
        lay.sparse_layers,
    )


__all__ = ["ArchNumbers", "ModelTable", "arch_numbers", "config_numbers", "model_numbers"]
