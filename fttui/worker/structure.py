"""Evidence of what was built, for the ``start`` event: real parameter counts
(:func:`count_params`, which unpacks 4-bit and ZeRO-3 parameters) and the model's structure
(:func:`model_structure`: layer classes, base linear layers, trainable parameters by name
pattern, bitsandbytes storage). Reads a model; imports torch only inside the functions.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["count_params", "model_structure"]


def count_params(model) -> tuple[int, int]:
    """(total, trainable) real parameter counts.

    bitsandbytes 4-bit weights (``Params4bit``) are stored packed (two 4-bit values per uint8, so
    ``numel()`` is half the real count, or less with other storage dtypes): the real count is the
    numel of ``quant_state.shape`` (the unquantised shape). Int8 weights have their real shape.
    Under DeepSpeed ZeRO-3 a partitioned parameter reports its full size in ``ds_numel``.
    """
    total = trainable = 0
    seen = set()
    for mod in model.modules():  # GPTQ / AWQ linears: packed int buffers, not parameters (frozen)
        if _is_packed(mod):
            total += int(mod.in_features) * int(mod.out_features)
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        n = getattr(p, "ds_numel", None)
        if n is None:
            qs = getattr(p, "quant_state", None)
            shape = getattr(qs, "shape", None) if qs is not None else None
            if shape is not None and type(p).__name__ == "Params4bit":
                n = 1
                for d in shape:
                    n *= int(d)
            else:
                n = p.numel()
        total += n
        if p.requires_grad:
            trainable += n
    return total, trainable


def _is_packed(mod) -> bool:
    """A GPT-QModel linear (GPTQ / AWQ): its weight is the ``qweight`` buffer of packed ints."""
    return type(mod).__module__.startswith("gptqmodel.") and hasattr(mod, "qweight") and hasattr(mod, "in_features")


def _packed_quant(model) -> dict[str, Any] | None:
    """The storage of a GPTQ / AWQ model's packed linears: kernel class, bits, group size, and
    the bytes of the packed weights with their scales, zeros and group indexes (every buffer of
    those modules) and of the other frozen tensors beside them (the adapters left out)."""
    mods = [m for m in model.modules() if _is_packed(m)]
    if not mods:
        return None
    seen: set[int] = set()
    packed = rest = 0
    for m in mods:
        for b in m.buffers(recurse=False):
            if id(b) not in seen:
                seen.add(id(b))
                packed += b.numel() * b.element_size()
    for t in (*model.parameters(), *model.buffers()):
        if id(t) not in seen and not t.requires_grad:
            seen.add(id(t))
            rest += t.numel() * t.element_size()
    m = mods[0]
    return {
        "bits": int(m.bits),
        "group_size": int(getattr(m, "group_size", -1)),
        "kernel": type(m).__name__,
        "packed_linears": len(mods),
        "packed_bytes": int(packed),
        "other_bytes": int(rest),
        "scales_dtype": _dtype_name(m.scales.dtype),
    }


_LAYER_INDEX = re.compile(r"\.\d+(?=\.|$)")
_ADAPTER_PARTS = ("lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B", "lora_magnitude_vector")


def _pattern(name: str) -> str:
    """``base_model.model.model.layers.3.mlp.up_proj.lora_A.default.weight`` ->
    ``model.layers.*.mlp.up_proj.lora_A.weight``: layer indexes folded, PEFT prefix and adapter
    name dropped, so a 80-layer model gives as few keys as a 2-layer one."""
    if name.startswith("base_model.model."):
        name = name[len("base_model.model.") :]
    name = _LAYER_INDEX.sub(".*", name)
    return name.replace(".default.", ".").removesuffix(".default")


def _short_class(obj) -> str:
    """A readable qualified class name: ``bnb.Linear4bit``, ``lora.Linear4bit``, ``nn.Linear``."""
    cls = type(obj)
    mod = cls.__module__
    if mod.startswith("bitsandbytes."):
        return f"bnb.{cls.__name__}"
    if mod.startswith("peft.tuners.lora"):
        return f"lora.{cls.__name__}"
    if mod.startswith("peft."):
        return f"peft.{cls.__name__}"
    if mod.startswith("torch.nn."):
        return f"nn.{cls.__name__}"
    if mod.startswith("deepspeed."):
        return f"deepspeed.{cls.__name__}"
    return f"{mod}.{cls.__name__}"


def _dtype_name(dt) -> str | None:
    return None if dt is None else str(dt).replace("torch.", "")


def model_structure(model) -> dict[str, Any]:
    """What the model is made of, small enough for the ``start`` event:

    ``modules``: count per class of the layers that tell the methods apart (``nn.Linear``,
    ``bnb.Linear4bit``, ``bnb.Linear8bitLt``, ``lora.Linear``, ``lora.Linear4bit``,
    ``peft.ModulesToSaveWrapper``, ``nn.Embedding``); ``linear``: base linear layers (LoRA
    adapters left out) by name pattern -> class; ``trainable``: trainable parameter count by name
    pattern; ``quant``: the bitsandbytes storage of the base weights (``bits``, ``quant_type``,
    ``double_quant``, ``compute_dtype``, ``storage_dtype``), a GPTQ / AWQ checkpoint's
    (:func:`_packed_quant`) or None.
    """
    import torch

    modules: dict[str, int] = {}
    linear: dict[str, str] = {}
    quant: dict[str, Any] | None = None
    for name, mod in model.named_modules():
        short = _short_class(mod)
        if short.startswith(("bnb.", "lora.", "peft.")) or short in ("nn.Linear", "nn.Embedding"):
            modules[short] = modules.get(short, 0) + 1
        elif _is_packed(mod):
            modules[type(mod).__name__] = modules.get(type(mod).__name__, 0) + 1
        if isinstance(mod, torch.nn.Linear) and not any(p in name.split(".") for p in _ADAPTER_PARTS):
            linear[_pattern(name)] = short
        if quant is None and short in ("bnb.Linear4bit", "bnb.Linear8bitLt"):
            w = mod.weight
            qs = getattr(w, "quant_state", None)
            quant = {
                "bits": 4 if short == "bnb.Linear4bit" else 8,
                "storage_dtype": _dtype_name(w.dtype),
                "weight_class": type(w).__name__,
                "quant_type": getattr(qs, "quant_type", None) or getattr(w, "quant_type", None),
                "double_quant": bool(getattr(qs, "nested", False)) if qs is not None else None,
                "compute_dtype": _dtype_name(getattr(mod, "compute_dtype", None)),
            }
            if short == "bnb.Linear8bitLt":
                quant["threshold"] = getattr(getattr(mod, "state", None), "threshold", None)
    trainable: dict[str, int] = {}
    seen = set()
    for name, p in model.named_parameters():
        if id(p) in seen or not p.requires_grad:
            continue
        seen.add(id(p))
        key = _pattern(name)
        trainable[key] = trainable.get(key, 0) + int(getattr(p, "ds_numel", None) or p.numel())
    return {"modules": modules, "linear": linear, "trainable": trainable, "quant": quant or _packed_quant(model)}
