"""What an out of memory's explanation needs of the estimate, recorded at launch (the ``forecast``
event's ``memory``, :func:`fttui.core.experiments.quick_forecast.launch_forecast`): one rank's
terms, the activations at the stated micro batch and length (apart from the optimizer step's
temporaries, which never coexist with them) and the budget they are held against. The run layer
cannot make an estimate (it stands beside the memory model), so the row's ``oom_explained``
(:mod:`fttui.core.run.row.oomexplain`) reads this record. The launch adds ``probe``, the probe's
stored answer for the setup (:mod:`fttui.core.experiments.probed`). Pure."""

from __future__ import annotations

from typing import Any

from fttui.core.base.errors import SizeError
from fttui.core.base.units import parse_size
from fttui.core.memory.breakdown import CONSTANTS, Estimate
from fttui.core.profiles.typed import Profile

__all__ = ["oom_terms", "OFFLOADED", "STATIC_TERMS"]

#: the terms a rank holds whatever the step does (the phase adds activations, gradients, states)
STATIC_TERMS = ("weights", "lora", "quantisation", "communication", "cuda_context")
#: the host breakdown's offloaded terms, as the rank's terms they are (CPU training: the same memory)
OFFLOADED = {
    "weights": ("offload_master_params", "offload_param_partitions"),
    "gradients": ("offload_gradients",),
    "optimizer_states": ("offload_optimizer_states",),
    "communication": ("offload_pinned_buffers",),
}


def oom_terms(profile: Profile, est: Estimate) -> dict[str, Any]:
    """The record (bytes): ``terms`` (one rank's ``weights``, ``gradients``, ``optimizer_states``,
    ``lora``, ``quantisation``, ``communication``, ``cuda_context``; for CPU training with the
    offloaded terms of ZeRO / FSDP offload in them, :data:`OFFLOADED`), ``activations`` and
    ``attention`` (its attention-matrix part) at ``micro_batch`` x ``max_seq_len``,
    ``step_temporaries`` (the optimizer step's), ``allocator_fraction`` (the caching allocator's
    share on a card's activations, uncalibrated), ``device`` (``gpu`` or ``cpu``) and ``budget``
    with ``budget_what``: ``limits.gpu_memory`` on a card, ``limits.host_memory`` for CPU
    training (the address space a rank may add above its imported stack), else null; ``resume``:
    a resume's load peak per rank against its training peak (:mod:`fttui.core.memory.resume`)."""
    rank = est.rank_breakdown or est.breakdown
    keys = ("weights", "gradients", "optimizer_states", *STATIC_TERMS[1:])
    terms = {k: float(rank.get(k, 0)) for k in dict.fromkeys(keys)}
    if not est.on_gpu:  # CPU ranks hold what ZeRO / FSDP offload "to the host" too: one rank's share
        host = est.host_breakdown
        procs = max(1.0, round(host.get("process", 0) / CONSTANTS["host_process_bytes"]))
        for term, offloaded in OFFLOADED.items():
            terms[term] += sum(host.get(k, 0) for k in offloaded) / procs
    limit = profile.limits.gpu_memory if est.on_gpu else profile.limits.host_memory
    budget = None
    if limit:
        try:
            budget = parse_size(limit)
        except SizeError:
            budget = None
    return {
        "device": "gpu" if est.on_gpu else "cpu",
        "terms": {k: int(round(v)) for k, v in terms.items()},
        "activations": int(est.activation_bytes),
        "attention": int(round(est.activation_attention_bytes)),
        "step_temporaries": int(est.step_temporaries_bytes),
        "allocator_fraction": CONSTANTS["allocator_fraction"] if est.on_gpu and est.calibration is None else 0.0,
        "micro_batch": int(profile.train.batch_size),
        "max_seq_len": int(profile.data.max_seq_len),
        "gradient_checkpointing": bool(profile.train.gradient_checkpointing),
        "budget": budget,
        "budget_what": (f"limits.{'gpu' if est.on_gpu else 'host'}_memory {limit}" if budget else None),
        "resume": dict(est.resume) or None,  # a resume's load peak per rank (fttui.core.memory.resume)
    }
