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
fttui. fttui's own training worker reports its runs with this same callback (its ``start`` event
says what the worker knows of its profile: ``start=``), so a script and the worker write the same
events, built as the typed records of :mod:`fttui.core.run.files.events` and serialised there.
Commands fttui runs get the same callback without the line (docs/commands.md): fttui's
``sitecustomize`` (:mod:`fttui.integrations.autoload`) adds it to every ``transformers.Trainer``.

Stdlib and transformers only, and of fttui's core only :mod:`fttui.core.run.files.events` (stdlib
only, with the records, the mask and the line reader it loads): the automatic hook loads this
file into the command's own Python, where fttui may not be importable; then its siblings and the
events module are loaded by path. Whatever fails in here is written to
``integration.log`` in the run
directory and training goes on.
"""

from __future__ import annotations

import importlib.util as _util
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback


def _by_path(name: str, *parts: str):
    """A stdlib-only module of fttui loaded from its file (fttui not importable in this Python)."""
    if name in sys.modules:
        return sys.modules[name]
    path = os.path.join(os.path.dirname(__file__), *parts)
    spec = _util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"fttui: cannot load {path}", name=name, path=path)
    module = _util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


try:
    from fttui.core.run.files import events as _ev
    from fttui.integrations import commwait as _cw
    from fttui.integrations import hangdump as _hd
    from fttui.integrations import hf_info as _info
    from fttui.integrations import hf_marks as _marks
    from fttui.integrations import stackdump as _stk
except ImportError:  # loaded by path into a Python where fttui is not installed
    _ev = _by_path("_fttui_events", os.pardir, "core", "run", "files", "events.py")
    _info = _by_path("_fttui_hf_info", "hf_info.py")
    _stk = _by_path("_fttui_stackdump", "stackdump.py")
    _cw = _by_path("_fttui_commwait", "commwait.py")
    _hd = _by_path("_fttui_hangdump", "hangdump.py")
    _marks = _by_path("_fttui_hf_marks", "hf_marks.py")

__all__ = ["FttuiCallback", "attach", "report_error", "register_stacks", "RUN_DIR_ENV", "CALLBACK_MARK"]

#: The run directory the events go to (set by ``fttui run``).
RUN_DIR_ENV = "FTTUI_RUN_DIR"
#: Written in the run directory once the callback reports: fttui stops reading the printed log.
CALLBACK_MARK = "callback.json"
_CLAIM = "_fttui_callback"  # the trainer attribute naming the callback that reports it


def append_event(run_dir: str, kind: str, /, **fields: Any) -> None:
    """One event of kind ``kind`` in ``run_dir``'s ``events.jsonl``, through its record."""
    _ev.write_event(os.path.join(run_dir, "events.jsonl"), _ev.record(kind, **fields))


def log_failure(run_dir: str | None, what: str, exc: BaseException) -> None:
    """A failure of the integration: one line on stderr (the run's log), the traceback in
    ``integration.log``; never raises."""
    try:
        print(
            f"fttui: {what} failed ({type(exc).__name__}: {exc}); training goes on without it",
            file=sys.stderr,
            flush=True,
        )
        if run_dir:
            with open(os.path.join(run_dir, "integration.log"), "a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()}: {what}\n")
                f.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    except Exception:
        pass


def register_stacks(run_dir: str | None, rank: int | None = None) -> str | None:
    """``fttui stacks``: this process's Python stacks on SIGUSR1 (:mod:`fttui.integrations.stackdump`);
    a failure is logged, never raised."""
    return _stk.register(run_dir, rank, lambda e: log_failure(run_dir, "registering the stack dump (SIGUSR1)", e))


def _rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _world() -> int:
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


