"""Checkpoints whose weights are stored quantised: a ``config.json`` with a
``quantization_config`` (AWQ, GPTQ, bitsandbytes, HQQ, ...).

fttui quantises with bitsandbytes at load time (methods ``qlora``, ``lora-int8``). A GPTQ or AWQ
checkpoint is trained as it is stored with method ``lora``: transformers loads it through the
GPT-QModel kernels (``fttui[gptq]``) and peft adds the adapters beside the frozen int weights.
The estimator reads its storage from the config torch-free (:func:`checkpoint_quant`); any other
stored quantisation is refused, since counting its int4 weights as bf16 would be a wrong figure.
:func:`refusal` says why such a model cannot be used with the profile's method (one line, for
the estimator's and the preflight's errors and ``profiles --from``'s notes), or ``None``.
:func:`cpu_refusal` says when the checkpoint's packing has no kernel that runs on the CPU.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, NamedTuple

from fttui.core.base import methods, shardings

if TYPE_CHECKING:
    from fttui.core.models.numbers import ModelTable

__all__ = ["CheckpointQuant", "PREQUANT_METHODS", "TRAINS_WITH", "checkpoint_quant", "cpu_refusal", "refusal"]

#: stored quantisations fttui trains as stored (GPT-QModel's kernels, through transformers)
PREQUANT_METHODS = ("gptq", "awq")
#: the method that trains them (LoRA beside the frozen int weights)
TRAINS_WITH = methods.Method.LORA
#: packings with a GPT-QModel kernel that runs on the CPU (its torch kernels): GPTQ's own
#: formats and AWQ's GEMM layout; the others (marlin, exllama, AWQ GEMV / GEMV-fast) need CUDA
_CPU_FORMATS = {"gptq": ("gptq", "gptq_v2"), "awq": ("gemm",)}


class CheckpointQuant(NamedTuple):
    method: str  # quantization_config's quant_method ("awq", "gptq", "bitsandbytes", ...)
    bits: int | None
    group_size: int = -1  # input rows sharing one scale (and zero); -1: the whole column
    fmt: str = ""  # the packing (GPTQ checkpoint_format / AWQ version), lowercase
    desc_act: bool = False  # GPTQ act-order: a group index per input row is stored (g_idx)
    lm_head: bool = False  # the output layer is quantised too


def _config(model: ModelTable) -> dict[str, Any] | None:
    from fttui.core.models.hfconfig import ConfigReadError, find_config, read_config

    path: str | os.PathLike[str] | None = model.config
    if not path and model.init == "pretrained" and model.name_or_path:
        path = find_config(str(model.name_or_path))
    if not path:
        return None
    try:
        return read_config(path)
    except ConfigReadError:
        return None


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def checkpoint_quant(model: ModelTable) -> CheckpointQuant | None:
    """How a resolved ``[model]`` table's checkpoint stores its weights, when its config.json
    says they are quantised; ``None`` otherwise (random init reads no checkpoint)."""
    if model.init != "pretrained":
        return None
    cfg = _config(model)
    q = (cfg or {}).get("quantization_config")
    if not isinstance(q, dict):
        return None
    method = str(q.get("quant_method") or "unknown").lower()
    bits = q.get("bits") or q.get("w_bit") or q.get("nbits")
    if method == "bitsandbytes":
        bits = (
            4
            if q.get("load_in_4bit") or q.get("_load_in_4bit")
            else 8
            if (q.get("load_in_8bit") or q.get("_load_in_8bit"))
            else None
        )
    group = _int(q.get("group_size", q.get("q_group_size")))
    fmt = q.get("checkpoint_format") or q.get("format") or q.get("version") or (method if method == "gptq" else "")
    return CheckpointQuant(
        method,
        _int(bits),
        group if group is not None else -1,
        str(fmt).lower(),
        bool(q.get("desc_act")),
        bool(q.get("lm_head")),
    )


def refusal(method: str, model: ModelTable, sharding: str | None = None) -> tuple[str, str] | None:
    """``(why, what to do)`` when the checkpoint's stored quantisation does not go with
    ``method`` (and ``sharding``, when given); ``None`` when it does or the checkpoint is not
    quantised."""
    q = checkpoint_quant(model)
    if q is None:
        return None
    name = model.name_or_path or model.config
    bits = f"{q.bits}-bit " if q.bits else ""
    if q.method == "bitsandbytes":
        fits = methods.quantised_to(q.bits)
        if fits is None or method == fits.name:
            return None
        return (
            f"{name} stores its weights {bits}quantised by bitsandbytes (its config.json), which method "
            f"{method} does not train",
            f"use method {fits}, or the model's unquantised checkpoint",
        )
    what = f"{name} is a pre-quantized {q.method.upper()} {bits}checkpoint (its config.json's quantization_config)"
    if q.method not in PREQUANT_METHODS:
        return (
            f"{what}: fttui does not estimate or train {q.method.upper()} checkpoints, and counting its "
            "weights as unquantised would be wrong",
            "use a GPTQ or AWQ checkpoint (method lora), or the unquantised one (method qlora quantises "
            "it to 4 bits with bitsandbytes)",
        )
    if method != TRAINS_WITH:
        return (
            f"{what}: its int weights are frozen and trained through LoRA adapters, which method {method} does not do",
            f"use method {TRAINS_WITH}, or the model's unquantised checkpoint for {method}",
        )
    if (shardings.find(sharding) or shardings.NONE).sharded:
        return (
            f"{what}: fttui trains it on one card per process (sharding none), not sharded by {sharding}",
            'use sharding = "none"',
        )
    return None


def cpu_refusal(q: CheckpointQuant) -> str | None:
    """Why a GPTQ / AWQ checkpoint cannot train on the CPU (its packing has CUDA kernels only),
    or ``None`` when a CPU kernel reads it. (The worker asks GPT-QModel for a trainable kernel,
    ``backend="auto_trainable"``, whatever kernel the config names.)"""
    if q.method not in PREQUANT_METHODS:
        return None
    if q.fmt and q.fmt not in _CPU_FORMATS[q.method]:
        return f"its {q.method.upper()} packing {q.fmt!r} has CUDA kernels only"
    return None
