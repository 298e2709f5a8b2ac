"""fttui's Trainer callback: a Hugging Face Trainer script gets fttui's panels with one line.

    from fttui.integrations.hf import FttuiCallback
    trainer.add_callback(FttuiCallback())          # or Trainer(..., callbacks=[FttuiCallback()])

When the environment variable ``FTTUI_RUN_DIR`` names a run directory (``fttui run -- python
train.py`` sets it), the callback writes fttui's events there, in the worker's format
(docs/architecture.md, "Events"): ``phase`` (``first-step``), ``start`` (the model, the method,
batch, precision, parameters, the model's shape for MFU, versions), one ``step`` per optimizer
step and process (samples, non-padding and padded tokens, loss, learning rate, step time,
training time, peak CUDA memory and retries, peak RSS), ``eval``, ``save`` (checkpoints) and
``end``. Without the variable it does nothing, so the line can stay in a script run without
fttui. Commands fttui runs get the same callback without the line (docs/commands.md): fttui's
``sitecustomize`` (:mod:`fttui.integrations.autoload`) adds it to every ``transformers.Trainer``.

Stdlib and transformers only, never fttui's core: the automatic hook loads this one file into
the command's own Python. Whatever fails in here is written to ``integration.log`` in the run
directory and training goes on.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any

from transformers import TrainerCallback

try:
    from fttui.integrations import hf_info as _info
except ImportError:  # loaded by path into a Python where fttui is not installed: its sibling too
    import importlib.util as _util

    _spec = _util.spec_from_file_location("_fttui_hf_info", os.path.join(os.path.dirname(__file__), "hf_info.py"))
    _info = _util.module_from_spec(_spec)
    _spec.loader.exec_module(_info)

try:
    from fttui.core.base.redact import mask as _mask
except ImportError:  # the same: fttui's one secret mask, by path (stdlib only)
    import importlib.util as _util

    _rspec = _util.spec_from_file_location(
        "_fttui_redact", os.path.join(os.path.dirname(__file__), os.pardir, "core", "base", "redact.py"))
    _redact = _util.module_from_spec(_rspec)
    _rspec.loader.exec_module(_redact)
    _mask = _redact.mask

__all__ = ["FttuiCallback", "attach", "report_error", "RUN_DIR_ENV", "CALLBACK_MARK"]

#: The run directory the events go to (set by ``fttui run``).
RUN_DIR_ENV = "FTTUI_RUN_DIR"
#: Written in the run directory once the callback reports: fttui stops reading the printed log.
CALLBACK_MARK = "callback.json"
_CLAIM = "_fttui_callback"  # the trainer attribute naming the callback that reports it


def append_event(run_dir: str, obj: dict[str, Any]) -> None:
    """One JSON line, one ``os.write`` on an O_APPEND descriptor (lines of several processes never
    interleave), as fttui's own writers do."""
    data = (json.dumps(_mask(obj), separators=(",", ":"), default=str) + "\n").encode()
    fd = os.open(os.path.join(run_dir, "events.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def log_failure(run_dir: str | None, what: str, exc: BaseException) -> None:
    """A failure of the integration: one line on stderr (the run's log), the traceback in
    ``integration.log``; never raises."""
    try:
        print(f"fttui: {what} failed ({type(exc).__name__}: {exc}); training goes on without it",
              file=sys.stderr, flush=True)
        if run_dir:
            with open(os.path.join(run_dir, "integration.log"), "a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()}: {what}\n")
                f.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    except Exception:
        pass


def _rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _find_trainer():
    """The Trainer whose training loop calls this callback (a frame above it), else ``None``."""
    try:
        from transformers import Trainer
    except Exception:
        return None
    frame = sys._getframe(1)
    for _ in range(12):
        if frame is None:
            return None
        obj = frame.f_locals.get("self")
        if isinstance(obj, Trainer):
            return obj
        frame = frame.f_back
    return None


class _Counters:
    """Samples, tokens and the step's loss, counted per micro-batch in ``training_step``."""

    def __init__(self) -> None:
        self.samples = 0
        self.tokens = 0
        self.tokens_padded = 0
        self.loss = None
        self.fetch_t0: float | None = None

    def add(self, inputs, loss) -> None:
        ids = inputs.get("input_ids") if hasattr(inputs, "get") else None
        if ids is not None and hasattr(ids, "shape") and len(ids.shape) >= 1:
            self.samples += int(ids.shape[0])
            self.tokens_padded += int(ids.numel())
            mask = inputs.get("attention_mask")
            self.tokens += int(mask.sum().item()) if mask is not None else int(ids.numel())
        if loss is not None and hasattr(loss, "detach"):
            v = loss.detach().float()
            self.loss = v if self.loss is None else self.loss + v

    def pop_loss(self) -> float | None:
        if self.loss is None:
            return None
        v, self.loss = float(self.loss.item()), None
        return v if v == v else None  # NaN -> null


class FttuiCallback(TrainerCallback):
    """Writes fttui's events for the Trainer it is added to, when ``FTTUI_RUN_DIR`` (or
    ``run_dir``) names a run directory; otherwise it does nothing. One callback reports a trainer:
    a second one (the line in a script that fttui also injects into) stays silent."""

    def __init__(self, run_dir: str | None = None, *, via: str = "callback") -> None:
        self.run_dir = run_dir or os.environ.get(RUN_DIR_ENV) or None
        self.via = via
        self.trainer = None
        self.active = False
        self.c = _Counters()
        self.rank = _rank()
        self.t0: float | None = None
        self.paused = 0.0
        self.mark: float | None = None
        self.step_t0: float | None = None
        self.lr: float | None = None
        self.total_steps: int | None = None

    # ------------------------------------------------------------------ binding
    def bind(self, trainer) -> bool:
        """Report ``trainer``: count its micro-batches (its ``training_step`` and
        ``get_batch_samples``, wrapped on the instance). False when another callback reports it."""
        owner = getattr(trainer, _CLAIM, None)
        if owner is not None and owner is not self:
            return False
        if owner is self:
            return True
        setattr(trainer, _CLAIM, self)
        self.trainer = trainer
        step_fn, fetch_fn, c = trainer.training_step, trainer.get_batch_samples, self.c

        def training_step(model, inputs, *args, **kwargs):
            loss = step_fn(model, inputs, *args, **kwargs)
            try:
                c.add(inputs, loss)
            except Exception as e:
                log_failure(self.run_dir, "counting a micro-batch", e)
            return loss

        def get_batch_samples(*args, **kwargs):
            c.fetch_t0 = time.perf_counter()  # a step's batches are fetched before on_step_begin
            return fetch_fn(*args, **kwargs)

        trainer.training_step = training_step
        trainer.get_batch_samples = get_batch_samples
        return True

    def _emit(self, event: str, **fields: Any) -> None:
        # the pid tells two processes that claim one rank apart (fttui.core.run.ranks)
        obj = {"event": event, "t": time.time(), "rank": self.rank, "pid": os.getpid(), "source": self.via, **fields}
        try:
            append_event(self.run_dir, obj)
        except Exception as e:
            self.active = False
            log_failure(self.run_dir, f"writing the {event} event", e)

    def _guard(self, name: str, fn, *args) -> None:
        if not self.active:
            return
        try:
            fn(*args)
        except Exception as e:
            log_failure(self.run_dir, f"fttui callback {name}", e)

    # ------------------------------------------------------------------ Trainer events
    def on_train_begin(self, args, state, control, **kw):
        if not self.run_dir or not os.path.isdir(self.run_dir):
            return
        try:
            trainer = self.trainer or _find_trainer()
            if trainer is not None and not self.bind(trainer):
                return  # another fttui callback reports this trainer
            self.active = True
            self.rank = int(getattr(args, "process_index", self.rank) or 0)
            self._start(args, state, kw.get("model"))
        except Exception as e:
            self.active = False
            log_failure(self.run_dir, "fttui callback start", e)

    def _start(self, args, state, model) -> None:
        self.t0 = self.mark = time.perf_counter()
        self.total_steps = int(state.max_steps)
        if self.rank == 0:
            mark = os.path.join(self.run_dir, CALLBACK_MARK)
            with open(mark, "w", encoding="utf-8") as f:
                json.dump({"pid": os.getpid(), "via": self.via, "t": time.time()}, f)
        self._emit("phase", phase="first-step")
        trainer = self.trainer
        model = getattr(trainer, "model", None) or model
        precision = "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else "fp32"
        torch = sys.modules.get("torch")
        on_cuda = bool(torch is not None and torch.cuda.is_available() and str(getattr(args, "device", "")).startswith("cuda"))
        fields: dict[str, Any] = {
            "config": {
                "method": _info.method(model) if model is not None else None,
                "sharding": _info.sharding(trainer) if trainer is not None else None,
                "model": {"name_or_path": _info.model_name(model) if model is not None else None},
                "train": {"batch_size": args.per_device_train_batch_size, "grad_accum": args.gradient_accumulation_steps,
                          "precision": precision, "gradient_checkpointing": bool(args.gradient_checkpointing),
                          "lr": args.learning_rate, "max_steps": int(state.max_steps)},
                "devices": {"gpus": int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if on_cuda else 0,
                            "nodes": max(1, int(args.world_size) // int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))},
            },
            "total_steps": self.total_steps, "world_size": int(args.world_size),
            "micro_batch": args.per_device_train_batch_size, "grad_accum": args.gradient_accumulation_steps,
            "precision": precision, "resumed_step": int(state.global_step), "env": _info.environment(),
            "integration": {"via": self.via, "counting": trainer is not None,
                            "trainer": type(trainer).__name__ if trainer is not None else None},
        }
        if model is not None:
            fields["params_total"], fields["params_trainable"] = _info.params(model)
            fields["model_shape"] = _info.model_shape(model)
        dataset = getattr(trainer, "train_dataset", None)
        try:
            fields["num_samples"] = len(dataset) if dataset is not None else None
        except TypeError:
            fields["num_samples"] = None
        self.on_cuda = on_cuda
        self._emit("start", **fields)

    def on_step_begin(self, args, state, control, **kw):
        if not self.active:
            return
        self.step_t0 = self.c.fetch_t0 if self.c.fetch_t0 is not None else time.perf_counter()
        self.c.fetch_t0 = None
        try:
            opt = kw.get("optimizer")
            self.lr = float(opt.param_groups[0]["lr"]) if opt is not None else None
        except Exception:
            self.lr = None

    def on_step_end(self, args, state, control, **kw):
        self._guard("step", self._step, state)

    def _step(self, state) -> None:
        now = time.perf_counter()
        peak_alloc = peak_res = retries = ooms = None
        if getattr(self, "on_cuda", False):
            import torch

            stats = torch.cuda.memory_stats()
            peak_alloc = round(stats.get("allocated_bytes.all.peak", 0) / 2**20, 1)
            peak_res = round(stats.get("reserved_bytes.all.peak", 0) / 2**20, 1)
            retries, ooms = stats.get("num_alloc_retries"), stats.get("num_ooms")
        counting = self.trainer is not None
        self._emit("step", step=int(state.global_step), total_steps=self.total_steps,
                   epoch=float(state.epoch) if state.epoch is not None else None,
                   samples=self.c.samples if counting else None, tokens=self.c.tokens if counting else None,
                   tokens_padded=self.c.tokens_padded if counting else None, loss=self.c.pop_loss(), lr=self.lr,
                   step_time=now - (self.step_t0 if self.step_t0 is not None else now),
                   train_time=now - self.t0 - self.paused, torch_peak_alloc_mb=peak_alloc,
                   torch_peak_reserved_mb=peak_res, torch_alloc_retries=retries, torch_ooms=ooms,
                   peak_rss_mb=_info.peak_rss_mb())
        self.mark = time.perf_counter()

    def _pause(self) -> float:
        """Seconds since the step ended (or the previous pause), left out of the training time."""
        now = time.perf_counter()
        took = now - self.mark if self.mark is not None else 0.0
        self.paused += took
        self.mark = now
        return took

    def on_evaluate(self, args, state, control, metrics=None, **kw):
        self._guard("eval", self._eval, state, metrics)

    def _eval(self, state, metrics) -> None:
        took = self._pause()
        if not state.is_world_process_zero:
            return
        metrics = dict(metrics or {})
        loss = metrics.get("eval_loss")
        self._emit("eval", step=int(state.global_step), eval_loss=float(loss) if isinstance(loss, (int, float)) else None,
                   metrics={k: v for k, v in metrics.items() if isinstance(v, (int, float, str))},
                   eval_time=round(took, 3))

    def on_save(self, args, state, control, **kw):
        self._guard("save", self._save, args, state)

    def _save(self, args, state) -> None:
        took = self._pause()
        if state.is_world_process_zero:
            self._emit("save", step=int(state.global_step), kind="checkpoint",
                       path=os.path.join(args.output_dir, f"checkpoint-{state.global_step}"), save_time=round(took, 3))

    def on_train_end(self, args, state, control, **kw):
        self._guard("end", self._end, state)

    def _end(self, state) -> None:
        counting = self.trainer is not None
        self._emit("end", step=int(state.global_step), train_time=time.perf_counter() - self.t0 - self.paused,
                   samples=self.c.samples if counting else None, tokens=self.c.tokens if counting else None,
                   tokens_padded=self.c.tokens_padded if counting else None)
        self.active = False


def attach(trainer, via: str = "injected") -> FttuiCallback | None:
    """Add an fttui callback to ``trainer`` unless one reports it already (what the automatic
    hook does for every Trainer it sees); ``None`` without a run directory."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir:
        return None
    for cb in trainer.callback_handler.callbacks:
        if type(cb).__name__ == "FttuiCallback":  # the script's own line (maybe another copy of this module)
            return None
    cb = FttuiCallback(run_dir, via=via)
    cb.bind(trainer)
    trainer.add_callback(cb)
    return cb


def report_error(trainer, exc: BaseException) -> None:
    """An ``error`` event for an exception out of ``trainer.train()`` (what the worker writes for
    its own): kind ``oom`` with its OOM kind, or ``error``; the step it happened after."""
    cb = getattr(trainer, _CLAIM, None)
    run_dir = getattr(cb, "run_dir", None) or os.environ.get(RUN_DIR_ENV)
    if not run_dir or isinstance(exc, (KeyboardInterrupt, SystemExit)):
        return
    try:
        kind = _info.oom_kind(exc)
        text = str(exc).strip()
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        state = getattr(trainer, "state", None)
        append_event(run_dir, {
            "event": "error", "t": time.time(), "rank": _rank(), "pid": os.getpid(), "source": getattr(cb, "via", "injected"),
            "kind": "oom" if kind else "error", "oom_kind": kind,
            "message": (f"{type(exc).__name__}: {first}" if first else type(exc).__name__)[:500],
            "step": int(getattr(state, "global_step", 0) or 0),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])[-2000:],
        })
    except Exception as e:
        log_failure(run_dir, "reporting the training's error", e)
