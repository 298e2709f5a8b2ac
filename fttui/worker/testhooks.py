"""Faults a test can ask the training worker for through the environment, to see that fttui names
them (docs/reliability.md, docs/performance.md); unset, they do nothing.

* ``FTTUI_TEST_LEAK_MB=N``: every optimizer step keeps N MiB more (a tensor, written so that its
  pages are resident, on the model's device, never freed): memory that creeps until the run runs
  out of it. The creep warning (fttui.core.run.fold.memtrend) must come before the OOM.
* ``FTTUI_TEST_SLOW_DATA_S=S``: every batch the data loader collates takes S seconds longer: an
  input pipeline the card waits for. The why-slow line (fttui.core.run.fold.whyslow) must name it.
* ``FTTUI_TEST_SLOW_RANK=R:S[:FROM]``: rank R's every optimizer step from step FROM on (default 1)
  takes S seconds longer outside any collective (before its forward): a slow card or a busy host's
  rank, which the others wait for. The slow-rank fold (fttui.core.run.fold.skew) must name it.
  (Stopping the rank from outside, SIGSTOP, is no such model: on a loaded machine the ranks spend
  most of their time in collectives, so a stop mostly lands in the rank's wait and every rank's
  wait grows alike.)
"""

from __future__ import annotations

import os
import time

__all__ = ["LEAK_ENV", "SLOW_DATA_ENV", "SLOW_RANK_ENV", "hook_callbacks", "slow_collator"]

LEAK_ENV = "FTTUI_TEST_LEAK_MB"
SLOW_DATA_ENV = "FTTUI_TEST_SLOW_DATA_S"
SLOW_RANK_ENV = "FTTUI_TEST_SLOW_RANK"


def _positive(name: str) -> float:
    try:
        value = float(os.environ.get(name, "") or 0)
    except ValueError:
        return 0.0
    return value if value > 0 else 0.0


def _slow_rank() -> tuple[float, int] | None:
    """``(seconds, from step)`` when :data:`SLOW_RANK_ENV` names this process's rank, else None."""
    parts = os.environ.get(SLOW_RANK_ENV, "").split(":")
    try:
        rank, delay = int(parts[0]), float(parts[1])
        start = int(parts[2]) if len(parts) > 2 else 1
        mine = int(os.environ.get("RANK", "0"))
    except (ValueError, IndexError):
        return None
    return (delay, start) if delay > 0 and rank == mine else None


def hook_callbacks() -> list:
    """The Trainer callbacks the environment asks for (the leak, the slow rank), else none."""
    mb, slow = _positive(LEAK_ENV), _slow_rank()
    if not mb and slow is None:
        return []
    from transformers import TrainerCallback

    out: list = []
    if mb:
        import torch

        class Leak(TrainerCallback):
            kept: list = []

            def on_step_end(self, args, state, control, model=None, **kw):
                device = next(model.parameters()).device if model is not None else "cpu"
                self.kept.append(torch.ones(int(mb * 2**18), dtype=torch.float32, device=device))

        out.append(Leak())
    if slow is not None:
        delay, start = slow

        class SlowRank(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                if state.global_step + 1 >= start:  # the step about to run
                    time.sleep(delay)

        out.append(SlowRank())
    return out


def slow_collator(collate):
    """``collate``, S seconds slower per batch when the environment asks for it."""
    delay = _positive(SLOW_DATA_ENV)
    if not delay:
        return collate

    def slow(features):
        time.sleep(delay)
        return collate(features)

    return slow
