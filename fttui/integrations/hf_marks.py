"""What fttui's Trainer callback wraps on the Trainer instance it reports: its micro-batches
counted (``training_step``, ``get_batch_samples``) and its training phases marked (the methods
whose time is a phase of its own, :data:`fttui.integrations.hf_info.PHASES`, and DeepSpeed's
engine step), into the callback's :class:`~fttui.integrations.hf_info.Counters` ``c``. One
attribute is set per boundary; nothing is written here (an ``error`` event names the phase the
rank failed in). Also how the callback finds the Trainer that calls it.

Stdlib only, like :mod:`fttui.integrations.hf` loads it: by path into a command's own Python where
fttui may not be importable. Every wrap is on the instance: the Trainer class is left alone.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["find_trainer", "wrap_counting", "mark_phases", "mark_engine_step", "resumed_step"]


def find_trainer():
    """The Trainer whose training loop calls the callback that calls this (a frame above it),
    else ``None``."""
    try:
        from transformers import Trainer
    except Exception:
        return None
    frame: FrameType | None = sys._getframe(1)
    for _ in range(12):
        if frame is None:
            return None
        obj = frame.f_locals.get("self")
        if isinstance(obj, Trainer):
            return obj
        frame = frame.f_back
    return None


def wrap_counting(trainer, c, counted: Callable[[str, Callable[[], Any]], None]) -> None:
    """Count ``trainer``'s micro-batches into ``c``: each ``training_step``'s inputs and loss, the
    time its ``get_batch_samples`` waited for batches, and the ``forward`` / ``data`` phases.
    ``counted(what, fn)`` runs a count (the callback's: a failure logged, never raised unless
    strict)."""
    step_fn, fetch_fn = trainer.training_step, trainer.get_batch_samples

    def training_step(model, inputs, *args, **kwargs):
        counted("reading a micro-batch's length", lambda: c.feeding(inputs))
        begun = c.pass_begin()
        # the phase marks: forward until compute_loss returns, then backward (compute_loss,
        # wrapped by mark_phases, moves it); an error leaves the phase it failed in
        c.phase, c.in_pass = "forward", True
        try:
            loss = step_fn(model, inputs, *args, **kwargs)
        finally:
            c.in_pass = False

        def count() -> None:
            c.pass_end(begun)
            c.add(inputs, loss)

        counted("counting a micro-batch", count)
        return loss

    def get_batch_samples(*args, **kwargs):
        c.fetch_t0 = t0 = time.perf_counter()  # a step's batches are fetched before on_step_begin
        c.phase = "data"
        try:
            return fetch_fn(*args, **kwargs)
        finally:  # the input pipeline's share of the step: the time spent waiting for batches
            c.data_wait += time.perf_counter() - t0

    trainer.training_step = training_step
    trainer.get_batch_samples = get_batch_samples


def mark_phases(trainer, c) -> None:
    """Wrap, on this Trainer instance, the methods whose time is a phase of its own:
    ``compute_loss`` inside a training step (the forward; what follows it is the backward),
    ``_clip_grad_norm`` (the optimizer step's first part; the callbacks ``on_pre_optimizer_step`` /
    ``on_optimizer_step`` mark the rest), ``_save_checkpoint``, ``_load_from_checkpoint`` and
    ``_load_optimizer_and_scheduler`` (resuming) and ``evaluate``. A method this Trainer lacks is
    left unmarked."""

    def compute_loss(fn):
        def wrapped(*args, **kwargs):
            out = fn(*args, **kwargs)
            if c.in_pass:
                c.phase = "backward"
            return out

        return wrapped

    def within(phase: str, restore: bool, fn):
        def wrapped(*args, **kwargs):
            was = c.enter(phase)
            if phase == "resume-load":
                resumed_step(c, args[0] if args else kwargs.get("resume_from_checkpoint"))
            out = fn(*args, **kwargs)  # an error leaves the phase it failed in
            c.phase = was if restore else None
            return out

        return wrapped

    def clip(fn):
        def wrapped(*args, **kwargs):
            c.phase = "optimizer"
            return fn(*args, **kwargs)

        return wrapped

    marks: list[tuple[str, Callable[[Any], Any]]] = [
        ("compute_loss", compute_loss),
        ("_clip_grad_norm", clip),
        ("_save_checkpoint", lambda fn: within("save", True, fn)),
        ("_load_from_checkpoint", lambda fn: within("resume-load", False, fn)),
        ("_load_optimizer_and_scheduler", lambda fn: within("resume-load", False, fn)),
        ("evaluate", lambda fn: within("eval", True, fn)),
    ]
    for name, wrap in marks:
        fn = getattr(trainer, name, None)
        if callable(fn):
            setattr(trainer, name, wrap(fn))


def mark_engine_step(trainer, c) -> bool:
    """Under DeepSpeed the engine steps its optimizer inside accelerate's backward (the Trainer's
    ``optimizer.step()`` is a no-op there): mark the engine's ``step`` (built in ``train()``,
    before ``on_train_begin``) as the ``optimizer`` phase, back to the backward after it. False
    when there is no engine to mark (no DeepSpeed, or marked already)."""
    engine = getattr(trainer, "model_wrapped", None) if getattr(trainer, "is_deepspeed_enabled", False) else None
    step = getattr(engine, "step", None)
    if engine is None or not callable(step) or getattr(step, "_fttui_phase", False):
        return False

    def wrapped(*args, **kwargs):
        was = c.enter("optimizer")
        out = step(*args, **kwargs)  # an error leaves the phase it failed in
        c.phase = was
        return out

    setattr(wrapped, "_fttui_phase", True)  # noqa: B010 (a marker on a function: no typed attribute)
    engine.step = wrapped
    return True


def resumed_step(c, checkpoint) -> None:
    """The step a resume continues from (``checkpoint-N``: N), the counters' last finished step."""
    name = os.path.basename(os.path.normpath(str(checkpoint))) if checkpoint else ""
    if name.startswith("checkpoint-") and name[len("checkpoint-") :].isdigit():
        c.step = int(name[len("checkpoint-") :])
