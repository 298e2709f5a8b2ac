"""The step reporter of any training loop: what :mod:`fttui.report` (the public API) and the
Lightning callback (:mod:`fttui.integrations.lightning`) write into the run directory named by
``FTTUI_RUN_DIR``: fttui's own events, as the Trainer callback writes them (docs/architecture.md,
"Events"): ``phase`` (``first-step``) and ``start`` once, one ``step`` per optimizer step of this
process (cumulative samples and tokens, the step's loss, step and training time, peak RSS),
``end`` once (at the latest when the process exits), ``error`` for an exception out of training.

Each event carries this process's rank (``RANK``, else the rank a caller names: Lightning's
``global_rank``) and its pid. Rank 0 writes ``callback.json`` (fttui stops reading the printed log).

Stdlib only at import, and of fttui only :mod:`fttui.core.run.files.events` and
:mod:`fttui.integrations.hf_info` (stdlib only): loaded by path into a command's own Python where
fttui is not importable (the automatic Lightning hook). A failure in here is one line on stderr,
its traceback in the run directory's ``integration.log``; the loop goes on without fttui.
"""

from __future__ import annotations

import atexit
import importlib.util as _util
import json
import os
import sys
import time
import traceback
from typing import Any

__all__ = ["Reporter", "RUN_DIR_ENV", "CALLBACK_MARK", "run_dir", "env_rank", "model_shape_of", "log_failure"]

#: The run directory the events go to (set by ``fttui run``).
RUN_DIR_ENV = "FTTUI_RUN_DIR"
#: Written in the run directory by rank 0 once it reports: fttui stops reading the printed log.
CALLBACK_MARK = "callback.json"


def _by_path(name: str, *parts: str) -> Any:
    """A stdlib-only module of fttui loaded from its file (fttui not importable in this Python)."""
    if name in sys.modules:
        return sys.modules[name]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), *parts)
    spec = _util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"fttui: cannot load {path}", name=name, path=path)
    module = _util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


try:
    from fttui.core.run.files import events as _ev
    from fttui.integrations import hf_info as _info
except ImportError:  # loaded by path into a Python where fttui is not installed
    _ev = _by_path("_fttui_events", os.pardir, "core", "run", "files", "events.py")
    _info = _by_path("_fttui_hf_info", "hf_info.py")


def run_dir() -> str | None:
    """The run directory of ``FTTUI_RUN_DIR`` when it names a folder, else ``None``."""
    path = os.environ.get(RUN_DIR_ENV)
    return path if path and os.path.isdir(path) else None


def env_rank(name: str = "RANK") -> int | None:
    """An integer of the launcher's environment (``RANK``, ``WORLD_SIZE``); ``None`` when unset or
    not a number."""
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def log_failure(where: str | None, what: str, exc: BaseException) -> None:
    """A failure of the reporter: one line on stderr (the run's log), the traceback in
    ``integration.log``; never raises."""
    try:
        print(f"fttui: {what} failed ({type(exc).__name__}: {exc}); training goes on without it", file=sys.stderr)
        if where:
            with open(os.path.join(where, "integration.log"), "a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()}: {what}\n")
                f.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    except Exception:
        pass


def _count(name: str, value: Any) -> int:
    """A step's count (samples, tokens): a whole number >= 0 (a one-element tensor too)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a whole number >= 0 (this step's count), not {value!r}")
    return value


def _number(value: Any) -> float | None:
    """A loss as a float: a number, or a one-element tensor (``.item()``); NaN, or anything else,
    is ``None``."""
    if value is None:
        return None
    if hasattr(value, "detach"):
        value = value.detach()
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    v = float(value)
    return v if v == v else None


def model_shape_of(config: Any) -> dict[str, Any] | None:
    """What fttui's FLOPs per token need (``vocab``, ``hidden``, ``layers``, ``attn_dim``, ``tied``)
    from a model config: a Hugging Face config (or anything with its attribute names), a dict of
    those names, or a dict of fttui's own keys."""
    if config is None:
        return None
    if isinstance(config, dict):
        if {"vocab", "hidden", "layers", "attn_dim"} <= set(config):
            return {k: config[k] for k in ("vocab", "hidden", "layers", "attn_dim", "tied") if k in config}
        config = type("Config", (), dict(config))()

    class _Holder:  # hf_info reads the config off a model
        def __init__(self, config: Any) -> None:
            self.config = config

    holder = _Holder(config)
    return _info.model_shape(holder)


