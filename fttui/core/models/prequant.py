"""Checkpoints whose weights are stored quantised: a ``config.json`` with a
``quantization_config`` (AWQ, GPTQ, bitsandbytes, HQQ, ...).

fttui quantises with bitsandbytes at load time (methods ``qlora``, ``lora-int8``); a checkpoint
already quantised by another method is not something it estimates or trains yet, and counting
its int4 weights as bf16 would be a wrong figure. :func:`refusal` says why such a model cannot be
used with the profile's method (one line, for the estimator's and the preflight's errors and
``profiles --from``'s notes), or ``None``: a bitsandbytes checkpoint is fine with the method
that stores it that way (4-bit: ``qlora``; 8-bit: ``lora-int8``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

__all__ = ["CheckpointQuant", "checkpoint_quant", "refusal"]


class CheckpointQuant(NamedTuple):
    method: str  # quantization_config's quant_method ("awq", "gptq", "bitsandbytes", ...)
    bits: int | None


def _config(model: Mapping[str, Any]) -> dict[str, Any] | None:
    from fttui.core.models.hfconfig import ConfigReadError, find_config, read_config

    path = model.get("config")
    if not path and model.get("init", "pretrained") == "pretrained" and model.get("name_or_path"):
        path = find_config(str(model["name_or_path"]))
    if not path:
        return None
    try:
        return read_config(path)
    except ConfigReadError:
        return None


def checkpoint_quant(model: Mapping[str, Any]) -> CheckpointQuant | None:
    """How a resolved ``[model]`` table's checkpoint stores its weights, when its config.json
    says they are quantised; ``None`` otherwise (random init reads no checkpoint)."""
    if model.get("init", "pretrained") != "pretrained":
        return None
    cfg = _config(model)
    q = (cfg or {}).get("quantization_config")
    if not isinstance(q, dict):
        return None
    method = str(q.get("quant_method") or "unknown").lower()
    bits = q.get("bits") or q.get("w_bit") or q.get("nbits")
    if method == "bitsandbytes":
        bits = 4 if q.get("load_in_4bit") or q.get("_load_in_4bit") else 8 if (
            q.get("load_in_8bit") or q.get("_load_in_8bit")) else None
    return CheckpointQuant(method, int(bits) if isinstance(bits, (int, float)) and not isinstance(bits, bool) else None)


def refusal(method: str, model: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(why, what to do)`` when the checkpoint's stored quantisation does not go with
    ``method``; ``None`` when it does or the checkpoint is not quantised."""
    q = checkpoint_quant(model)
    if q is None:
        return None
    name = model.get("name_or_path") or model.get("config")
    bits = f"{q.bits}-bit " if q.bits else ""
    if q.method == "bitsandbytes":
        fits = {4: "qlora", 8: "lora-int8"}.get(q.bits or 0)
        if fits is None or method == fits:
            return None
        return (f"{name} stores its weights {bits}quantised by bitsandbytes (its config.json), which method "
                f"{method} does not train", f"use method {fits}, or the model's unquantised checkpoint")
    return (f"{name} is a pre-quantized {q.method.upper()} {bits}checkpoint (its config.json's "
            f"quantization_config): fttui does not estimate or train such checkpoints yet, and counting "
            "its weights as unquantised would be wrong",
            "use the model's unquantised checkpoint; method qlora quantises it to 4 bits with bitsandbytes")
