"""Step events from Lightning's printed progress bar, for a Lightning fit that runs without
fttui's Lightning callback (``FTTUI_INJECT=0``, another Python, a callback that failed).

Lightning's ``TQDMProgressBar`` (lightning.pytorch.callbacks.progress.tqdm_progress; its default
when ``rich`` is not installed) draws one training bar, reset at each epoch and described
``Epoch N``, with ``BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining},
{rate_noinv_fmt}{postfix}]"``::

    Epoch 1:  40%|████      | 4/10 [00:00<00:00, 1052.59it/s, v_num=0, train_loss=2.950]

Per batch it draws the bar twice: first with the new count (and the previous postfix), then with
the postfix of the metrics logged with ``prog_bar=True``. The count restarts at each epoch, so the
step is cumulative: the counts the earlier epochs reached plus this one's. The bar's ``0/N`` redraw
after ``N/N`` (the reset before the next epoch's description) is not a step. Other bars
(``Sanity Checking DataLoader 0:``, ``Validation DataLoader 0:``, ``Testing``, ``Predicting``) are
not the training's. The loss is the postfix's ``train_loss`` (else ``loss``, ``train_loss_step``)
of the last drawing of a count, as printed (three significant digits). The total is known when the
fit says it stopped (``Trainer.fit stopped: max_steps=50 reached.``, or ``max_epochs``: the
steps done), so it is written on the last step only (held until the output ends).

Not covered: Lightning's ``RichProgressBar`` (its default when ``rich`` is installed) draws nothing
to a pipe until the fit ends; the bar counts batches, so with ``accumulate_grad_batches`` above 1
a "step" here is a micro-batch.

Pure and stdlib only, like :mod:`fttui.core.run.supervising.logparse`: :meth:`LightningBarParser.feed`
takes one output segment and its arrival time and returns the events to write.
"""

from __future__ import annotations

import re
from dataclasses import replace

from fttui.core.base.event_records import Event, StepEvent
from fttui.core.run.supervising.logparse import SOURCE_LOG

__all__ = ["LightningBarParser", "LOSS_KEYS", "bar_postfix"]

# "Epoch 3:  40%|████      | 4/10 [00:00<00:00, 1.6it/s, v_num=0, train_loss=2.31]"; "5/?" without a length
_BAR = re.compile(r"^\s*Epoch (\d+):\s*(?:\d{1,3}%)?\|[^|]*\|\s*(\d+)/(\d+|\?)\s*\[([^\]]*)\]")
_STOPPED = re.compile(r"`Trainer\.fit` stopped: `(max_steps|max_epochs)=(\d+)` reached")
#: the postfix keys read as the training loss, best first
LOSS_KEYS = ("train_loss", "loss", "train_loss_step")


def bar_postfix(inside: str) -> dict[str, float]:
    """The numbers of a tqdm bar's postfix (``key=value`` after the rate, inside the brackets)."""
    out: dict[str, float] = {}
    for part in inside.split(", ")[2:]:
        key, sep, value = part.partition("=")
        if not sep:
            continue
        try:
            out[key.strip()] = float(value.strip())
        except ValueError:
            continue
    return out


class LightningBarParser:
    """Feed it the output, one segment at a time; it returns the steps Lightning's bar tells."""

    def __init__(self) -> None:
        self.epoch: int | None = None  # the epoch the bar shows
        self.base = 0  # steps of the epochs before it
        self.count = 0  # the highest count the bar reached in this epoch
        self.epoch_total: int | None = None  # this epoch's batches, when the bar knows them
        self.pending: tuple[int, float, float | None] | None = None  # (step, t, loss) not yet written
        self.emitted = 0
        self.total: int | None = None
        self.t0: float | None = None

    def feed(self, segment: str, t: float) -> list[Event]:
        text = segment.strip("\r\n")
        out: list[Event] = []
        bar = _BAR.match(text)
        if bar is not None:
            total = int(bar.group(3)) if bar.group(3).isdigit() else None
            out += self._on_bar(int(bar.group(1)), int(bar.group(2)), total, bar_postfix(bar.group(4)), t)
        stopped = _STOPPED.search(text)
        if stopped is not None:  # printed with or without a bar (Rich's draws nothing to a pipe)
            if stopped.group(1) == "max_steps":
                self.total = int(stopped.group(2))
            elif self.epoch is not None:
                self.total = self.base + self.count
        return out

    def finish(self, t: float) -> list[Event]:
        """The output ended: write the step held."""
        if self.pending is None:
            return []
        step, ts, loss = self.pending
        self.pending = None
        return self._step(step, ts, loss)

    def _on_bar(self, epoch: int, n: int, total: int | None, postfix: dict[str, float], t: float) -> list[Event]:
        out: list[Event] = []
        if self.epoch is None or epoch > self.epoch:
            out += self.finish(t)
            if self.epoch is not None:
                self.base += self.count
            self.epoch, self.count, self.epoch_total = epoch, 0, total
            if self.t0 is None:
                self.t0 = t
        elif epoch < self.epoch or n < self.count:
            return out  # an older epoch's redraw, or the reset before the next epoch's description
        loss = next((postfix[k] for k in LOSS_KEYS if k in postfix), None)
        self.epoch_total = total or self.epoch_total
        if n == self.count:  # the same count drawn again: its postfix is this step's metrics
            if self.pending is not None and n > 0:
                self.pending = (self.pending[0], self.pending[1], loss if loss is not None else self.pending[2])
            return out
        out += self.finish(t)
        self.count = n
        self.pending = (self.base + n, t, loss)
        return out

    def _step(self, step: int, t: float, loss: float | None) -> list[Event]:
        if step <= self.emitted:
            return []
        self.emitted = step
        e_total = self.epoch_total
        epoch = None
        if self.epoch is not None:
            frac = (step - self.base) / e_total if e_total else 0.0
            epoch = round(self.epoch + min(1.0, max(0.0, frac)), 4)
        ev = StepEvent(
            step=step,
            total_steps=self.total,
            epoch=epoch,
            loss=loss,
            train_time=max(0.0, t - self.t0) if self.t0 is not None else None,
        )
        return [replace(ev, t=t, rank=0, source=SOURCE_LOG)]
