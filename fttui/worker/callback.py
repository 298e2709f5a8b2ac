"""Event emission: the Trainer subclass that counts samples/tokens and the callback that writes
``start`` / ``step`` / ``end`` events (docs/architecture.md, "Events")."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import time
from typing import Any, Callable

from transformers import Trainer, TrainerCallback

# the architecture numbers FLOPs per token need, read as the Trainer callback for scripts reads them
from fttui.integrations.hf_info import model_shape


class Counters:
    """Per-rank cumulative counters, updated per micro-batch by :class:`CountingTrainer`."""

    def __init__(self) -> None:
        self.samples = 0
        self.tokens_padded = 0
        self._tokens = 0  # settled ints
        self._tokens_dev = None  # pending device tensor (avoid a sync per micro-batch)
        self._loss_dev = None  # sum of this step's micro-batch losses (already / grad_accum)
        self.fetch_t0: float | None = None
        self.step = 0  # last finished optimizer step (for error events)

    def add_batch(self, inputs: dict[str, Any]) -> None:
        ids = inputs.get("input_ids")
        mask = inputs.get("attention_mask")
        if ids is None:
            return
        self.samples += int(ids.shape[0])
        self.tokens_padded += int(ids.numel())
        if mask is not None:
            s = mask.detach().sum()
            self._tokens_dev = s if self._tokens_dev is None else self._tokens_dev + s
        else:
            self._tokens += int(ids.numel())

    def add_loss(self, loss) -> None:
        loss = loss.detach().float()
        self._loss_dev = loss if self._loss_dev is None else self._loss_dev + loss

    @property
    def tokens(self) -> int:
        if self._tokens_dev is not None:
            self._tokens += int(self._tokens_dev.item())
            self._tokens_dev = None
        return self._tokens

    def pop_loss(self) -> float | None:
        if self._loss_dev is None:
            return None
        v = float(self._loss_dev.item())
        self._loss_dev = None
        return v


class CountingTrainer(Trainer):
    """Trainer that counts samples / tokens of each micro-batch and captures the step loss."""

    def __init__(self, *args: Any, counters: Counters, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.counters = counters
        for cb in self.callback_handler.callbacks:  # the start event reports what this trainer runs
            if isinstance(cb, EventCallback):
                cb.trainer = self

    def get_batch_samples(self, *args: Any, **kwargs: Any):
        # The batches of a step are fetched before on_step_begin: time the step from here.
        self.counters.fetch_t0 = time.perf_counter()
        return super().get_batch_samples(*args, **kwargs)

    def training_step(self, model, inputs, num_items_in_batch=None):
        self.counters.add_batch(inputs)
        loss = super().training_step(model, inputs, num_items_in_batch)
        # The returned loss is already divided for gradient accumulation (or normalised by the
        # token count of the whole step), so the sum over the step's micro-batches is the step loss.
        self.counters.add_loss(loss)
        return loss


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "processor\t: ")) and ":" in line:
                    val = line.split(":", 1)[1].strip()
                    if val and not val.isdigit():
                        return val
    except OSError:
        pass
    return platform.processor() or platform.machine() or None


def _ram_total_mb() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _driver() -> str | None:
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
            first = f.readline()
        for tok in first.split():
            if tok[:1].isdigit() and "." in tok:
                return tok
    except OSError:
        pass
    return None


def environment() -> dict[str, Any]:
    import torch

    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": p.name, "mem_total_mb": int(p.total_memory // (1024 * 1024))})
    return {
        "python": platform.python_version(),
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "peft": _version("peft"),
        "accelerate": _version("accelerate"),
        "bitsandbytes": _version("bitsandbytes"),
        "deepspeed": _version("deepspeed"),
        "cuda": torch.version.cuda,
        "gpus": gpus,
        "gpu_names": [g["name"] for g in gpus],
        "driver": _driver(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "ram_total_mb": _ram_total_mb(),
        "hostname": socket.gethostname(),
    }


def _peak_rss_mb() -> float | None:
    """This process's peak resident set (VmHWM), in MB."""
    try:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


