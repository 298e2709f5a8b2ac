"""The event records of a run directory's ``events.jsonl``: one frozen dataclass per event kind,
every kind fttui writes included (the worker's and fttui's Trainer callback's, the supervisor's,
the probe worker's), and :class:`UnknownEvent` for a kind this fttui does not know (a newer
fttui's): kept, never dropped.

A record is one line: :meth:`Event.to_dict` is its one serialisation and :meth:`Event.from_dict`
its tolerant reading (a missing key reads as ``None``, or the field's default; a key the record
does not declare is kept in ``extra`` and written back). Turning lines into records, and records
into lines, is :mod:`fttui.core.run.files.events`'s (the one module that parses event lines); folds
``match`` on these classes. docs/architecture.md, "Events".

Stdlib only, importing nothing of fttui: fttui's Trainer callback loads it by path (through
:mod:`fttui.core.run.files.events`) into a command's own Python, and the results layer (the row's
figures) reads the records too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = [
    "Event",
    "UnknownEvent",
    "PhaseEvent",
    "StartEvent",
    "StepEvent",
    "EndEvent",
    "EvalEvent",
    "SaveEvent",
    "TrackerEvent",
    "ForecastEvent",
    "ErrorEvent",
    "ExitEvent",
    "AttemptEvent",
    "RetryEvent",
    "MemoryWarningEvent",
    "LaunchEvent",
    "CancelEvent",
    "StalledEvent",
    "ResumedEvent",
    "StragglerEvent",
    "FaultEvent",
    "RECORDS",
]

_COMMON = ("event", "t", "rank", "pid", "source")
_DEFAULTS: dict[type, dict[str, Any]] = {}  # a record's fields (but extra) and their defaults, once per class


@dataclass(frozen=True, kw_only=True)
class Event:
    """What every event line has: ``t`` (unix time), ``rank`` (global rank; -1 for the
    supervisor's), ``pid`` (the writing process, written by fttui's Trainer callback: two processes
    claiming one rank, :mod:`fttui.core.run.fold.ranks`), ``source`` (``worker``, ``supervisor``,
    ``callback``, ``injected``, ``lightning``, ``report``, ``log``, ``tensorboard``, ``launch``,
    ``recovery``, ``watch``), and ``extra``: the line's keys this record does not declare (kept,
    written back)."""

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
        """The line's kind (its ``event`` key)."""
        return self.EVENT

    def fields(self, sparse: bool = False) -> dict[str, Any]:
        """The record's own keys (not the common ones), extras included; ``sparse``: without the
        ``None`` ones (always so for a ``SPARSE`` record)."""
        out = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("t", "rank", "pid", "source", "extra")
        }
        if self.SPARSE or sparse:
            out = {k: v for k, v in out.items() if v is not None}
        return {**out, **self.extra}

    def to_dict(self, sparse: bool = False) -> dict[str, Any]:
        """The event line as a JSON object (the one serialisation)."""
        pid = {} if self.pid is None else {"pid": self.pid}
        return {
            "event": self.event,
            "t": self.t,
            "rank": self.rank,
            **pid,
            "source": self.source,
            **self.fields(sparse),
        }

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> Event:
        """The record of one line; missing keys read as ``None`` (defaults), unknown keys go to
        ``extra``."""
        defaults = _DEFAULTS.get(cls)
        if defaults is None:
            defaults = _DEFAULTS[cls] = {f.name: f.default for f in dataclasses.fields(cls) if f.name != "extra"}
            _KINDS[cls] = {f.name: k for f in dataclasses.fields(cls) if (k := _kind_of(str(f.type))) is not None}
        kinds = _KINDS[cls]
        # a value of another type than declared (a hand-edited line: "step": "two") reads as the
        # default, as a missing key does: the folds compare and add these (issue 36)
        known = {k: v for k, v in obj.items() if k in defaults and (k not in kinds or _fits(v, kinds[k]))}
        extra = {k: v for k, v in obj.items() if k not in defaults and k not in _COMMON}
        if "rank" in known and known["rank"] is None:
            known.pop("rank")
        # Built as ``cls(**known, extra=extra)`` would build it, without the frozen __init__'s
        # setattr per field (a fourth of the time: every line of a long run is read this way).
        rec = object.__new__(cls)
        rec.__dict__.update(defaults, **known, extra=extra)
        return rec


_KINDS: dict[type, dict[str, tuple[type, ...]]] = {}
#: the Python types a JSON value may have for a declared annotation (``None`` always fits)
_ANNOTATIONS: dict[str, tuple[type, ...]] = {
    "int | None": (int, float),  # a count written as 4000.0 is still a count
    "float | None": (int, float),
    "str | None": (str,),
    "bool | None": (bool,),
    "bool": (bool,),
    "str": (str,),
    "dict[str, Any] | None": (dict,),
    "list[float] | None": (list,),
    "int | str | None": (int, float, str),
}


def _kind_of(annotation: str) -> tuple[type, ...] | None:
    return _ANNOTATIONS.get(annotation)


