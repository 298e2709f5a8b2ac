"""Predict peak GPU memory per card and host memory of a run before launching it (pure Python).

``estimate(resolved) -> Estimate`` reads a resolved profile (``fttui.core.profiles``) and the
architecture numbers (``fttui.core.models.numbers``) and adds up, per card, step by step:

* weights, gradients, optimizer states, LoRA parameters and quantisation buffers
  (:mod:`fttui.core.memory.states`),
* activations (:mod:`fttui.core.memory.activations`: what autograd keeps, with and without
  gradient checkpointing, the output layer's logits and the attention matrix of eager
  attention) and the optimizer step's temporaries,
* framework overhead: the CUDA context, communication buffers and the caching allocator's
  reserved-but-unused memory (this module),
* the host (:mod:`fttui.core.memory.host`).

No torch, no weights. The formulas, their sources and where they depart from them are in
docs/estimate.md; the global constants are :data:`fttui.core.memory.breakdown.CONSTANTS`.
Calibration against measured rows is in :mod:`fttui.core.memory.calibration`.
"""

from __future__ import annotations

from typing import Any, Mapping

from fttui.core.base.units import GIB, MIB
from fttui.core.memory.activations import activation_peak
from fttui.core.memory.breakdown import COMPONENTS, CONSTANTS, HOST_COMPONENTS, Calibration, Estimate
from fttui.core.memory.host import host_terms
from fttui.core.memory.inputs import Setup, setup
from fttui.core.memory.states import trainable_states

__all__ = ["estimate"]


def _dynamic(c: Setup, bd: dict[str, float], per_tok: float, att_bytes: float,
             calibration: Calibration | None) -> tuple[float, float]:
    """Activations (or the optimizer step's temporaries, the larger) and the allocator's share
    of them. Returns (the dynamic bytes, the allocator fraction applied to activations)."""
    method, P, wb = c.method, c.a.params, c.wb
    # with checkpointing the caching allocator keeps about the checkpoints' size again in
    # blocks it cannot reuse (measured on an H100: reserved - allocated = 0.8-1.4 x the
    # checkpoints over six Llama-2-7B settings, against 0.1-0.3 of the activations without)
    ckpt_bytes = c.a.layers * 2 * c.a.hidden * c.tokens if c.s["gradient_checkpointing"] else 0.0
    if calibration is not None:
        act = calibration.per_token_bytes * c.tokens + att_bytes
        alloc_on_act = 0.0
    else:
        act = per_tok * c.tokens + att_bytes
        alloc_on_act = CONSTANTS["allocator_fraction"]
    # the optimizer step runs after the backward has freed the activations: its temporaries
    # (torch AdamW foreach: about one tensor per trainable parameter) compete with them
    trainable_full = P if method in ("full",) else 0
    step_tmp = trainable_full * wb + c.lora_params * 4
    if method == "lora-emb":
        step_tmp += (c.embed + c.head) * wb  # the trainable embedding / output-layer copies
    dyn = max(act, step_tmp)
    bd["activations"] = dyn
    bd["allocator"] = max(alloc_on_act * dyn, ckpt_bytes if alloc_on_act and c.on_gpu else 0.0)
    return dyn, alloc_on_act


def _framework(c: Setup, bd: dict[str, float], calibration: Calibration | None) -> None:
    """The CUDA context and, with more than one process, the communication buffers."""
    if not c.on_gpu:
        return
    bd["cuda_context"] = CONSTANTS["cuda_context_bytes"]
    if calibration is not None and calibration.context_bytes is not None:
        bd["cuda_context"] = calibration.context_bytes
    if c.world > 1:
        # DDP's reducer keeps its buckets as a second copy of every trainable gradient
        # (gradient_as_bucket_view=False, the HF Trainer default); NCCL its own buffers
        P, wb, method = c.a.params, c.wb, c.method
        ddp_copy = 0 if c.zero3 else (c.lora_params * 4 + (P * wb if method == "full" else 0)
                                      + ((c.embed + c.head) * wb if method == "lora-emb" else 0))
        bd["communication"] = CONSTANTS["comm_bytes"] + ddp_copy


