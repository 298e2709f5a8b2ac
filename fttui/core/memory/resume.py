"""A resume's load peak per rank, its own term of the estimate (issue 44, item 3): what a rank
holds while ``fttui run --resume`` (the Trainer's ``resume_from_checkpoint``) loads the
checkpoint, before its first step, set against the training's own peak.

At the load a rank holds its static terms (weights, LoRA, quantisation, communication, CUDA
context: no gradients, no activations yet) and, as the Trainer loads them (transformers 5,
accelerate with FSDP2, DeepSpeed 0.19):

- no sharding (one process or DDP): the model's checkpoint read into a state dict and copied
  into the parameters (the trained weights' size, freed before the optimizer's load), then the
  optimizer's file, whose tensors become the states (``load_state_dict`` keeps them when device
  and dtype match: no second copy). Peak: static + the larger of the two.
- FSDP (fttui's sharded checkpoints, ``SHARDED_STATE_DICT``: fttui.worker.sharding): each rank
  reads its own shard of the model into its parameters, then torch's
  ``get_optimizer_state_dict`` creates the optimizer's states by a step of zero gradients (its
  share of the gradients, then its share of the states) and each rank reads its own shard of the
  states into them. Peak: static + its gradients + its states, on every rank.
- ZeRO-2 / ZeRO-3: each rank reads its own shard of the states (and ZeRO-3 of the model) and
  copies it into DeepSpeed's flat buffers: static + twice its share of the states.

Measured on CPU ranks (bench/resume_peak.py, docs/reliability.md "A resume's peak"): with the
Trainer's full state dict FSDP's lowest rank went above the run's own peak (it read every
rank's states); sharded, no rank does. A checkpoint of a run before the change (the full state
dict: ``pytorch_model_fsdp.bin``, ``optimizer.bin``) still loads the old way, the lowest rank
reading every rank's states: this term does not model it. DDP over several cards reads the
states onto each card (``map_location`` the device), where they become the states: no excess by
this model; the per-card case is not measured (no card lent). Pure.
"""

from __future__ import annotations

from typing import Any

from fttui.core.base.shardings import DEEPSPEED, FSDP

__all__ = ["resume_peak"]

STATIC = ("weights", "lora", "quantisation", "communication", "cuda_context")


def resume_peak(rank: dict[str, float], train_peak: float, kind: str, trained_weights: float) -> dict[str, Any]:
    """The record of one rank's resume (bytes, where the rank trains: its card, or the host for
    CPU training): ``peak`` (the worst rank's), ``rank`` (``every``: every rank loads alike; the
    record of an older fttui says ``lowest`` for FSDP's full state dict), ``train_peak`` (the
    rank's training peak as estimated), ``above`` (what the resume adds above it, 0 when
    nothing), ``kind`` (the sharding's family, :mod:`fttui.core.base.shardings`). ``rank``: one
    rank's terms; ``trained_weights``: the bytes of the trained weights one rank reads back (its
    whole model's trainable part: the adapter, or the whole model for full fine-tuning)."""
    static = sum(float(rank.get(k, 0)) for k in STATIC)
    states = float(rank.get("optimizer_states", 0))  # an adapter's are in its LoRA term, static here
    if kind == FSDP:
        peak = static + float(rank.get("gradients", 0)) + states
    elif kind == DEEPSPEED:
        peak = static + 2 * states
    else:
        peak = static + max(trained_weights, states)
    return {
        "kind": kind,
        "rank": "every",
        "peak": int(round(peak)),
        "train_peak": int(round(train_peak)),
        "above": int(round(max(0.0, peak - train_peak))),
    }
