"""fttui's Lightning callback: a ``lightning.Trainer`` (or ``pytorch_lightning.Trainer``) reports
to fttui without a line of the script changed. fttui's ``sitecustomize``
(:mod:`fttui.integrations.autoload`) adds it to every Lightning Trainer of a command fttui runs.

Per optimizer step and rank (Lightning's ``global_rank``) it writes a ``step`` event through the
step reporter (:mod:`fttui.integrations.reporter`): the step (``trainer.global_step``), the
samples (each micro-batch's size: the first dimension of the batch's first tensor), the loss (the
sum of the step's micro-batch losses as the training step returned them, which Lightning divides
by the accumulation: the step's mean), the tokens of a batch of ``input_ids`` (its
``attention_mask``'s sum), the learning rate and the epoch; a ``start`` event when
training starts (the model's class and parameters, the accumulation, the precision, the world
size, the total steps Lightning estimates), ``end`` when it ends and ``error`` for an exception
out of ``fit`` (Lightning's ``on_exception``).

Stdlib only at import: the callback class is built on the Callback class of the Lightning that
imported it (:func:`callback_class`), and the reporter is loaded by path where fttui is not
importable. Any failure in here is logged (``integration.log``) and training goes on.
"""

from __future__ import annotations

import os
import sys
from typing import Any

try:
    from fttui.integrations import reporter as _rep
except ImportError:  # loaded by path into a Python where fttui is not installed
    import importlib.util as _util

    _name = "_fttui_reporter"
    if _name in sys.modules:
        _rep = sys.modules[_name]
    else:
        _here = os.path.dirname(os.path.abspath(__file__))
        _spec = _util.spec_from_file_location(_name, os.path.join(_here, "reporter.py"))
        if _spec is None or _spec.loader is None:
            raise
        _rep = _util.module_from_spec(_spec)
        sys.modules[_name] = _rep
        _spec.loader.exec_module(_rep)

__all__ = ["CALLBACK_NAME", "callback_class", "attach", "batch_size", "batch_tokens", "precision"]

#: The class name of fttui's Lightning callback (a Trainer that has one gets no second).
CALLBACK_NAME = "FttuiLightningCallback"
_CLASSES: dict[type, type] = {}


def batch_size(batch: Any) -> int | None:
    """A micro-batch's samples: the first dimension of its first tensor (in a tuple, a list or a
    dict's values, searched in order), else ``None``."""
    todo = [batch]
    while todo:
        item = todo.pop(0)
        shape = getattr(item, "shape", None)
        if shape is not None and len(shape) >= 1:
            return int(shape[0])
        if isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
    return None


def batch_tokens(batch: Any) -> Any:
    """A micro-batch's non-padding tokens when it is a mapping with ``input_ids`` (a Hugging Face
    style batch): its ``attention_mask``'s sum (a tensor: read once per step), else the ids'
    count; ``None`` for any other batch."""
    if not isinstance(batch, dict):
        return None
    ids: Any = batch.get("input_ids")
    if not hasattr(ids, "numel"):
        return None
    mask: Any = batch.get("attention_mask")
    return mask.detach().sum() if hasattr(mask, "sum") and hasattr(mask, "detach") else int(ids.numel())


def precision(value: Any) -> str | None:
    """fttui's precision name of Lightning's (``bf16-mixed`` -> ``bf16``, ``16-mixed`` -> ``fp16``,
    ``32-true`` -> ``fp32``)."""
    text = str(value or "")
    if "bf16" in text:
        return "bf16"
    if text.startswith("16"):
        return "fp16"
    if text.startswith(("32", "64")):
        return "fp32" if text.startswith("32") else "fp64"
    return None


def _loss(outputs: Any) -> Any:
    """The loss a training step returned, as Lightning hands it on (a tensor, or a dict's ``loss``)."""
    if isinstance(outputs, dict):
        outputs = outputs.get("loss")
    return outputs.detach() if hasattr(outputs, "detach") else None


