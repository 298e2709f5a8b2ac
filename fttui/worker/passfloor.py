"""The pass floor: what one forward and backward pass costs with next to no work in it.

A training step's time is a fixed part plus a part that grows with the FLOPs it feeds
(docs/forecast.md). The fixed part of each forward and backward pass (the operators' launch and
bookkeeping, which a small model on a CPU or a fast card spends most of its pass in) cannot be
told apart from the rest by the run's own steps when every step feeds the same shape (synthetic
data). So once training is over, the worker times a few passes of one short sample through the
Trainer's own ``training_step`` (the same path as a micro-batch: its input preparation, loss and
backward), on the trained model; their gradients are dropped and no optimizer step follows, so
the model the run saves is the one it trained. The figures go into the rank's ``end`` event
(``pass_floor_s``, ``pass_floor_tokens``), outside its training time.

Only a run of one process without DeepSpeed or FSDP measures it: a pass outside the training
loop would have to run on every rank at once there. Never fails the run.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["FLOOR_TOKENS", "FLOOR_REPEATS", "pass_floor"]

FLOOR_TOKENS = 16  # one sample of this many tokens (or max_seq_len when shorter)
#: the first is left out (a new shape); the floor is the fastest of the others: a pass of a few
#: milliseconds that the scheduler preempts once is several times longer (on the 2-core machine
#: beside two busy processes the median of five was 64.5 ms against 3.8 quiet)
FLOOR_REPEATS = 11


def pass_floor(trainer, max_seq_len: int, log=None) -> dict[str, Any]:
    """``{"pass_floor_s", "pass_floor_tokens"}`` of ``trainer``'s model, or ``{}`` where it is not
    measured (several processes, DeepSpeed, FSDP) or cannot be (any error: logged, never raised)."""
    try:
        return _measure(trainer, max_seq_len)
    except Exception as e:  # a figure for the forecast: never a reason to fail a trained run
        if log is not None:
            log(f"pass floor not measured ({type(e).__name__}: {e})")
        return {}


def _measure(trainer, max_seq_len: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return {}
    if getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False):
        return {}
    model = trainer.model
    device = next(model.parameters()).device
    vocab = int(model.get_input_embeddings().num_embeddings)
    n = max(2, min(FLOOR_TOKENS, int(max_seq_len)))
    ids = (torch.arange(n, device=device, dtype=torch.long) * 7 + 3) % vocab
    inputs = {"input_ids": ids[None], "attention_mask": torch.ones_like(ids)[None], "labels": ids[None].clone()}
    cuda = device.type == "cuda"
    step = type(trainer).training_step  # the class's: the instance's counts the run's micro-batches
    times = []
    for _ in range(FLOOR_REPEATS):
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        step(trainer, model, inputs)
        if cuda:
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    model.zero_grad(set_to_none=True)
    return {"pass_floor_s": round(min(times[1:]), 6), "pass_floor_tokens": n}
