"""What a command tells fttui without fttui's callback, merged into one stream of step events:
its printed lines (a Trainer's bar and log dicts, or any bar without a description,
:mod:`fttui.core.run.supervising.logparse`; Lightning's bar,
:mod:`fttui.core.run.supervising.lightningbar`; litgpt's and torchtune's lines,
:mod:`fttui.core.run.supervising.recipelines`) and the TensorBoard event files it writes
(:mod:`fttui.core.run.supervising.tbfollow`).

One source gives the steps, never two (no step is counted twice): the first printed parser that
tells a step (source ``log``), except that a format of its own (Lightning's bar, a recipe's line)
takes the steps over from a bar without a description (torchtune draws its bar once without one
before its first step); the event file (``tensorboard``) only where no training bar or line was
printed before its first loss. The loss of a step is the event file's where it has one for that
step (exact, where the printed bar rounds it; the event's ``loss_source`` says ``tensorboard``),
else the printed one. The total comes from the printed lines (a bar's total, Lightning's
"stopped" line), also onto steps the event file gives. A step is held until the next one is known
(or the output ends), so the last step gets the total a line after it may tell, and the file's
loss of its last read. Fttui's callback and the reporting API come before all of these: once
``callback.json`` exists the log writer stops writing these events
(:mod:`fttui.core.run.supervising.logtee`).

Not thread-safe: the log writer calls it under one lock from its output pump and its poller.
"""

from __future__ import annotations

from dataclasses import replace

from fttui.core.base.event_records import Event, StepEvent
from fttui.core.run.supervising.lightningbar import LightningBarParser
from fttui.core.run.supervising.logparse import TrainerLogParser
from fttui.core.run.supervising.recipelines import RecipeLineParser
from fttui.core.run.supervising.tbfollow import LossPoint, TbFollower

__all__ = ["CommandSources", "SOURCE_TENSORBOARD"]

SOURCE_TENSORBOARD = "tensorboard"
#: TensorBoard losses kept by step, for the printed steps that come after them
_KEEP = 4096


class CommandSources:
    """``feed(segment, t)`` for each output segment, ``poll(t)`` now and then (event files that
    grow while the output is quiet), ``finish(t)`` at the end; each returns the events to write."""

    def __init__(self, tb: TbFollower | None = None) -> None:
        self.generic = TrainerLogParser()  # a bar without a description, a Trainer's log dicts
        self.printed: list[TrainerLogParser | LightningBarParser | RecipeLineParser] = [
            self.generic,
            LightningBarParser(),
            RecipeLineParser(),
        ]
        self.tb = tb
        self.owner: object | None = None  # what gives the steps: a printed parser, or the follower
        self.tb_loss: dict[int, float] = {}
        self.tb_pending: LossPoint | None = None  # the follower's latest step, held
        self.tb_emitted = 0
        self.tb_t0: float | None = None

    # ------------------------------------------------------------------ input
    def feed(self, segment: str, t: float) -> list[Event]:
        out: list[Event] = []
        for parser in self.printed:
            out += self._printed(parser, parser.feed(segment, t), t)
            if parser.pending is not None:
                self._claim(parser)  # a step shown and held
        return out

    def _claim(self, parser: object) -> None:
        """``parser`` tells a step: it gives the steps unless another does (a format of its own
        takes them over from the generic bar)."""
        if self.owner is None or (self.owner is self.generic and parser is not self.generic and parser is not self.tb):
            self.owner = parser

    def poll(self, t: float) -> list[Event]:
        return self._tb_points(t, scan=True)

    def finish(self, t: float) -> list[Event]:
        out = self._tb_points(t, scan=True, force=True)
        for parser in self.printed:
            out += self._printed(parser, parser.finish(t), t)
        if self.owner is self.tb and self.tb_pending is not None:
            out += self._tb_step(self.tb_pending, t)
            self.tb_pending = None
        return out

    # ------------------------------------------------------------------ merging
    def _total(self) -> int | None:
        # the steps' own source's, or Lightning's "stopped" line (a bar without a description
        # that gave no step, a data preparation's, is not the training's total)
        totals = [p.total for p in self.printed if p.total and (p is self.owner or isinstance(p, LightningBarParser))]
        return max(totals) if totals else None

    def _printed(self, parser: object, events: list[Event], t: float) -> list[Event]:
        out: list[Event] = []
        for ev in events:
            if not isinstance(ev, StepEvent):
                out.append(ev)  # evaluations, the Trainer's end
                continue
            self._claim(parser)
            if self.owner is not parser:
                continue
            if self.tb is not None and ev.step is not None and ev.step not in self.tb_loss:
                out += self._tb_points(t, scan=True)  # the file may have this step by now
            loss = self.tb_loss.get(ev.step) if ev.step is not None else None
            if loss is not None:
                ev = replace(ev, loss=loss, loss_source=SOURCE_TENSORBOARD)
            out.append(ev)
        return out

    def _tb_points(self, t: float, scan: bool, force: bool = False) -> list[Event]:
        if self.tb is None:
            return []
        try:
            points = self.tb.poll(t, scan=scan, force=force)
        except Exception:  # an unreadable file never stops the output's events
            return []
        out: list[Event] = []
        for p in points:
            self.tb_loss[p.step] = p.loss
            if len(self.tb_loss) > _KEEP:
                self.tb_loss.pop(min(self.tb_loss))
            if self.owner is None and all(p.t0 is None for p in self.printed):
                self.owner = self.tb  # nothing printed a training bar or line: the file's steps
            if self.owner is not self.tb:
                continue
            if self.tb_pending is not None and p.step > self.tb_pending.step:
                out += self._tb_step(self.tb_pending, t)
            if self.tb_pending is None or p.step >= self.tb_pending.step:
                self.tb_pending = p
        return out

    def _tb_step(self, p: LossPoint, t: float) -> list[Event]:
        if p.step <= self.tb_emitted:
            return []
        self.tb_emitted = p.step
        wall = p.wall_time if p.wall_time is not None else t
        if self.tb_t0 is None:
            self.tb_t0 = wall
        ev = StepEvent(
            step=p.step,
            total_steps=self._total(),
            loss=p.loss,
            train_time=max(0.0, wall - self.tb_t0),
        )
        return [replace(ev, t=wall, rank=0, source=SOURCE_TENSORBOARD)]