class EventCallback(TrainerCallback):
    """Emits ``start`` (on_train_begin), ``step`` (on_step_end), ``eval`` (on_evaluate), ``save``
    (on_save, a checkpoint) and ``end`` (on_train_end); ``eval`` and ``save`` from the lowest rank.

    The ``start`` event adds :func:`fttui.worker.runtime.runtime_info` of the trainer (``wrapper``,
    ``optimizer``, ``distributed``, ``deepspeed``) when the trainer is a :class:`CountingTrainer`,
    and ``resumed_step``, the optimizer step training goes on from (0 for a fresh run).
    ``train_time`` leaves out the evaluations and checkpoint saves (their own events say how long
    they took), so the rates stay those of training. With ``eval_at_end`` the last step is
    followed by an evaluation (unless the Trainer's eval_steps already asked for one)."""

    def __init__(self, emit: Callable[..., Any], counters: Counters, start_fields: dict[str, Any],
                 on_cuda: bool, printer: Callable[[str], None] | None = None) -> None:
        self.emit, self.c, self.start_fields, self.on_cuda = emit, counters, start_fields, on_cuda
        self.printer = printer
        self.trainer = None  # set by CountingTrainer: evidence of the optimizer / engine in use
        self.t0 = None
        self.step_t0 = None
        self.lr = None
        self.total_steps = None
        self.eval_at_end = False
        self.paused = 0.0  # seconds spent in evaluations and checkpoint saves
        self._mark: float | None = None  # end of the latest step, or of the latest pause

    def _train_time(self, now: float | None = None) -> float:
        if self.t0 is None:
            return 0.0
        return (time.perf_counter() if now is None else now) - self.t0 - self.paused

    def _pause(self) -> float:
        """Seconds since the step ended (or the previous pause), now counted as paused."""
        now = time.perf_counter()
        took = now - self._mark if self._mark is not None else 0.0
        self.paused += took
        self._mark = now
        return took

    def on_train_begin(self, args, state, control, **kw):
        self.t0 = time.perf_counter()
        self.total_steps = int(state.max_steps)
        fields = dict(self.start_fields)
        fields["total_steps"] = self.total_steps
        fields["resumed_step"] = int(state.global_step)
        if self.trainer is not None:
            try:
                from .runtime import runtime_info

                fields.update(runtime_info(self.trainer))
            except Exception as e:  # evidence only: never stop a run for it
                fields["runtime_info_error"] = repr(e)[:300]
            try:
                fields["model_shape"] = model_shape(self.trainer.model)
            except Exception as e:  # MFU goes without it: never stop a run for it
                fields["model_shape_error"] = repr(e)[:300]
        self.emit("start", **fields)

    def on_step_begin(self, args, state, control, **kw):
        self.step_t0 = self.c.fetch_t0 if self.c.fetch_t0 is not None else time.perf_counter()
        self.c.fetch_t0 = None
        opt = kw.get("optimizer")
        try:
            self.lr = float(opt.param_groups[0]["lr"]) if opt is not None else None
        except (AttributeError, IndexError, KeyError, TypeError, ValueError):
            self.lr = None

    def on_step_end(self, args, state, control, **kw):
        now = time.perf_counter()
        loss = self.c.pop_loss()
        peak_alloc = peak_res = retries = ooms = None
        if self.on_cuda:
            import torch

            # one call: max_memory_allocated / max_memory_reserved each read memory_stats() too
            stats = torch.cuda.memory_stats()
            peak_alloc = round(stats.get("allocated_bytes.all.peak", 0) / 2**20, 1)
            peak_res = round(stats.get("reserved_bytes.all.peak", 0) / 2**20, 1)
            retries, ooms = stats.get("num_alloc_retries"), stats.get("num_ooms")
        self.c.step = int(state.global_step)
        ev = self.emit(
            "step",
            step=int(state.global_step),
            total_steps=self.total_steps,
            epoch=float(state.epoch) if state.epoch is not None else None,
            samples=self.c.samples,
            tokens=self.c.tokens,
            tokens_padded=self.c.tokens_padded,
            loss=loss if loss is None or loss == loss else None,  # NaN -> null (JSON)
            lr=self.lr,
            step_time=now - (self.step_t0 if self.step_t0 is not None else now),
            train_time=self._train_time(now),
            torch_peak_alloc_mb=peak_alloc,
            torch_peak_reserved_mb=peak_res,
            torch_alloc_retries=retries,
            torch_ooms=ooms,
            peak_rss_mb=_peak_rss_mb(),
        )
        if self.eval_at_end and state.global_step >= state.max_steps:
            control.should_evaluate = True
        self._mark = time.perf_counter()
        every = max(1, (self.total_steps or 1) // 20)
        if self.printer is not None and (ev["step"] in (1, self.total_steps) or ev["step"] % every == 0):
            self.printer(f"step {ev['step']}/{self.total_steps} loss {loss if loss is None else round(loss, 4)} "
                         f"step_time {ev['step_time']:.3f}s")

    def on_evaluate(self, args, state, control, metrics=None, **kw):
        took = self._pause()
        if not state.is_world_process_zero:
            return
        metrics = dict(metrics or {})
        loss = metrics.get("eval_loss")
        self.emit("eval", step=int(state.global_step), eval_loss=float(loss) if isinstance(loss, (int, float)) else None,
                  metrics={k: v for k, v in metrics.items() if isinstance(v, (int, float, str))},
                  eval_time=round(took, 3))
        if self.printer is not None:
            self.printer(f"eval at step {state.global_step}: loss {loss if loss is None else round(loss, 4)}")

    def on_save(self, args, state, control, **kw):
        took = self._pause()
        if state.is_world_process_zero:
            self.emit("save", step=int(state.global_step), kind="checkpoint",
                      path=os.path.join(args.output_dir, f"checkpoint-{state.global_step}"), save_time=round(took, 3))

    def on_train_end(self, args, state, control, **kw):
        self.emit("end", step=int(state.global_step), train_time=self._train_time(), samples=self.c.samples,
                  tokens=self.c.tokens, tokens_padded=self.c.tokens_padded)
