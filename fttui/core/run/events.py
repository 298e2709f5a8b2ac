"""Event lines (``events.jsonl`` / ``samples.jsonl``): the typed event records, their one
serialisation, a tolerant incremental reader and an atomic appender.

Each event kind is one frozen record (:class:`StepEvent`, :class:`StartEvent`, ...): writers build
the record and write ``record.to_dict()`` (:func:`write_event`), readers turn a line back into its
record with :func:`parse_event`, tolerant of old lines (a missing key reads as ``None``, a key this
fttui does not know is kept in ``extra``). Every line appended goes through fttui's one secret
mask (:func:`fttui.core.base.redact.mask`). Stdlib only and of fttui only that mask: fttui's Trainer
callback (:mod:`fttui.integrations.hf`) loads this file (and the mask) by path into a command's
own Python.
See docs/architecture.md, sections "Events" and "Monitor core".
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

try:  # the reader (not needed where this file is loaded by path: there it only writes)
    from fttui.core.run.jsonl import JsonlTail, parse_line, read_jsonl
except ImportError:  # pragma: no cover
    pass

try:
    from fttui.core.base.redact import mask
except ImportError:  # loaded by path (fttui's Trainer callback in a command's Python): the mask too
    import importlib.util as _util
    import sys as _sys

    _spec = _util.spec_from_file_location(
        "_fttui_redact", os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "base", "redact.py")
    )
    _redact = _util.module_from_spec(_spec)
    _sys.modules[_spec.name] = _redact
    _spec.loader.exec_module(_redact)
    mask = _redact.mask

__all__ = [
    "EV_START",
    "EV_STEP",
    "EV_END",
    "EV_ERROR",
    "EV_EXIT",
    "EVENT_NAMES",
    "SOURCE_WORKER",
    "SOURCE_SUPERVISOR",
    "Event",
    "OtherEvent",
    "PhaseEvent",
    "StartEvent",
    "StepEvent",
    "EndEvent",
    "EvalEvent",
    "SaveEvent",
    "TrackerEvent",
    "ErrorEvent",
    "ExitEvent",
    "ForecastEvent",
    "AttemptEvent",
    "RetryEvent",
    "MemoryWarningEvent",
    "RECORDS",
    "parse_event",
    "write_event",
    "JsonlTail",
    "read_jsonl",
    "append_jsonl",
    "encode_line",
    "parse_line",
]

EV_START = "start"
EV_STEP = "step"
EV_END = "end"
EV_ERROR = "error"
EV_EXIT = "exit"

SOURCE_WORKER = "worker"
SOURCE_SUPERVISOR = "supervisor"
_COMMON = ("event", "t", "rank", "pid", "source")


@dataclass(frozen=True, kw_only=True)
class Event:
    """What every event line has: ``t`` (unix time), ``rank`` (global rank; -1 for the
    supervisor's), ``pid`` (the writing process, written by fttui's Trainer callback: two processes
    claiming one rank, :mod:`fttui.core.run.ranks`), ``source`` (``worker``, ``supervisor``,
    ``callback``, ``injected``, ``log``), and ``extra``: the line's keys this record does not declare (kept, written
    back)."""

    EVENT: ClassVar[str] = ""
    #: leave ``None`` fields out of the line (records whose producers write different keys)
    SPARSE: ClassVar[bool] = False
    t: float | None = None
    rank: int | None = 0
    pid: int | None = None
    source: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def event(self) -> str:
        return self.EVENT

    def fields(self) -> dict[str, Any]:
        """The record's own keys (not the common ones), extras included."""
        out = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("t", "rank", "pid", "source", "extra")
        }
        if self.SPARSE:
            out = {k: v for k, v in out.items() if v is not None}
        return {**out, **self.extra}

    def to_dict(self) -> dict[str, Any]:
        """The event line as a JSON object (the one serialisation)."""
        pid = {} if self.pid is None else {"pid": self.pid}
        return {"event": self.event, "t": self.t, "rank": self.rank, **pid, "source": self.source, **self.fields()}

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> Event:
        """The record of one line; missing keys read as ``None`` (defaults), unknown keys go to
        ``extra``."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in obj.items() if k in names}
        extra = {k: v for k, v in obj.items() if k not in names and k not in _COMMON}
        if "rank" in known and known["rank"] is None:
            known.pop("rank")
        return cls(**known, extra=extra)


@dataclass(frozen=True, kw_only=True)
class OtherEvent(Event):
    """A kind without its own record (supervisor and probe events, kinds of a newer fttui)."""

    name: str = ""

    @property
    def event(self) -> str:
        return self.name

    def fields(self) -> dict[str, Any]:
        return dict(self.extra)

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> Event:
        rec = super().from_dict({k: v for k, v in obj.items() if k != "name"})
        return dataclasses.replace(
            rec,
            name=str(obj.get("event") or ""),
            extra={**rec.extra, **({"name": obj["name"]} if "name" in obj else {})},
        )


@dataclass(frozen=True, kw_only=True)
class PhaseEvent(Event):
    """A startup phase begins (:mod:`fttui.core.run.phases`)."""

    EVENT: ClassVar[str] = "phase"
    phase: str | None = None


@dataclass(frozen=True, kw_only=True)
class StartEvent(Event):
    """Training begins: what runs (docs/architecture.md, "Events"); producers add their own
    evidence (``structure``, ``wrapper``, ``deepspeed``, ``sharding``, ...) in ``extra``."""

    EVENT: ClassVar[str] = "start"
    SPARSE: ClassVar[bool] = True
    config: dict[str, Any] | None = None
    params_total: int | None = None
    params_trainable: int | None = None
    total_steps: int | None = None
    world_size: int | None = None
    micro_batch: int | None = None
    grad_accum: int | None = None
    max_seq_len: int | None = None
    num_samples: int | None = None
    precision: str | None = None
    resumed_step: int | None = None
    model_shape: dict[str, Any] | None = None
    env: dict[str, Any] | None = None
    #: the rank's memory when training begins (the model built, no batch fed yet), MiB: its
    #: virtual size (VmSize) and, on a GPU, the caching allocator's reserved memory; the step's
    #: peak minus these bounds what the batches added (a launched probe's first prediction,
    #: fttui.core.experiments.headroom)
    vm_mb: float | None = None
    torch_reserved_mb: float | None = None


@dataclass(frozen=True, kw_only=True)
class StepEvent(Event):
    """One optimizer step of one rank: cumulative counters, loss, times, memory peaks."""

    EVENT: ClassVar[str] = "step"
    step: int | None = None
    total_steps: int | None = None
    epoch: float | None = None
    samples: int | None = None
    tokens: int | None = None
    tokens_padded: int | None = None
    #: the longest sequence (tokens per sample, padding included) a micro-batch fed so far
    longest_seq: int | None = None
    loss: float | None = None
    lr: float | None = None
    step_time: float | None = None
    train_time: float | None = None
    torch_peak_alloc_mb: float | None = None
    torch_peak_reserved_mb: float | None = None
    torch_alloc_retries: int | None = None
    torch_ooms: int | None = None
    peak_rss_mb: float | None = None
    #: the process's peak address space so far (VmPeak): what a host limit (RLIMIT_AS) is held against
    peak_vm_mb: float | None = None
    # now, at the step's end (the trend: fttui.core.run.memtrend): the caching allocator's
    # allocated and reserved memory, the card's free memory (cudaMemGetInfo), the process's RSS,
    # virtual size and address-space limit (RLIMIT_AS, limits.host_memory); the step's seconds
    # spent fetching its batches (the input pipeline, fttui.core.run.whyslow)
    torch_alloc_mb: float | None = None
    torch_reserved_mb: float | None = None
    cuda_free_mb: float | None = None
    rss_mb: float | None = None
    vm_mb: float | None = None
    vm_limit_mb: float | None = None
    data_wait_s: float | None = None
    # the forecast's step model (fttui.core.results.stepparts): micro-batches so far, the padded tokens
    # so far each times its micro-batch's padded length, the step's seconds in forward and backward
    passes: int | None = None
    tokens_padded_x_len: int | None = None
    pass_time: float | None = None


@dataclass(frozen=True, kw_only=True)
class EndEvent(Event):
    """Training ended on this rank (every rank writes one). With what a fit's headroom needs
    (fttui.core.experiments.headroom): the rank's peak address space (VmPeak, MiB: under
    ``limits.host_memory`` its RLIMIT_AS is the start event's ``limits.rlimit_as_bytes``) and, on a
    GPU, its peak reserved memory and its card's total memory. The worker's pass floor (one
    process, after the last step: :mod:`fttui.worker.passfloor`): the median seconds of a forward
    and backward pass of one sample of ``pass_floor_tokens`` tokens, the passes' fixed cost."""

    EVENT: ClassVar[str] = "end"
    step: int | None = None
    train_time: float | None = None
    samples: int | None = None
    tokens: int | None = None
    tokens_padded: int | None = None
    peak_host_vm_mb: float | None = None
    torch_peak_reserved_mb: float | None = None
    gpu_total_mb: float | None = None
    pass_floor_s: float | None = None
    pass_floor_tokens: int | None = None

    def fields(self) -> dict[str, Any]:
        # these keys only where measured (lines of an older fttui, and scripts, have none)
        out = super().fields()
        for k in ("peak_host_vm_mb", "torch_peak_reserved_mb", "gpu_total_mb", "pass_floor_s", "pass_floor_tokens"):
            if out.get(k) is None:
                out.pop(k, None)
        return out