def _start_fields(trainer: Any, module: Any) -> dict[str, Any]:
    try:  # inf for a loader without a length and no max_steps; it can raise on odd setups
        total = trainer.estimated_stepping_batches
    except Exception:
        total = None
    params = trainable = 0
    for p in module.parameters():
        params += p.numel()
        trainable += p.numel() if p.requires_grad else 0
    config = getattr(module, "config", None) or getattr(getattr(module, "model", None), "config", None)
    on_gpu = "cuda" in type(trainer.accelerator).__name__.lower()
    return {
        "total_steps": int(total) if isinstance(total, (int, float)) and total == total and total < 2**62 else None,
        "params": params or None,
        "trainable_params": trainable,
        "model_config": config if config is not None and hasattr(config, "__dict__") else None,
        "model_name": type(module).__name__,
        "grad_accum": int(trainer.accumulate_grad_batches),
        "precision": precision(trainer.precision),
        "world_size": int(trainer.world_size),
        "gpus": int(trainer.num_devices) if on_gpu else 0,
        "resumed_step": int(trainer.global_step),
        "loop": f"{type(trainer).__module__.split('.')[0]}.Trainer",
    }


def callback_class(base: type) -> type:
    """fttui's callback class on ``base`` (that Lightning's ``Callback``), built once per base."""
    if base in _CLASSES:
        return _CLASSES[base]

    class FttuiLightningCallback(base):
        """Reports the Trainer it is added to when ``FTTUI_RUN_DIR`` names a run directory."""

        def __init__(self) -> None:
            super().__init__()
            self.run_dir = _rep.run_dir()
            self.rep: Any = None
            self.samples = 0  # this step's, so far
            self.tokens: Any = None  # this step's, so far (a batch of input_ids only)
            self.loss: Any = None
            self.reported = -1  # the global step last reported

        def _fail(self, what: str, exc: BaseException) -> None:
            if self.rep is not None:
                self.rep.active = False
            _rep.log_failure(self.run_dir, f"fttui's Lightning callback ({what})", exc)

        def _reporter(self, trainer: Any) -> Any:
            if self.rep is None and self.run_dir:
                self.rep = _rep.Reporter(self.run_dir, via="lightning", rank=int(trainer.global_rank))
            return self.rep

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            if not self.run_dir:
                return
            try:
                rep = self._reporter(trainer)
                self.reported = int(trainer.global_step)
                rep.start(**_start_fields(trainer, pl_module))
            except Exception as e:
                self._fail("start", e)

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            rep = self.rep
            if rep is None or not rep.active:
                return
            try:
                self.samples += batch_size(batch) or 0
                tokens = batch_tokens(batch)
                if tokens is not None:
                    self.tokens = tokens if self.tokens is None else self.tokens + tokens
                loss = _loss(outputs)
                if loss is not None:
                    self.loss = loss if self.loss is None else self.loss + loss
                step = int(trainer.global_step)
                if step <= self.reported:  # accumulating: the optimizer has not stepped yet
                    return
                self.reported = step
                lr = None
                opts = trainer.optimizers
                if opts:
                    lr = opts[0].param_groups[0].get("lr")
                samples, self.samples = self.samples, 0
                loss, self.loss = self.loss, None
                tokens, self.tokens = self.tokens, None
                rep.step(step, samples=samples, tokens=tokens, loss=loss, lr=lr, epoch=trainer.current_epoch)
            except Exception as e:
                self._fail("step", e)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            if self.rep is not None:
                self.rep.end()

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            try:
                rep = self._reporter(trainer)
                if rep is not None:
                    rep.error(exception)
            except Exception as e:
                self._fail("error", e)

    FttuiLightningCallback.__name__ = FttuiLightningCallback.__qualname__ = CALLBACK_NAME
    _CLASSES[base] = FttuiLightningCallback
    return FttuiLightningCallback


def attach(trainer: Any, base: type) -> Any:
    """Add fttui's callback (on ``base``, that Lightning's ``Callback``) to ``trainer`` unless it
    has one; ``None`` without a run directory."""
    if not _rep.run_dir():
        return None
    callbacks = trainer.callbacks
    if any(type(cb).__name__ == CALLBACK_NAME for cb in callbacks):
        return None
    cb = callback_class(base)()
    callbacks.append(cb)
    return cb