def _fits(value: Any, kinds: tuple[type, ...]) -> bool:
    if value is None:
        return True
    if isinstance(value, bool) and bool not in kinds:  # JSON true is no count
        return False
    return isinstance(value, kinds)


@dataclass(frozen=True, kw_only=True)
class UnknownEvent(Event):
    """A kind this fttui has no record for (a newer fttui's): its name (set by
    :func:`fttui.core.run.files.events.parse_event`, which reads the kind) and every key kept."""

    name: str = ""

    @property
    def event(self) -> str:
        return self.name

    def fields(self, sparse: bool = False) -> dict[str, Any]:
        return dict(self.extra)

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> Event:
        rec = super().from_dict({k: v for k, v in obj.items() if k != "name"})
        return dataclasses.replace(rec, extra={**rec.extra, **({"name": obj["name"]} if "name" in obj else {})})


# ---------------------------------------------------------------------------- the training's
@dataclass(frozen=True, kw_only=True)
class PhaseEvent(Event):
    """A startup phase begins (:mod:`fttui.core.run.fold.phases`)."""

    EVENT: ClassVar[str] = "phase"
    phase: str | None = None


@dataclass(frozen=True, kw_only=True)
class StartEvent(Event):
    """Training begins: what runs (docs/architecture.md, "Events"); producers add their own
    evidence (``structure``, ``wrapper``, ``deepspeed``, ``keep``, ...) in ``extra``."""

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
    #: what FLOPs per token need (fttui.core.models.flops.shape_from): ``vocab``, ``hidden``,
    #: ``layers``, ``attn_dim``, ``tied``; a mixture of experts adds ``experts`` (routed, per
    #: sparse layer), ``top_k``, ``expert_inter`` (one expert's width) and ``sparse_layers``
    #: (an event without them, a dense model's or an older fttui's, is counted as dense)
    model_shape: dict[str, Any] | None = None
    env: dict[str, Any] | None = None
    #: the rank's memory when training begins (the model built, no batch fed yet), MiB: its
    #: virtual size (VmSize) and, on a GPU, the caching allocator's reserved memory; the step's
    #: peak minus these bounds what the batches added (a launched probe's first prediction,
    #: fttui.core.experiments.headroom)
    vm_mb: float | None = None
    #: the rank's peak resident memory (VmHWM) when training begins: its startup, the model's
    #: build and, for a resumed run, the checkpoint's load (docs/reliability.md, "A resume's peak")
    begin_peak_rss_mb: float | None = None
    torch_reserved_mb: float | None = None
    #: what sharded the run, read back from the engine or wrapper (``asked``, ``ran``, ...)
    sharding: dict[str, Any] | None = None
    #: the machine the rank runs on: Slurm's node name (``SLURMD_NODENAME``), else the host name
    node: str | None = None
    #: how the rank's collectives are timed (fttui.integrations.commwait: ``gloo``, ``gloo+ddp``);
    #: None: not timed (one process, NCCL, an older fttui)
    comm_timing: str | None = None
    #: the memory limits the worker applied (``applied``, ``gpu_memory_bytes``, ``rlimit_as_bytes``)
    limits: dict[str, Any] | None = None
    #: ``cuda`` or ``cpu``: where the worker trains
    device: str | None = None


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
    # now, at the step's end (the trend: fttui.core.run.fold.memtrend): the caching allocator's
    # allocated and reserved memory, the card's free memory (cudaMemGetInfo), the process's RSS,
    # virtual size and address-space limit (RLIMIT_AS, limits.host_memory); the step's seconds
    # spent fetching its batches (the input pipeline, fttui.core.run.fold.whyslow)
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
    #: the step's seconds this rank was blocked in collectives, and how many it joined
    #: (fttui.integrations.commwait: gloo only; None where not measured); what the fold's straggler
    #: is found from (fttui.core.run.fold.skew)
    comm_wait_s: float | None = None
    collectives: int | None = None
    #: where the loss came from when another source than this event's gave it (``tensorboard``:
    #: a command's event file, fttui.core.run.supervising.tbfollow); written only when set
    loss_source: str | None = None

    def fields(self, sparse: bool = False) -> dict[str, Any]:
        out = super().fields(sparse)
        if out.get("loss_source") is None:
            out.pop("loss_source", None)
        return out


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

    def fields(self, sparse: bool = False) -> dict[str, Any]:
        # these keys only where measured (lines of an older fttui, and scripts, have none)
        out = super().fields(sparse)
        for k in ("peak_host_vm_mb", "torch_peak_reserved_mb", "gpu_total_mb", "pass_floor_s", "pass_floor_tokens"):
            if out.get(k) is None:
                out.pop(k, None)
        return out


@dataclass(frozen=True, kw_only=True)
class EvalEvent(Event):
    """The lowest rank evaluated the held-out split."""

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
    #: the saving rank's peak resident memory so far (VmHWM, MiB) once the save is done: above the
    #: last step's ``peak_rss_mb``, the save went above the training's peak
    peak_rss_mb: float | None = None