@dataclass(frozen=True, kw_only=True)
class EvalEvent(Event):
    EVENT: ClassVar[str] = "eval"
    step: int | None = None
    eval_loss: float | None = None
    metrics: dict[str, Any] | None = None
    eval_time: float | None = None


@dataclass(frozen=True, kw_only=True)
class SaveEvent(Event):
    """A save is complete: ``kind`` ``checkpoint`` (resumable) or ``model`` (after training)."""

    EVENT: ClassVar[str] = "save"
    step: int | None = None
    kind: str | None = None
    path: str | None = None
    save_time: float | None = None


@dataclass(frozen=True, kw_only=True)
class TrackerEvent(Event):
    EVENT: ClassVar[str] = "tracker"
    SPARSE: ClassVar[bool] = True
    name: str | None = None
    logged: bool | None = None
    where: str | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class ForecastEvent(Event):
    """The time forecast made at launch (``fttui.core.experiments.forecast``), written by the
    launching process before the supervisor starts: the ETA starts from it, the row keeps it."""

    EVENT: ClassVar[str] = "forecast"
    SPARSE: ClassVar[bool] = True
    run_seconds: float | None = None
    step_seconds: float | None = None
    warmup_seconds: float | None = None
    steps: int | None = None
    calibrated: bool | None = None
    mfu_source: str | None = None


