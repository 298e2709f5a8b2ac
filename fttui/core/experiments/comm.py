"""What a step moves between ranks, per sharding kind, and how long that takes over a measured
link (issue 43 item 2; the link: :mod:`fttui.core.experiments.link`).

Bytes each rank sends per optimizer step, with ``f = (n - 1) / n`` over ``n`` ranks, ``P`` the
bytes of all parameters and ``T`` those of the trained ones (each in the compute precision):

- no sharding (DDP): the all-reduce of the gradients once a step (accumulation steps without it),
  ``2 f T``;
- ZeRO-2: the reduce-scatter of the gradients and the all-gather of the updated parameters,
  ``f T + f T``;
- ZeRO-3 and FSDP: the gradients' reduce-scatter ``f T`` once a step, and every micro batch the
  parameters gathered for the forward and again for the backward (a third time when
  checkpointing recomputes the forward), ``2 f P`` (``3 f P``) per micro batch: about 3x the
  parameters' bytes a step for full fine-tuning, and the frozen base too under LoRA.

Their time is the bytes over the link's measured bus bandwidth, plus its latency per collective
(DDP and ZeRO-2: one per 25 MiB bucket; ZeRO-3 and FSDP: a gather per layer and pass). The
forecast adds it to the step, not overlapped with compute (an upper bound where the framework
overlaps them); offloading kinds move the same between ranks as their kind on the card.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fttui.core.base import shardings
from fttui.core.base.units import MIB

__all__ = ["BUCKET_BYTES", "Comm", "comm_per_step", "versus_ddp"]

#: DDP's and DeepSpeed's gradient bucket (25 MiB by default in both): one collective each
BUCKET_BYTES = 25 * MIB


@dataclass(frozen=True)
class Comm:
    """One step's communication: bytes each rank sends, collectives, and seconds over the link."""

    bytes: float
    collectives: int
    seconds: float


def _dtype_bytes(precision: str) -> int:
    return 4 if precision in ("fp32", "", "float32") else 2


def comm_per_step(
    sharding: str,
    params: int,
    trainable: int,
    world: int,
    *,
    accum: int = 1,
    checkpointing: bool = False,
    layers: int = 1,
    precision: str = "bf16",
    bandwidth: float,
    latency_s: float = 0.0,
) -> Comm:
    """The communication of one optimizer step of ``sharding`` over ``world`` ranks (module
    docstring), timed at ``bandwidth`` bytes/s (the link's bus bandwidth) and ``latency_s`` per
    collective. Nothing for one rank."""
    if world < 2 or bandwidth <= 0:
        return Comm(0.0, 0, 0.0)
    width = _dtype_bytes(precision)
    p_bytes, t_bytes = params * width, trainable * width
    f = (world - 1) / world
    kind = shardings.get(sharding)
    buckets = max(1, math.ceil(t_bytes / BUCKET_BYTES))
    if kind.family == shardings.FSDP or kind.stage == 3:
        gathers = 3 if checkpointing else 2
        moved = f * t_bytes + accum * gathers * f * p_bytes
        collectives = buckets + accum * gathers * max(1, layers)
    elif kind.stage in (1, 2):
        moved, collectives = 2 * f * t_bytes, 2 * buckets
    else:
        moved, collectives = 2 * f * t_bytes, buckets
    return Comm(moved, collectives, moved / bandwidth + collectives * latency_s)


def versus_ddp(options: Sequence[Any]) -> list[str]:
    """ "ZeRO-3 over this link: N times the DDP step": for each sharded kind of the plan, its step
    over that of no sharding (DDP) at the same micro batch, accumulation and checkpointing (the
    fastest such pair), in words; empty when the plan has no DDP setup to compare with."""
    ddp = {
        (o.method, o.batch_size, o.grad_accum, o.gradient_checkpointing): o
        for o in options
        if o.sharding == shardings.NONE.name and o.step_seconds
    }
    best: dict[str, tuple[float, Any, Any]] = {}
    for o in options:
        base = ddp.get((o.method, o.batch_size, o.grad_accum, o.gradient_checkpointing))
        kind = shardings.find(o.sharding)
        if base is None or kind is None or not kind.sharded or not o.step_seconds:
            continue
        label = kind.label or kind.name
        if label not in best or base.step_seconds < best[label][1].step_seconds:
            best[label] = (o.step_seconds / base.step_seconds, base, o)
    out = []
    for label, (factor, base, _o) in best.items():
        out.append(
            f"{label} over this link: {factor:.2f} times the DDP step ({base.method}, micro batch "
            f"{base.batch_size} x accum {base.grad_accum}, checkpointing "
            f"{'on' if base.gradient_checkpointing else 'off'})"
        )
    return out
