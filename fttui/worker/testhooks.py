"""Faults a test can ask the training worker for through the environment, to see that fttui names
them (docs/reliability.md, docs/performance.md); unset, they do nothing.

* ``FTTUI_TEST_LEAK_MB=N``: every optimizer step keeps N MiB more (a tensor, written so that its
  pages are resident, on the model's device, never freed): memory that creeps until the run runs
  out of it. The creep warning (fttui.core.run.fold.memtrend) must come before the OOM.
* ``FTTUI_TEST_SLOW_DATA_S=S``: every batch the data loader collates takes S seconds longer: an
  input pipeline the card waits for. The why-slow line (fttui.core.run.fold.whyslow) must name it.
"""

from __future__ import annotations

import os
import time

__all__ = ["LEAK_ENV", "SLOW_DATA_ENV", "hook_callbacks", "slow_collator"]

LEAK_ENV = "FTTUI_TEST_LEAK_MB"
SLOW_DATA_ENV = "FTTUI_TEST_SLOW_DATA_S"


def _positive(name: str) -> float:
    try:
        value = float(os.environ.get(name, "") or 0)
    except ValueError:
        return 0.0
    return value if value > 0 else 0.0


def hook_callbacks() -> list:
    """The Trainer callbacks the environment asks for (the leak), else none."""
    mb = _positive(LEAK_ENV)
    if not mb:
        return []
    import torch
    from transformers import TrainerCallback

    class Leak(TrainerCallback):
        kept: list = []

        def on_step_end(self, args, state, control, model=None, **kw):
            device = next(model.parameters()).device if model is not None else "cpu"
            self.kept.append(torch.ones(int(mb * 2**18), dtype=torch.float32, device=device))

    return [Leak()]


def slow_collator(collate):
    """``collate``, S seconds slower per batch when the environment asks for it."""
    delay = _positive(SLOW_DATA_ENV)
    if not delay:
        return collate

    def slow(features):
        time.sleep(delay)
        return collate(features)

    return slow