@dataclass(frozen=True, kw_only=True)
class ErrorEvent(Event):
    EVENT: ClassVar[str] = "error"
    kind: str | None = None
    oom_kind: str | None = None
    message: str | None = None
    step: int | None = None
    #: the longest sequence fed so far, the micro-batch being fed when it failed included (an OOM
    #: in a run's first step says which batch did not fit)
    longest_seq: int | None = None
    traceback: Any = None


@dataclass(frozen=True, kw_only=True)
class ExitEvent(Event):
    EVENT: ClassVar[str] = "exit"
    SPARSE: ClassVar[bool] = True
    returncode: int | None = None
    signal: int | None = None
    status: str | None = None


@dataclass(frozen=True, kw_only=True)
class AttemptEvent(Event):
    """Supervisor, first line of a run started to recover from an out of memory
    (:mod:`fttui.core.run.oomretry`): this run is attempt ``attempt`` of the chain begun by
    ``first``, continuing ``previous``, which ran out of memory in step ``oom_step``; the micro
    batch and accumulation went ``batch`` -> ``accum`` (``[before, after]`` each), from the
    checkpoint of step ``from_step`` (0: from the start); ``message`` says it in words."""

    EVENT: ClassVar[str] = "attempt"
    attempt: int | None = None
    first: str | None = None
    previous: str | None = None
    oom_step: int | None = None
    oom_kind: str | None = None
    from_step: int | None = None
    batch: Any = None
    accum: Any = None
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class RetryEvent(Event):
    """Supervisor, last lines of a run that ran out of memory under ``train.on_oom = "shrink"``:
    ``next_run`` (attempt ``attempt``) continues it; ``message`` says how. Written before
    ``status.json``, so a view that sees the end can follow the chain."""

    EVENT: ClassVar[str] = "retry"
    next_run: str | None = None
    attempt: int | None = None
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class MemoryWarningEvent(Event):
    """The supervisor saw a rank's memory rise at a steady rate that reaches its limit within the
    warning horizon (fttui.core.run.memtrend): ``where`` ``card`` or ``host``, ``figure``
    (``reserved``, ``allocated``, ``rss``, ``address space``), ``slope_mb`` per step, ``steps_left``
    to the limit, ``headroom_mb`` left, at ``step`` of rank ``of_rank``; ``message`` in words."""

    EVENT: ClassVar[str] = "memory_warning"
    where: str | None = None
    figure: str | None = None
    of_rank: int | None = None
    step: int | None = None
    slope_mb: float | None = None
    steps_left: int | None = None
    headroom_mb: float | None = None
    message: str | None = None