class Reporter:
    """Writes one process's training events into ``run_dir``. ``via``: the events' ``source``
    (``report``: the public API; ``lightning``: the injected Lightning callback). Every method
    swallows its failures (logged once; the reporter then goes quiet)."""

    def __init__(self, run_dir: str, *, via: str, rank: int | None = None) -> None:
        self.run_dir = run_dir
        self.via = via
        self.rank = rank if rank is not None else (env_rank() or 0)
        self.active = True
        self.started = False
        self.ended = False
        self.step_n = 0
        self.samples: int | None = None
        self.tokens: int | None = None
        self.total_steps: int | None = None
        self.t0: float | None = None
        self.mark: float | None = None  # the end of the latest step (perf_counter)
        self.implicit = False  # the start was not reported: the first step began the clock
        self.reported = 0  # steps written
        self.pid = os.getpid()  # a child forked after the start (a data loader's worker) writes no end
        atexit.register(self.end)

    # ------------------------------------------------------------------ writing
    def _emit(self, rec: Any) -> None:
        import dataclasses

        rec = dataclasses.replace(rec, t=time.time(), rank=self.rank, pid=os.getpid(), source=self.via)
        _ev.write_event(os.path.join(self.run_dir, "events.jsonl"), rec)

    def _guard(self, label: str, fn: Any, /, *args: Any, **kwargs: Any) -> None:
        if not self.active:
            return
        try:
            fn(*args, **kwargs)
        except Exception as e:
            self.active = False
            log_failure(self.run_dir, f"fttui's reporter ({label})", e)

    # ------------------------------------------------------------------ the run
    def start(self, **fields: Any) -> None:
        """The ``start`` event (once; later calls do nothing): see :meth:`_start`."""
        if not self.started:
            self._guard("start", self._start, **fields)

    def _start(
        self,
        *,
        total_steps: int | None = None,
        params: int | None = None,
        trainable_params: int | None = None,
        model_config: Any = None,
        model_name: str | None = None,
        batch_size: int | None = None,
        grad_accum: int | None = None,
        precision: str | None = None,
        world_size: int | None = None,
        gpus: int | None = None,
        resumed_step: int = 0,
        loop: str | None = None,
    ) -> None:
        self.started = True
        self.step_n = int(resumed_step)
        self.total_steps = int(total_steps) if total_steps else None
        if self.rank == 0:
            with open(os.path.join(self.run_dir, CALLBACK_MARK), "w", encoding="utf-8") as f:
                json.dump({"pid": os.getpid(), "via": self.via, "t": time.time()}, f)
        self._emit(_ev.PhaseEvent(phase="first-step"))
        world = world_size if world_size is not None else env_rank("WORLD_SIZE")
        shape = model_shape_of(model_config)
        train: dict[str, Any] = {"precision": precision}
        train.update((k, v) for k, v in (("batch_size", batch_size), ("grad_accum", grad_accum)) if v is not None)
        devices = {} if gpus is None else {"devices": {"gpus": int(gpus)}}  # what the row's GPUs per node read
        config: dict[str, Any] = {"model": {"name_or_path": model_name}, "train": train, **devices}
        fields: dict[str, Any] = {
            "config": config,
            "total_steps": self.total_steps,
            "world_size": int(world) if world else None,
            "micro_batch": batch_size,
            "grad_accum": grad_accum,
            "precision": precision,
            "params_total": int(params) if params else None,
            "params_trainable": int(trainable_params if trainable_params is not None else params) if params else None,
            "model_shape": shape,
            "resumed_step": self.step_n,
            "env": _info.environment(),
            "node": os.environ.get("SLURMD_NODENAME") or _node(),
            "vm_mb": _info.proc_memory().get("vm_mb"),
            "integration": {"via": self.via, "counting": True, "trainer": loop},
        }
        self._emit(_ev.record("start", **fields))
        self.t0 = self.mark = time.perf_counter()  # the clock starts once the start is written

    def step(
        self,
        step: int | None = None,
        *,
        samples: int | None = None,
        tokens: int | None = None,
        loss: Any = None,
        lr: float | None = None,
        epoch: float | None = None,
        total_steps: int | None = None,
    ) -> None:
        """One optimizer step: ``samples`` and ``tokens`` this step's (added to this process's
        totals), ``loss`` the step's (a number or a one-element tensor); ``step`` the step's
        number (default: one more than the last)."""
        if not self.active or self.ended:
            return
        if not self.started:  # the clock starts now: this step's own time is unknown
            self.start(total_steps=total_steps)
            self.implicit = True
        self._guard("step", self._step, step, samples, tokens, loss, lr, epoch, total_steps)

    def _step(self, step, samples, tokens, loss, lr, epoch, total_steps) -> None:
        now = time.perf_counter()
        self.step_n = _count("step", step) if step is not None else self.step_n + 1
        if total_steps:
            self.total_steps = int(total_steps)
        if samples is not None:
            self.samples = (self.samples or 0) + _count("samples", samples)
        if tokens is not None:
            self.tokens = (self.tokens or 0) + _count("tokens", tokens)
        # the first step's time is known only when the start was reported before it
        took = None if self.implicit and not self.reported else now - (self.mark or now)
        self.reported += 1
        mem = _info.proc_memory()
        self._emit(
            _ev.StepEvent(
                step=self.step_n,
                total_steps=self.total_steps,
                epoch=float(epoch) if epoch is not None else None,
                samples=self.samples,
                tokens=self.tokens,
                loss=_number(loss),
                lr=float(lr) if lr is not None else None,
                step_time=took,
                train_time=now - self.t0 if self.t0 is not None else None,
                peak_rss_mb=mem.get("peak_rss_mb"),
                peak_vm_mb=mem.get("peak_vm_mb"),
                rss_mb=mem.get("rss_mb"),
                vm_mb=mem.get("vm_mb"),
                vm_limit_mb=mem.get("vm_limit_mb"),
            )
        )
        self.mark = time.perf_counter()

    def end(self) -> None:
        """The ``end`` event (once, after a start; at the process's exit at the latest)."""
        if self.started and not self.ended and self.active and os.getpid() == self.pid:
            self.ended = True
            self._guard("end", self._end)

    def _end(self) -> None:
        self._emit(
            _ev.EndEvent(
                step=self.step_n,
                train_time=time.perf_counter() - self.t0 if self.t0 is not None else None,
                samples=self.samples,
                tokens=self.tokens,
                peak_host_vm_mb=_info.proc_memory().get("peak_vm_mb"),
            )
        )

    def error(self, exc: BaseException) -> None:
        """An ``error`` event for an exception out of training (its OOM kind, when it is one)."""
        if not self.active or isinstance(exc, (KeyboardInterrupt, SystemExit)):
            return
        self._guard("error", self._error, exc)

    def _error(self, exc: BaseException) -> None:
        kind = _info.oom_kind(exc)
        text = str(exc).strip()
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        self._emit(
            _ev.ErrorEvent(
                kind="oom" if kind else "error",
                oom_kind=kind,
                message=(f"{type(exc).__name__}: {first}" if first else type(exc).__name__)[:500],
                step=self.step_n,
                traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])[-2000:],
            )
        )


def _node() -> str:
    import platform

    return platform.node()