def _zero3_working_set(bd: dict[str, float], working: float, alloc_on_act: float,
                       notes: list[str]) -> None:
    """ZeRO-3: the working set (activations, gathered parameters, NormHead copy) first reuses
    the blocks of the cached half copy; only what exceeds it is new memory. The allocator
    fraction applies to the whole working set (its tensors do not fit the cached blocks
    exactly)."""
    bd["activations"] = max(0.0, working - bd["weights"])
    bd["allocator"] = alloc_on_act * working
    notes.append(f"ZeRO-3: {min(working, bd['weights']) / GIB:.1f} GiB of the working set "
                 "reuse the cached copy")


def _cap_allocator(bd: dict[str, float], device_bytes: int) -> None:
    """The caching allocator frees its cached blocks and retries before it reports OOM (PyTorch
    CUDA caching allocator), so the reserved-but-unused part shrinks to the room left on the
    card: NVML "used" stays below the card while allocated memory fits."""
    allocated = sum(v for k, v in bd.items() if k != "allocator")
    bd["allocator"] = max(0.0, min(bd["allocator"], device_bytes - allocated))


def _inputs(c: Setup, resolved: Mapping[str, Any]) -> dict[str, Any]:
    """The settings an estimate was made for, as :meth:`Estimate.to_dict` reports them."""
    inputs = {k: v for k, v in c.s.items()}
    inputs.update({"model": (resolved.get("model") or {}).get("name_or_path"),
                   "arch": c.a.arch_name or c.a.model_type, "params": c.a.params,
                   "lora_params": c.lora_params, "tokens_per_step": c.tokens,
                   "lora_modules": [n for n, _fi, _fo in c.lora_mods],
                   "profile": resolved.get("name")})
    return inputs


def _final_notes(c: Setup, calibration: Calibration | None, notes: list[str]) -> None:
    if calibration is not None:
        ctx = (f", CUDA context {calibration.context_bytes / MIB:.0f} MiB"
               if calibration.context_bytes is not None else "")
        notes.insert(0, f"calibrated from {calibration.rows} measured rows "
                        f"({calibration.per_token_bytes / 1024:.1f} KiB per token{ctx})")
    if c.s["nodes"] > 1:
        notes.append("per-card figures for one node; every node is the same")


def estimate(resolved: Mapping[str, Any], calibration: Calibration | None = None,
             device_bytes: int | None = None) -> Estimate:
    """Predict peak GPU memory per card and the host peak of a resolved profile."""
    notes: list[str] = []
    c = setup(resolved, notes)
    bd = dict.fromkeys(COMPONENTS, 0.0)
    host_bd = dict.fromkeys(HOST_COMPONENTS, 0.0)
    gathered, extra_head = trainable_states(c, bd, host_bd, notes)
    per_tok, att_bytes = activation_peak(c)
    dyn, alloc_on_act = _dynamic(c, bd, per_tok, att_bytes, calibration)
    _framework(c, bd, calibration)
    if c.zero3:
        _zero3_working_set(bd, dyn + gathered + extra_head, alloc_on_act, notes)
    if device_bytes and c.on_gpu:
        _cap_allocator(bd, device_bytes)
    card = {k: int(round(v)) for k, v in bd.items()}
    host_terms(c, bd, host_bd)
    if c.on_gpu:
        gpu_peak = [int(sum(card.values()))] * c.s["gpus"]
    else:
        gpu_peak = []
        card = {k: 0 for k in card}
    host = {k: int(round(v)) for k, v in host_bd.items()}
    _final_notes(c, calibration, notes)
    return Estimate(inputs=_inputs(c, resolved), breakdown=card, gpu_peak_bytes=gpu_peak,
                    host_breakdown=host, host_peak_bytes=int(sum(host.values())),
                    activation_per_token_bytes=(calibration.per_token_bytes if calibration
                                                else per_tok * (1 + alloc_on_act)),
                    activation_attention_bytes=att_bytes, notes=notes, calibration=calibration,
                    device_bytes=device_bytes)
