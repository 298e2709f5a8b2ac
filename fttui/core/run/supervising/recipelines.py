"""Step events from the printed lines of two common fine-tuning recipes, for a command that runs
without fttui's callback or reporting calls.

* litgpt (``litgpt finetune``, ``litgpt/finetune/*.py``) prints, every ``train.log_interval``
  iterations (micro-batches), through ``fabric.print``::

      Epoch 1 | iter 10 step 5 | loss train: 2.345, val: n/a | iter time: 120.50 ms (step)

  ``step`` is the optimizer steps done, ``loss train`` the running mean over the accumulation
  window (three decimals); ``(step)`` marks an iteration that stepped the optimizer. After an
  evaluation: ``iter 10: val loss 2.1234, val time: 850.00 ms``.
* torchtune's recipes (``recipes/*.py``) draw a tqdm bar per epoch whose description is set after
  each optimizer step to ``f"{epoch + 1}|{global_step}|Loss: {loss}"``::

      1|10|Loss: 2.3451263904571533:  40%|████      | 4/10 [00:01<00:01,  3.10it/s]

  ``global_step`` counts over the epochs; the bar is drawn once more before the description
  changes (with the previous step's description, or none at the first step: that drawing is a
  bar without a description, which this parser's step takes over from).

A step is written when its number first shows, with the loss the same line prints; nothing says
the total (torchtune's bar total is one epoch's steps, litgpt prints none), samples or tokens.
Pure and stdlib only: :meth:`RecipeLineParser.feed` takes one output segment and its arrival time.
"""

from __future__ import annotations

import re
from dataclasses import replace

from fttui.core.base.event_records import EvalEvent, Event, StepEvent
from fttui.core.run.supervising.logparse import SOURCE_LOG

__all__ = ["RecipeLineParser"]

_NUM = r"([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))"
_LITGPT = re.compile(r"^\s*Epoch (\d+) \| iter (\d+) step (\d+) \| loss train: " + _NUM + r",")
_LITGPT_VAL = re.compile(r"^\s*iter (\d+): val loss " + _NUM + r", val time: ")
_TORCHTUNE = re.compile(r"^\s*(\d+)\|(\d+)\|Loss: " + _NUM + r":\s*(?:\d{1,3}%)?\|")


class RecipeLineParser:
    """Feed it the output, one segment at a time; it returns the steps litgpt's or torchtune's
    lines tell."""

    def __init__(self) -> None:
        self.emitted = 0
        self.t0: float | None = None
        self.total: int | None = None  # never printed
        self.pending: tuple[int, float] | None = None  # nothing is held: the same interface as the others

    def feed(self, segment: str, t: float) -> list[Event]:
        text = segment.strip("\r\n")
        m = _LITGPT.match(text)
        if m is not None:
            return self._step(int(m.group(3)), float(m.group(4)), t)
        m = _TORCHTUNE.match(text)
        if m is not None:
            return self._step(int(m.group(2)), float(m.group(3)), t)
        m = _LITGPT_VAL.match(text)
        if m is not None and self.t0 is not None:
            ev = EvalEvent(step=self.emitted or None, eval_loss=float(m.group(2)))
            return [replace(ev, t=t, rank=0, source=SOURCE_LOG)]
        return []

    def finish(self, t: float) -> list[Event]:
        return []

    def _step(self, step: int, loss: float, t: float) -> list[Event]:
        if self.t0 is None:
            self.t0 = t
        if step <= self.emitted:
            return []
        self.emitted = step
        # the epoch both print is the one running (from 1), not the fraction done: left out
        ev = StepEvent(step=step, loss=loss, train_time=max(0.0, t - self.t0))
        return [replace(ev, t=t, rank=0, source=SOURCE_LOG)]