#: event kind -> its record
RECORDS: dict[str, type[Event]] = {
    c.EVENT: c
    for c in (
        PhaseEvent,
        StartEvent,
        StepEvent,
        EndEvent,
        EvalEvent,
        SaveEvent,
        TrackerEvent,
        ErrorEvent,
        ExitEvent,
        ForecastEvent,
        AttemptEvent,
        RetryEvent,
        MemoryWarningEvent,
    )
}
EVENT_NAMES = tuple(RECORDS)


def parse_event(obj: Any) -> Event | None:
    """The record of one event line (a parsed JSON object); ``None`` when it is no event."""
    if not isinstance(obj, dict) or not isinstance(obj.get("event"), str):
        return None
    return RECORDS.get(obj["event"], OtherEvent).from_dict(obj)


def write_event(path: str | os.PathLike[str], record: Event) -> dict[str, Any]:
    """Append ``record`` to an events file (stamped with the time when it has none); the line as
    written. Values JSON cannot hold are written as their ``str``."""
    if record.t is None:
        record = dataclasses.replace(record, t=time.time())
    obj = mask(record.to_dict())  # the one secret mask, at the write
    _append(path, (json.dumps(obj, separators=(",", ":"), default=str) + "\n").encode("utf-8"))
    return obj


def encode_line(obj: dict[str, Any]) -> bytes:
    """One compact JSON line (with trailing newline) as UTF-8 bytes."""
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode("utf-8")


def append_jsonl(path: str | os.PathLike[str], obj: dict[str, Any]) -> None:
    """Append ``obj`` as one line with a single ``os.write`` on an O_APPEND descriptor.

    Lines written this way by several processes never interleave (the write is one syscall on an
    append-mode descriptor). The file is created with mode 0o600 if missing.
    """
    _append(path, encode_line(mask(obj)))  # the one secret mask, at the write


def _append(path: str | os.PathLike[str], data: bytes) -> None:
    fd = os.open(os.fspath(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        written = os.write(fd, data)
        # A short write on a regular file only happens on a full disk or similar; finish it so the
        # line is at least complete (it may then interleave, which the reader tolerates).
        while written < len(data):
            n = os.write(fd, data[written:])
            if n <= 0:
                break
            written += n
    finally:
        os.close(fd)