class FttuiCallback(TrainerCallback):
    """Writes fttui's events for the Trainer it is added to, when ``FTTUI_RUN_DIR`` (or
    ``run_dir``) names a run directory; otherwise it does nothing. One callback reports a trainer:
    a second one (the line in a script that fttui also injects into) stays silent.

    fttui's worker passes ``start`` (the fields of its ``start`` event, from the trainer),
    ``printer`` (a few progress lines), ``mark=False`` (no ``callback.json``: its log is not
    parsed), ``first_step`` (announce the ``first-step`` phase at ``on_train_begin``: after
    DeepSpeed built its engine), ``end`` (more fields of the ``end`` event, measured once training
    is over: the worker's pass floor) and ``strict`` (a failure in here fails the run instead of being
    logged). ``eval_at_end``: an evaluation follows the last step (unless eval_steps asked one).
    ``train_time`` leaves out evaluations and checkpoint saves (their own events time them)."""

    def __init__(
        self,
        run_dir: str | None = None,
        *,
        via: str = "callback",
        start: Callable[[Any], dict[str, Any]] | None = None,
        printer: Callable[[str], None] | None = None,
        mark: bool = True,
        first_step: bool = True,
        strict: bool = False,
        end: Callable[[Any], dict[str, Any]] | None = None,
    ) -> None:
        self.run_dir = run_dir or os.environ.get(RUN_DIR_ENV) or None
        self.via, self.start, self.printer, self.end = via, start, printer, end
        self.mark, self.first_step, self.strict = mark, first_step, strict
        self.eval_at_end = False
        self.trainer = None
        self.active = False
        self.on_cuda = False
        self.c = _info.Counters()
        self.rank = _rank()
        self.t0: float | None = None
        self.paused = 0.0
        self.mark_t: float | None = None  # end of the latest step, or of the latest pause
        self.step_t0: float | None = None
        self.lr: float | None = None
        self.total_steps: int | None = None
        self.comm = _cw.CLOCK  # the step's seconds blocked in collectives (fttui.integrations.commwait)
        self.comm_timing: str | None = None

    # ------------------------------------------------------------------ binding
    def bind(self, trainer) -> bool:
        """Report ``trainer``: count its micro-batches and mark its training phases (its methods
        wrapped on the instance: :mod:`fttui.integrations.hf_marks`). False when another callback
        reports it."""
        owner = getattr(trainer, _CLAIM, None)
        if owner is not None and owner is not self:
            return False
        if owner is self:
            return True
        setattr(trainer, _CLAIM, self)
        self.trainer = trainer

        def counted(what: str, fn) -> None:  # counting never stops the training (unless strict)
            try:
                fn()
            except Exception as e:
                if self.strict:
                    raise
                log_failure(self.run_dir, what, e)

        _marks.wrap_counting(trainer, self.c, counted)
        _marks.mark_phases(trainer, self.c)
        return True

    def _path(self, name: str) -> str:
        """A file of the run directory (the callback is active only with one)."""
        if self.run_dir is None:
            raise RuntimeError("fttui callback: no run directory")
        return os.path.join(self.run_dir, name)

    def _emit(self, record) -> dict[str, Any]:
        import dataclasses

        # the pid tells two processes that claim one rank apart (fttui.core.run.fold.ranks)
        record = dataclasses.replace(record, t=time.time(), rank=self.rank, pid=os.getpid(), source=self.via)
        try:
            return _ev.write_event(self._path("events.jsonl"), record)
        except Exception as e:
            if self.strict:
                raise
            self.active = False
            log_failure(self.run_dir, f"writing the {record.event} event", e)
            return record.to_dict()

    def _guard(self, name: str, fn, *args) -> None:
        if not self.active:
            return
        try:
            fn(*args)
        except Exception as e:
            if self.strict:
                raise
            log_failure(self.run_dir, f"fttui callback {name}", e)

    def _train_time(self, now: float | None = None) -> float:
        return 0.0 if self.t0 is None else (time.perf_counter() if now is None else now) - self.t0 - self.paused

    # ------------------------------------------------------------------ Trainer events
    def on_train_begin(self, args, state, control, **kw):
        if not self.run_dir or not os.path.isdir(self.run_dir):
            return
        register_stacks(self.run_dir)  # `fttui stacks`: this rank's Python stack on SIGUSR1
        try:
            trainer = self.trainer or _marks.find_trainer()
            if trainer is not None and not self.bind(trainer):
                return  # another fttui callback reports this trainer
            self.active = True
            self.rank = int(getattr(args, "process_index", self.rank) or 0)
            if trainer is not None:
                self._mark_engine(trainer)
            if not _hd.off():  # FTTUI_RANK_TIMING=0: neither
                self._time_collectives(trainer)
            if not _hd.off() and _world() > 1:
                # where a hang is, among ranks: this rank's collectives and stack when fttui asks
                # (fttui.core.run.processes.hang); one process answers SIGUSR1 and py-spy only
                _hd.start(
                    self.run_dir, self.rank, lambda: self.c.step, lambda e: log_failure(self.run_dir, "answering", e)
                )
            self._start(args, state, kw.get("model"))
        except Exception as e:
            self.active = False
            if self.strict:
                raise
            log_failure(self.run_dir, "fttui callback start", e)

    def _mark_engine(self, trainer) -> None:
        """DeepSpeed's engine step as the optimizer phase (:func:`.hf_marks.mark_engine_step`); a failure
        leaves it unmarked, never stops the run (unless strict)."""
        try:
            _marks.mark_engine_step(trainer, self.c)
        except Exception as e:
            if self.strict:
                raise
            log_failure(self.run_dir, "marking the engine's optimizer step", e)

    def _time_collectives(self, trainer) -> None:
        """Time this rank's collectives (gloo; DDP's buckets through the wrapped model's hook)."""
        try:
            self.comm_timing = _cw.install(self.comm, getattr(trainer, "model_wrapped", None))
        except Exception as e:  # the straggler goes unnamed: never stop a run for it
            if self.strict:
                raise
            log_failure(self.run_dir, "timing the collectives", e)

    def _start(self, args, state, model) -> None:
        self.t0 = self.mark_t = time.perf_counter()
        self.total_steps = int(state.max_steps)
        self.c.step = int(state.global_step)  # a resumed run's last finished step
        if self.mark and self.rank == 0:
            with open(self._path(CALLBACK_MARK), "w", encoding="utf-8") as f:
                json.dump({"pid": os.getpid(), "via": self.via, "t": time.time()}, f)
        if self.first_step:
            self._emit(_ev.PhaseEvent(phase="first-step"))
        trainer = self.trainer
        model = getattr(trainer, "model", None) or model
        torch = sys.modules.get("torch")
        self.on_cuda = bool(
            torch is not None and torch.cuda.is_available() and str(getattr(args, "device", "")).startswith("cuda")
        )
        self.c.cuda = self.on_cuda
        if self.start is not None:
            fields = dict(self.start(trainer))
        else:
            fields = _info.start_fields(args, state, trainer, model, self.on_cuda, self.via)
        fields["total_steps"] = self.total_steps
        fields["resumed_step"] = int(state.global_step)
        fields["node"] = os.environ.get("SLURMD_NODENAME") or platform.node()
        fields["comm_timing"] = self.comm_timing
        # the memory before the first batch (a launched probe bounds the batches' share with it)
        mem = _info.proc_memory()
        fields["vm_mb"] = mem.get("vm_mb")
        fields["begin_peak_rss_mb"] = mem.get("peak_rss_mb")  # a resume's load is in it (it loaded before this)
        if self.on_cuda and torch is not None:
            fields["torch_reserved_mb"] = round(torch.cuda.memory_reserved() / 2**20, 1)
        if model is not None and "model_shape" not in fields:
            try:
                fields["model_shape"] = _info.model_shape(model)
            except Exception as e:  # MFU goes without it: never stop a run for it
                fields["model_shape_error"] = repr(e)[:300]
        self._emit(_ev.record("start", **fields))

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

    def on_pre_optimizer_step(self, args, state, control, **kw):
        self.c.phase = "optimizer"

    def on_optimizer_step(self, args, state, control, **kw):
        self.c.phase = None  # the step's scheduler, zero_grad and logging: no phase of their own

    def on_step_end(self, args, state, control, **kw):
        self._guard("step", self._step, state, control)

    def _step(self, state, control) -> None:
        now = time.perf_counter()
        loss = self.c.pop_loss()
        peak_alloc = peak_res = retries = ooms = alloc = res = free = None
        if self.on_cuda:
            import torch

            # one call: max_memory_allocated / max_memory_reserved each read memory_stats() too
            stats = torch.cuda.memory_stats()
            peak_alloc = round(stats.get("allocated_bytes.all.peak", 0) / 2**20, 1)
            peak_res = round(stats.get("reserved_bytes.all.peak", 0) / 2**20, 1)
            alloc = round(stats.get("allocated_bytes.all.current", 0) / 2**20, 1)
            res = round(stats.get("reserved_bytes.all.current", 0) / 2**20, 1)
            retries, ooms = stats.get("num_alloc_retries"), stats.get("num_ooms")
            free = round(torch.cuda.mem_get_info()[0] / 2**20, 1)  # the card's, every process's use counted
        mem = _info.proc_memory()
        wait, self.c.data_wait = self.c.data_wait, 0.0
        blocked, joined = self.comm.take()
        counting = self.trainer is not None
        step = self.c.step = int(state.global_step)
        ev = self._emit(
            _ev.StepEvent(
                step=step,
                total_steps=self.total_steps,
                epoch=float(state.epoch) if state.epoch is not None else None,
                samples=self.c.samples if counting else None,
                tokens=self.c.tokens if counting else None,
                tokens_padded=self.c.tokens_padded if counting else None,
                loss=loss,
                lr=self.lr,
                longest_seq=(self.c.longest_seq or None) if counting else None,
                step_time=now - (self.step_t0 if self.step_t0 is not None else now),
                train_time=self._train_time(now),
                torch_peak_alloc_mb=peak_alloc,
                torch_peak_reserved_mb=peak_res,
                torch_alloc_retries=retries,
                torch_ooms=ooms,
                peak_rss_mb=mem.get("peak_rss_mb"),
                peak_vm_mb=mem.get("peak_vm_mb"),
                torch_alloc_mb=alloc,
                torch_reserved_mb=res,
                cuda_free_mb=free,
                rss_mb=mem.get("rss_mb"),
                vm_mb=mem.get("vm_mb"),
                vm_limit_mb=mem.get("vm_limit_mb"),
                data_wait_s=round(wait, 4) if counting else None,
                passes=self.c.passes if counting else None,
                pass_time=round(self.c.pop_pass_time(), 6) if counting else None,
                tokens_padded_x_len=self.c.tokens_padded_x_len if counting else None,
                comm_wait_s=round(blocked, 4) if self.comm_timing else None,
                collectives=joined if self.comm_timing else None,
            )
        )
        if self.eval_at_end and state.global_step >= state.max_steps:
            control.should_evaluate = True
        self.mark_t = time.perf_counter()
        every = max(1, (self.total_steps or 1) // 20)
        if self.printer is not None and (step in (1, self.total_steps) or step % every == 0):
            self.printer(
                f"step {step}/{self.total_steps} loss {loss if loss is None else round(loss, 4)} "
                f"step_time {ev['step_time']:.3f}s"
            )

    def _pause(self) -> float:
        """Seconds since the step ended (or the previous pause), left out of the training time."""
        now = time.perf_counter()
        took = now - self.mark_t if self.mark_t is not None else 0.0
        self.comm.take()  # what an evaluation or a save joined is no step's
        self.paused += took
        self.mark_t = now
        return took

    def on_evaluate(self, args, state, control, metrics=None, **kw):
        self._guard("eval", self._eval, state, metrics)

    def _eval(self, state, metrics) -> None:
        took = self._pause()
        if not state.is_world_process_zero:
            return
        metrics = dict(metrics or {})
        loss = metrics.get("eval_loss")
        self._emit(
            _ev.EvalEvent(
                step=int(state.global_step),
                eval_loss=float(loss) if isinstance(loss, (int, float)) else None,
                metrics={k: v for k, v in metrics.items() if isinstance(v, (int, float, str))},
                eval_time=round(took, 3),
            )
        )
        if self.printer is not None:
            self.printer(f"eval at step {state.global_step}: loss {loss if loss is None else round(loss, 4)}")

    def on_save(self, args, state, control, **kw):
        self._guard("save", self._save, args, state)

    def _save(self, args, state) -> None:
        took = self._pause()
        if state.is_world_process_zero:
            self._emit(
                _ev.SaveEvent(
                    step=int(state.global_step),
                    kind="checkpoint",
                    save_time=round(took, 3),
                    path=os.path.join(args.output_dir, f"checkpoint-{state.global_step}"),
                    peak_rss_mb=_info.proc_memory().get("peak_rss_mb"),
                )
            )

    def on_train_end(self, args, state, control, **kw):
        self._guard("end", self._end, state)

    def _end(self, state) -> None:
        counting, train_time = self.trainer is not None, self._train_time()
        more = self.end(self.trainer) if self.end is not None and counting else {}
        peak_res = total = None
        if self.on_cuda:  # what a fit's headroom needs (fttui.core.experiments.headroom)
            import torch

            peak_res = round(torch.cuda.max_memory_reserved() / 2**20, 1)
            total = round(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / 2**20, 1)
        self._emit(
            _ev.EndEvent(
                step=int(state.global_step),
                train_time=train_time,
                **more,
                samples=self.c.samples if counting else None,
                tokens=self.c.tokens if counting else None,
                tokens_padded=self.c.tokens_padded if counting else None,
                peak_host_vm_mb=_info.proc_memory().get("peak_vm_mb"),
                torch_peak_reserved_mb=peak_res,
                gpu_total_mb=total,
            )
        )
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
    its own): kind ``oom`` with its OOM kind, or ``error``; the step it happened after, and the
    training phase the rank was in (``phase``, ``phase_step``: the callback's counters)."""
    cb = getattr(trainer, _CLAIM, None)
    run_dir = getattr(cb, "run_dir", None) or os.environ.get(RUN_DIR_ENV)
    if not run_dir or isinstance(exc, (KeyboardInterrupt, SystemExit)):
        return
    try:
        kind = _info.oom_kind(exc)
        text = str(exc).strip()
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        state = getattr(trainer, "state", None)
        counters = getattr(cb, "c", None) if cb is not None else None
        _ev.write_event(
            os.path.join(run_dir, "events.jsonl"),
            _ev.ErrorEvent(
                rank=_rank(),
                pid=os.getpid(),
                source=getattr(cb, "via", "injected"),
                kind="oom" if kind else "error",
                oom_kind=kind,
                message=(f"{type(exc).__name__}: {first}" if first else type(exc).__name__)[:500],
                step=int(getattr(state, "global_step", 0) or 0),
                longest_seq=counters.fed_seq() if counters is not None else None,
                phase=counters.phase if counters is not None else None,
                phase_step=counters.phase_step() if counters is not None and counters.phase else None,
                traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])[-2000:],
            ),
        )
    except Exception as e:
        log_failure(run_dir, "reporting the training's error", e)
