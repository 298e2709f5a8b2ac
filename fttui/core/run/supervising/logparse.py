"""Step events from a Trainer's printed output, for commands that run without fttui's callback.

A Hugging Face Trainer prints two things fttui can read (transformers 4 and 5):

* its progress bar (tqdm, on stderr): ``' 40%|████      | 2/5 [00:01<00:01,  1.6it/s]'``, updated
  in place with a carriage return; the bar of the training loop has no description (``Map: ...``
  bars of ``datasets`` do), and its total is the run's number of optimizer steps. The training bar
  is the latest bar without a description that starts (``0/M``) before any step; later bars of
  another total (evaluation) are not steps;
* its log dicts, one per logging step: ``{'loss': 2.31, 'grad_norm': 1.2, 'learning_rate': 5e-05,
  'epoch': 0.4}`` (transformers 5 prints the numbers as strings, ``'2.31'``), the evaluation's
  ``{'eval_loss': ...}`` and, at the end, ``{'train_runtime': ..., 'train_samples_per_second':
  ..., 'train_loss': ...}``.

:class:`TrainerLogParser` turns them into the event records the worker writes (``step``, ``eval``,
``end``; docs/architecture.md "Events"), with ``source = "log"`` and rank 0, written without the
figures the output does not tell (``sparse``). A log dict carries no
step number: it belongs to the step the bar shows next (tqdm redraws the bar right after printing
the dict), so a step is held until the next bar line or dict says whether a loss belongs to it.
What the output does not say stays unknown: samples per step (only the Trainer's end figure,
``train_samples_per_second`` x ``train_runtime``), tokens (only when the Trainer logs
``num_input_tokens_seen``), memory of the ranks, world size. Without a progress bar
(``disable_tqdm``), no step is known and only the end and evaluation events are written.

Pure and stdlib only: :meth:`TrainerLogParser.feed` takes one output segment (a line, or a piece
between carriage returns) and its arrival time and returns the events to write.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from typing import Any

from fttui.core.base.event_records import EndEvent, EvalEvent, Event, StepEvent
from fttui.core.run.fold.snapshot import to_int

__all__ = ["TrainerLogParser", "split_segments", "parse_log_dict", "SOURCE_LOG"]

SOURCE_LOG = "log"

# " 40%|████      | 2/5 [00:01<00:01,  1.6it/s]": nothing before the percentage (no description)
_BAR = re.compile(r"^\s*(\d{1,3})%\|[^|]*\|\s*(\d+)/(\d+)\s*\[")
_DICT = re.compile(r"^\s*\{.*\}\s*$")
_SEGMENT = re.compile(rb"[^\r\n]*[\r\n]")


def split_segments(buf: bytes) -> tuple[list[bytes], bytes]:
    """Complete segments of ``buf`` (each with its ``\\n`` or ``\\r`` terminator) and the rest."""
    end = max(buf.rfind(b"\n"), buf.rfind(b"\r"))  # the regex only where a terminator follows:
    if end < 0:  # a long unfinished line is not scanned again and again (that was quadratic)
        return [], buf
    return _SEGMENT.findall(buf, 0, end + 1), buf[end + 1 :]


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def parse_log_dict(text: str) -> dict[str, float] | None:
    """A Trainer log dict (``{'loss': '2.31', 'epoch': 0.4}``) as numbers; ``None`` when the text
    is not such a dict. Values that are not numbers are left out."""
    if not _DICT.match(text) or len(text) > 20000:
        return None
    try:
        obj = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    if not isinstance(obj, dict):
        return None
    out = {str(k): v for k, v in ((k, _number(v)) for k, v in obj.items()) if v is not None}
    return out or None


class TrainerLogParser:
    """Feed it the output, one segment at a time; it returns the events the output tells."""

    def __init__(self) -> None:
        self.total: int | None = None  # the training bar's total (the first bar seen)
        self.t0: float | None = None  # when the training bar first showed: train_time counts from here
        self.emitted = 0  # the latest step written
        self.pending: tuple[int, float] | None = None  # (step, t) shown by the bar, not yet written
        self.log: dict[str, float] | None = None  # a loss dict waiting for the bar that names its step
        self.tokens: int | None = None  # the Trainer's count of input tokens, as last logged
        self.ended = False

    # ------------------------------------------------------------------ input
    def feed(self, segment: str, t: float) -> list[Event]:
        text = segment.strip("\r\n")
        if not text.strip():
            return []
        bar = _BAR.match(text)
        if bar is not None:
            return self._on_bar(int(bar.group(2)), int(bar.group(3)), t)
        logs = parse_log_dict(text)
        if logs is not None:
            return self._on_dict(logs, t)
        return []

    def finish(self, t: float) -> list[Event]:
        """The output ended: write what is held."""
        return self._flush(t)

    # ------------------------------------------------------------------ bars and dicts
    def _on_bar(self, n: int, total: int, t: float) -> list[Event]:
        if total <= 0:
            return []
        if self.total is None or (
            total != self.total
            and n == 0
            and self.emitted == 0
            and (self.pending is None or self.pending[0] >= self.total)
        ):
            # the first bar; or a new one starting before any step, after the previous one finished
            self.total, self.t0, self.pending = total, None, None
        elif total != self.total:
            return []  # another bar (evaluation, data): not the training loop's
        if self.t0 is None:
            self.t0 = t
        out: list[Event] = []
        if self.log is not None:
            # the dict printed before this bar belongs to the step the bar shows now
            if self.pending is not None and self.pending[0] < n:
                out += self._step(*self.pending, None)
            self.pending = None
            if n > self.emitted:
                out += self._step(n, t, self.log)
            self.log = None
            return out
        if n <= self.emitted or (self.pending is not None and n <= self.pending[0]):
            return out
        if self.pending is not None:
            out += self._step(*self.pending, None)
        self.pending = (n, t) if n > 0 else None
        return out

    def _on_dict(self, logs: dict[str, float], t: float) -> list[Event]:
        if "num_input_tokens_seen" in logs:
            self.tokens = to_int(logs["num_input_tokens_seen"])
        if "eval_loss" in logs:
            step = max(self.emitted, self.pending[0] if self.pending else 0)
            ev = EvalEvent(
                step=step or None,
                eval_loss=logs["eval_loss"],
                metrics={k: v for k, v in logs.items() if k.startswith("eval_")},
                eval_time=logs.get("eval_runtime"),
            )
            return [self._stamp(ev, t)]
        if "train_runtime" in logs and "loss" not in logs:  # the end (a step's log may carry its speed too)
            out = self._flush(t)
            runtime = logs["train_runtime"]
            sps = logs.get("train_samples_per_second")
            loss = logs.get("train_loss")
            end = EndEvent(
                step=self.emitted or None,
                train_time=runtime,
                samples=round(sps * runtime) if sps is not None else None,
                tokens=self.tokens,
                extra={} if loss is None else {"train_loss": loss},
            )
            self.ended = True
            return out + [self._stamp(end, t)]
        if "loss" in logs:
            out = []
            if self.log is not None:  # two dicts without a bar between them: no step known for the first
                out += self._flush(t)
            self.log = logs
            return out
        return []

    def _flush(self, t: float) -> list[Event]:
        out: list[Event] = []
        if self.pending is not None:
            step, ts = self.pending
            self.pending = None
            if self.log is not None:  # the dict came after this step's bar and no bar followed it
                out += self._step(step, ts, self.log)
                self.log = None
            else:
                out += self._step(step, ts, None)
        self.log = None
        return out

    # ------------------------------------------------------------------ events
    def _step(self, step: int, t: float, logs: dict[str, float] | None) -> list[Event]:
        if step <= self.emitted:
            return []
        self.emitted = step
        logs = logs or {}
        grad_norm = logs.get("grad_norm")
        ev = StepEvent(
            step=step,
            total_steps=self.total,
            epoch=logs.get("epoch"),
            loss=logs.get("loss"),
            lr=logs.get("learning_rate"),
            train_time=max(0.0, t - self.t0) if self.t0 is not None else None,
            tokens=to_int(logs.get("num_input_tokens_seen")),  # the Trainer's count, printed as a number
            extra={} if grad_norm is None else {"grad_norm": grad_norm},
        )
        return [self._stamp(ev, t)]

    @staticmethod
    def _stamp(ev: Event, t: float) -> Event:
        """The event as read from the log: rank 0, ``source = "log"``, at ``t``; written with its
        unknown figures left out (:func:`fttui.core.run.files.events.write_event`, ``sparse``)."""
        return replace(ev, t=t, rank=0, source=SOURCE_LOG)
