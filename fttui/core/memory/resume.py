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
- FSDP (the Trainer's full state dict): the lowest rank alone reads the whole model and the whole
  optimizer file (every rank's states, on the host) and broadcasts them shard by shard; the
  others receive their shards. The lowest rank's peak: static + the larger of the whole model
  and the whole states plus its own share.
- ZeRO-2 / ZeRO-3: each rank reads its own shard of the states (and ZeRO-3 of the model) and
  copies it into DeepSpeed's flat buffers: static + twice its share of the states.

Measured on CPU ranks (bench/resume_peak.py, docs/reliability.md "A resume's peak"): only FSDP's
lowest rank went above the run's own peak. On a card the FSDP full state dict is read on the
host (accelerate saves it offloaded to the CPU) and the card receives shards; DDP over several
cards reads the states onto each card (``map_location`` the device), where they become the
states: no excess by this model; the per-card case is not measured (no card lent). Pure.
"""

from __future__ import annotations

from typing import Any

from fttui.core.base.shardings import DEEPSPEED, FSDP

__all__ = ["resume_peak"]

STATIC = ("weights", "lora", "quantisation", "communication", "cuda_context")


def resume_peak(
    rank: dict[str, float], train_peak: float, kind: str, world: int, trained_weights: float
) -> dict[str, Any]:
    """The record of one rank's resume (bytes, where the rank trains: its card, or the host for
    CPU training): ``peak`` (the worst rank's), ``rank`` (``lowest`` or ``every``), ``train_peak``
    (the rank's training peak as estimated), ``above`` (what the resume adds above it, 0 when
    nothing), ``kind`` (the sharding's family, :mod:`fttui.core.base.shardings`). ``rank``: one rank's terms;
    ``trained_weights``: the bytes of the trained weights one rank reads back (its whole model's
    trainable part: the adapter, or the whole model for full fine-tuning); ``kind``: the
    sharding's family; ``world``: the ranks."""
    static = sum(float(rank.get(k, 0)) for k in STATIC)
    states = float(rank.get("optimizer_states", 0))  # an adapter's are in its LoRA term, static here
    if kind == FSDP and world > 1:
        whole_states = states * world
        peak = static + max(trained_weights, whole_states + states)
        which = "lowest"
    elif kind == DEEPSPEED:
        peak = static + 2 * states
        which = "every"
    else:
        peak = static + max(trained_weights, states)
        which = "every"
    return {
        "kind": kind,
        "rank": which,
        "peak": int(round(peak)),
        "train_peak": int(round(train_peak)),
        "above": int(round(max(0.0, peak - train_peak))),
    }