@dataclass(frozen=True, kw_only=True)
class TrackerEvent(Event):
    """Whether fttui's row reached a ``train.report_to`` tracker."""

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
    #: the memory estimate's terms an out of memory is set against (fttui.core.memory.oomterms:
    #: one rank's terms, the activations at the stated batch and length, the budget)
    memory: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class ErrorEvent(Event):
    """What ended a process's training: ``kind`` ``oom`` or ``error``."""

    EVENT: ClassVar[str] = "error"
    kind: str | None = None
    oom_kind: str | None = None
    message: str | None = None
    step: int | None = None
    #: the longest sequence fed so far, the micro-batch being fed when it failed included (an OOM
    #: in a run's first step says which batch did not fit)
    longest_seq: int | None = None
    traceback: Any = None
    #: the training phase the rank was in (fttui.integrations.hf_info.PHASES: ``data``,
    #: ``forward``, ``backward``, ``optimizer``, ``save``, ``resume-load``, ``eval``; a worker's
    #: startup phase before training); null: outside them, or an older fttui
    phase: str | None = None
    #: the step that phase belongs to: the one being run (data, forward, backward, optimizer),
    #: else the last finished one (the checkpoint saved or resumed from)
    phase_step: int | None = None


# ---------------------------------------------------------------------------- the supervisor's
@dataclass(frozen=True, kw_only=True)
class ExitEvent(Event):
    """The training exited (the supervisor's; ``source`` ``recovery`` when a later command
    finished the run)."""

    EVENT: ClassVar[str] = "exit"
    SPARSE: ClassVar[bool] = True
    returncode: int | None = None
    #: the signal's name that killed the training (``SIGKILL``; ``FinalStatus.signal``)
    signal: int | str | None = None
    status: str | None = None


@dataclass(frozen=True, kw_only=True)
class AttemptEvent(Event):
    """Supervisor, first line of a run started to recover from an out of memory
    (:mod:`fttui.core.run.launching.oomretry`): this run is attempt ``attempt`` of the chain begun by
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
    warning horizon (fttui.core.run.fold.memtrend): ``where`` ``card`` or ``host``, ``figure``
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


@dataclass(frozen=True, kw_only=True)
class LaunchEvent(Event):
    """The training's process group started (``pid``: its leader, the log writer; a watched
    process for ``fttui watch --pid``): the run's elapsed time counts from here."""

    EVENT: ClassVar[str] = "launch"
    SPARSE: ClassVar[bool] = True


@dataclass(frozen=True, kw_only=True)
class CancelEvent(Event):
    """A cancel was asked (``reason``: the cancel file, a signal, the run directory deleted)."""

    EVENT: ClassVar[str] = "cancel"
    SPARSE: ClassVar[bool] = True
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class StalledEvent(Event):
    """No step for the stall timeout (``seconds``) while the training lived; ``message`` in words."""

    EVENT: ClassVar[str] = "stalled"
    SPARSE: ClassVar[bool] = True
    seconds: float | None = None
    message: str | None = None
    #: where the hang is, asked of every rank at the stall (fttui.core.run.processes.hang): ``ranks
    #: 0, 1, 2 wait in all_reduce #1516; rank 3 has not reached it: stopped (SIGSTOP), ...``
    where: str | None = None


@dataclass(frozen=True, kw_only=True)
class ResumedEvent(Event):
    """Steps again after a stall."""

    EVENT: ClassVar[str] = "resumed"
    SPARSE: ClassVar[bool] = True


@dataclass(frozen=True, kw_only=True)
class StragglerEvent(Event):
    """The supervisor's judgement of the ranks of every node of a job (each node's run directory
    holds its own ranks' steps; the supervisor reads its sibling nodes' too): the rank the others
    wait for (``straggler``, ``None``: no rank stands out any more), its node, compute skew and the
    others' share of each step spent waiting for it (fttui.core.run.fold.skew), over ``ranks`` ranks."""

    EVENT: ClassVar[str] = "straggler"
    SPARSE: ClassVar[bool] = True
    straggler: int | None = None
    node: str | None = None
    skew: float | None = None
    share: float | None = None
    ranks: int | None = None
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class FaultEvent(Event):
    """A write of the run failed (a full disk, at ``failed_t``): the run ends failed with ``message``."""

    EVENT: ClassVar[str] = "fault"
    SPARSE: ClassVar[bool] = True
    message: str | None = None
    failed_t: float | None = None


#: event kind -> its record (a kind not here reads as :class:`UnknownEvent`); the probe worker's
#: kinds join from :mod:`fttui.core.base.probe_records` where fttui is installed
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
        ForecastEvent,
        ErrorEvent,
        ExitEvent,
        AttemptEvent,
        RetryEvent,
        MemoryWarningEvent,
        LaunchEvent,
        CancelEvent,
        StalledEvent,
        ResumedEvent,
        StragglerEvent,
        FaultEvent,
    )
}
