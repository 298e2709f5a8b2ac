"""The summary row, declared once: every figure (column) of a run's, a probe trial's or a sweep
cell's row with its name, SQL type, unit, label and how it is folded from what the run left.

:func:`fold_row` is the one row builder: :func:`fttui.core.run.row.summary.build_row` (a run, any
kind) and :func:`fttui.core.experiments.trials.trial_row` (a probe trial) both hand it a
:class:`RowInputs`. Everything else that names row columns derives from :data:`FIGURES`: the
store's columns and JSON columns (:mod:`fttui.core.results.store`), the trackers' parameters
(:data:`SETTINGS`, fttui.worker.trackers), the report's bar labels (:data:`LABEL_KEYS`) and the
CLI's ``--group-by`` choices (:data:`GROUP_BY`). Effective batch has one definition here
(:func:`effective_batch`).

Adding a figure measured by the training (docs/architecture.md, "Adding a row figure"): a field of
its event record (fttui/core/base/event_records.py), the Trainer callback that measures it
(fttui/integrations/hf.py) and one :class:`Figure` here whose fold reads the typed events
(``c.events``); the store adds the column when it opens (no migration to write). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fttui.core.base.event_records import (
    AttemptEvent,
    EndEvent,
    ErrorEvent,
    Event,
    ForecastEvent,
    MemoryWarningEvent,
    RetryEvent,
    StepEvent,
)
from fttui.core.profiles.typed import Profile
from fttui.core.results.row_inputs import RunFigures
from fttui.core.results.stepparts import step_parts

__all__ = [
    "Figure",
    "RowInputs",
    "FIGURES",
    "BY_NAME",
    "COLUMNS",
    "JSON_COLUMNS",
    "SETTINGS",
    "LABEL_KEYS",
    "GROUP_BY",
    "fold_row",
    "effective_batch",
    "figure_sources",
    "per_index",
    "rounded",
    "as_int",
]


@dataclass(frozen=True)
class RowInputs:
    """What a row is folded from. ``profile``: the run's typed profile (the stated settings; a
    probe trial's with its value; a command run's holds only what its Trainer told, ``None``
    elsewhere: :func:`fttui.core.run.launching.command.row_profile`); ``snap``: the run's snapshot (a trial's figures as
    one); ``status``: its :class:`~fttui.core.run.files.statusfile.FinalStatus` (a Slurm node's: with the
    scheduler's verdict); ``events``: its event records (:mod:`fttui.core.base.event_records`,
    parsed once by :mod:`fttui.core.run.files.events`); ``figures``: the figures the run layer measures
    with the run's cards (:class:`~fttui.core.results.row_inputs.RunFigures`: cards, GPU and host
    memory, per-card performance, what the run kept, the sharding that ran, Slurm's facts),
    complete before the fold; ``trial``: set for a probe trial."""

    run_id: str
    kind: str | None
    group_id: str | None
    started_at: str
    ended_at: str
    profile: Profile
    snap: Any
    status: Any
    events: tuple[Event, ...] = ()
    figures: RunFigures = field(default_factory=RunFigures)
    recorded_by: str = "supervisor"
    trial: Any = None


#: where a figure appears: every row, runs only (not probe trials), probe trials only
BOTH, RUN, TRIAL = "both", "run", "trial"


@dataclass(frozen=True)
class Figure:
    """One column of the row. ``sql``: its SQLite type; ``json``: stored as JSON text (lists,
    objects); ``since``: the store schema that added it (documentation: a column the store lacks
    is added when it opens); ``setting``: a label of the run (the trackers' parameters) rather
    than a measured number; ``bar``: its place in a report's bar label (None: not a label
    setting); ``group_by``: a ``--group-by`` choice; ``scope``: BOTH, RUN or TRIAL; ``fold``: its
    value from a :class:`RowInputs`."""

    name: str
    sql: str
    fold: Callable[[RowInputs], Any]
    unit: str = ""
    label: str = ""
    since: int = 1
    json: bool = False
    setting: bool = False
    bar: int | None = None
    group_by: bool = False
    scope: str = BOTH


# ---------------------------------------------------------------------------- fold helpers
def rounded(x: Any, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def as_int(x: Any) -> int | None:
    return None if x is None else int(round(x))


def per_index(d: Mapping | None) -> list[float]:
    """A per-rank or per-card mapping as a list in index order, each value to 0.1."""
    if not d:
        return []
    return [round(float(d[k]), 1) for k in sorted(d, key=lambda x: int(x))]


def effective_batch(micro: int | None, accum: int | None, processes: int | None) -> int | None:
    """Samples per optimizer step: micro batch x accumulation x processes (the one definition;
    ``None`` when the micro batch or the accumulation is unknown)."""
    return (micro or 0) * (accum or 0) * (processes or 1) or None


def _snap(attr: str, conv: Callable[[Any], Any] = lambda x: x) -> Callable[[RowInputs], Any]:
    return lambda c: conv(getattr(c.snap, attr, None)) if c.snap is not None else None


def _worst(attr: str, conv: Callable[[Any], Any] = lambda x: x) -> Callable[[RowInputs], Any]:
    """A figure of the run's worst window of rank skew (fttui.core.run.fold.skew.Skew); ``None``
    when not measured (one rank, NCCL, an older run)."""

    def fold(c: RowInputs) -> Any:
        value = getattr(getattr(c.snap, "skew_worst", None), attr, None)
        return None if value is None else conv(value)

    return fold


def _speed(attr: str, conv: Callable[[Any], Any] = lambda x: x) -> Callable[[RowInputs], Any]:
    """A figure of the snapshot's speed (fttui.core.run.fold.whyslow.Speed); ``None`` when unknown."""

    def fold(c: RowInputs) -> Any:
        value = getattr(getattr(c.snap, "speed", None), attr, None)
        return None if value is None else conv(value)

    return fold


def figure_sources(events: Iterable[Event]) -> str | None:
    """Which source gave the run's steps, loss, samples and tokens (the lowest rank's last step
    event that has each; an end event for samples and tokens, which a printed log tells only
    there): ``"steps=log loss=tensorboard"``; a figure no source gave is left out, ``None``
    without steps. The sources are the events' (``worker``, ``callback``, ``injected``,
    ``lightning``, ``report``, ``log``, ``tensorboard``; docs/commands.md)."""
    events = list(events)
    steps = [e for e in events if isinstance(e, StepEvent) and e.step is not None]
    if not steps:
        return None
    low = min(as_int(e.rank) or 0 for e in steps)
    mine = [e for e in events if isinstance(e, (StepEvent, EndEvent)) and (as_int(e.rank) or 0) == low]
    own = [e for e in mine if isinstance(e, StepEvent) and e.step is not None]
    parts = [f"steps={own[-1].source}"] if own else []
    loss = next((e for e in reversed(own) if e.loss is not None), None)
    if loss is not None:
        parts.append(f"loss={loss.loss_source or loss.source}")
    for name in ("samples", "tokens"):
        ev = next((e for e in reversed(mine) if getattr(e, name) is not None), None)
        if ev is not None:
            parts.append(f"{name}={ev.source}")
    return " ".join(parts) or None


def _first_warning(c: RowInputs) -> str | None:
    """The first ``memory_warning`` event's message (the supervisor's), else the snapshot's warning."""
    first = next((e.message for e in c.events if isinstance(e, MemoryWarningEvent) and e.message), None)
    return first or getattr(c.snap, "memory_warning", None)


def _status(attr: str) -> Callable[[RowInputs], Any]:
    return lambda c: getattr(c.status, attr, None)


def _trial(attr: str) -> Callable[[RowInputs], Any]:
    return lambda c: getattr(c.trial, attr, None)


def _micro(c: RowInputs) -> Any:
    return getattr(c.snap, "micro_batch", None) or c.profile.train.batch_size


def _accum(c: RowInputs) -> Any:
    return getattr(c.snap, "grad_accum", None) or c.profile.train.grad_accum


def _world(c: RowInputs) -> Any:
    """The processes seen (the start event's world size), else the profile's."""
    return getattr(c.snap, "world_size", None) or c.figures.stated_world_size


def _gradient_checkpointing(c: RowInputs) -> bool | None:
    value = c.profile.train.gradient_checkpointing
    return None if c.kind == "command" and value is None else bool(value)


def _model(c: RowInputs) -> Any:
    return c.profile.model.name_or_path or c.profile.model.arch


def _forecast(attr: str, conv: Callable[[Any], Any] = lambda x: x) -> Callable[[RowInputs], Any]:
    """A figure of the launch's time forecast (the ``forecast`` event, fttui.core.run.files.events)."""

    def fold(c: RowInputs) -> Any:
        ev = next((e for e in c.events if isinstance(e, ForecastEvent)), None)
        value = getattr(ev, attr, None) if ev is not None else None
        return None if value is None else conv(value)

    return fold


def _last_attempt(c: RowInputs) -> AttemptEvent | None:
    """The run's last ``attempt`` event (a run started to recover from an OOM, fttui.core.run.launching.oomretry)."""
    return next((e for e in reversed(c.events) if isinstance(e, AttemptEvent)), None)


def _retried_as(c: RowInputs) -> str | None:
    """The run that continued this one (its last ``retry`` event)."""
    return next((e.next_run for e in reversed(c.events) if isinstance(e, RetryEvent)), None)


def _attempt(attr: str, first: Any = None) -> Callable[[RowInputs], Any]:
    """A figure of the run's ``attempt`` event; ``first`` for a run that is a first attempt."""
    return lambda c: getattr(_last_attempt(c), attr, None) if _last_attempt(c) else first


def _step_fit(c: RowInputs) -> dict[str, Any] | None:
    """The step's measured parts, the forecast's one-run calibration (:mod:`.stepparts`)."""
    k = c.profile.train.warmup_exclude_steps
    return step_parts(c.events, 1 if k is None else int(k))


def _longest_seq(c: RowInputs) -> int | None:
    """A probe trial's own figure; a run's: the most any rank's step events reported, or its error
    event (the micro-batch it failed on)."""
    if c.trial is not None:
        return getattr(c.trial, "longest_seq", None)
    return max(
        (e.longest_seq for e in c.events if isinstance(e, (StepEvent, ErrorEvent)) and e.longest_seq), default=None
    )


def _host_total(c: RowInputs) -> float | None:
    host = getattr(c.snap, "host", None)
    return rounded(getattr(host, "ram_total_mb", None), 1) if host else None


# ---------------------------------------------------------------------------- the row
T, I, R = "TEXT", "INTEGER", "REAL"  # noqa: E741  the three SQL kinds, read in the table below
FIGURES: tuple[Figure, ...] = (
    Figure("run_id", "TEXT PRIMARY KEY", lambda c: c.run_id, setting=True),
    Figure(
        "kind",
        T,
        lambda c: c.kind,
        setting=True,
        bar=8,
        label="run | probe | sweep | command (fttui run -- CMD) | watch (fttui watch --pid)",
    ),
    Figure("group_id", T, lambda c: c.group_id, label="the probe or sweep a trial belongs to"),
    Figure("started_at", T, lambda c: c.started_at),
    Figure("ended_at", T, lambda c: c.ended_at),
    Figure("profile", T, lambda c: c.profile.name, setting=True),
    Figure("model", T, _model, setting=True, group_by=True),
    Figure("dataset", T, lambda c: c.profile.data.name, setting=True),
    Figure("method", T, lambda c: c.figures.method, setting=True, bar=0, group_by=True),
    Figure(
        "sharding",
        T,
        lambda c: c.figures.sharding,
        since=5,
        setting=True,
        bar=1,
        group_by=True,
        label="what sharded the run, read back from the engine or wrapper",
    ),
    Figure("precision", T, lambda c: c.profile.train.precision, setting=True, bar=2),
    Figure(
        "gpu", T, lambda c: c.figures.cards.gpu, setting=True, bar=6, group_by=True, label="first card's name, or cpu"
    ),
    Figure("gpu_names", T, lambda c: c.figures.cards.gpu_names, json=True, scope=RUN),
    Figure("num_gpus", I, lambda c: c.figures.cards.num_gpus, setting=True, bar=7),
    Figure("nodes", I, lambda c: int(c.profile.devices.nodes or 1), setting=True),
    Figure("batch_size", I, _micro, setting=True, bar=3, group_by=True, label="micro batch per device"),
    Figure("grad_accum", I, _accum, setting=True, bar=4),
    Figure("world_size", I, _world, setting=True),
    Figure(
        "effective_batch",
        I,
        lambda c: effective_batch(_micro(c), _accum(c), _world(c)),
        setting=True,
        label="samples per optimizer step",
    ),
    Figure(
        "max_seq_len",
        I,
        lambda c: getattr(c.snap, "max_seq_len", None) or c.profile.data.max_seq_len,
        setting=True,
        bar=5,
        group_by=True,
    ),
    Figure("gradient_checkpointing", I, _gradient_checkpointing, setting=True),
    Figure("steps", I, _snap("step")),
    Figure("total_steps", I, _snap("total_steps"), scope=RUN),
    Figure("samples", I, _snap("samples", as_int), scope=RUN),
    Figure("tokens", I, _snap("tokens", as_int), scope=RUN, label="non-padding tokens"),
    Figure("tokens_padded", I, _snap("tokens_padded", as_int), scope=RUN),
    Figure("samples_per_s", R, _snap("samples_per_s", rounded), unit="1/s", label="steady state (warm-up excluded)"),
    Figure(
        "tokens_per_s",
        R,
        _snap("tokens_per_s", lambda x: rounded(x, 1)),
        unit="1/s",
        label="steady state, non-padding tokens",
    ),
    Figure("tokens_padded_per_s", R, _snap("tokens_padded_per_s", lambda x: rounded(x, 1)), unit="1/s"),
    Figure("samples_per_s_avg", R, _snap("samples_per_s_avg", rounded), unit="1/s", label="whole run", scope=RUN),
    Figure("tokens_per_s_avg", R, _snap("tokens_per_s_avg", lambda x: rounded(x, 1)), unit="1/s", scope=RUN),
    Figure(
        "duration_s",
        R,
        _snap("train_time", lambda x: rounded(x, 2)),
        unit="s",
        scope=RUN,
        label="time inside the training loop",
    ),
    Figure("wall_s", R, lambda c: c.figures.wall_s, unit="s", scope=RUN, label="launch to end, model loading included"),
    Figure(
        "peak_gpu_mem_mb",
        T,
        lambda c: c.figures.gpu.peak_gpu_mem_mb,
        unit="MB",
        json=True,
        label="device used, per card",
    ),
    Figure(
        "peak_gpu_proc_mb",
        T,
        lambda c: c.figures.gpu.peak_gpu_proc_mb,
        unit="MB",
        json=True,
        scope=RUN,
        label="this run's processes, per card",
    ),
    Figure(
        "peak_torch_reserved_mb", T, _snap("torch_peak_reserved_mb", per_index), unit="MB", json=True, label="per rank"
    ),
    Figure("peak_torch_alloc_mb", T, _snap("torch_peak_alloc_mb", per_index), unit="MB", json=True, scope=RUN),
    Figure("peak_host_rss_mb", R, lambda c: c.figures.host.peak_host_rss_mb, unit="MB", label="what host_measure says"),
    Figure("host_ram_total_mb", R, _host_total, unit="MB", scope=RUN),
    Figure("host_ram_peak_used_mb", R, _snap("host_peak_ram_used_mb", lambda x: rounded(x, 1)), unit="MB", scope=RUN),
    Figure("params_total", I, _snap("params_total"), scope=RUN),
    Figure("params_trainable", I, _snap("params_trainable"), scope=RUN),
    Figure("status", T, _status("status"), label="completed | failed | oom | cancelled | lost | watched"),
    Figure("oom_kind", T, _status("oom_kind")),
    Figure("error", T, _status("error")),
    Figure("error_step", I, _status("error_step"), scope=RUN),
    Figure("error_rank", I, _status("error_rank"), scope=RUN),
    Figure("exit_code", I, _status("returncode"), scope=RUN),
    Figure("signal", T, _status("signal"), scope=RUN),
    Figure("stalled", I, lambda c: c.figures.stalled, scope=RUN),
    Figure("limits", T, lambda c: c.profile.limits.to_dict(), json=True),
    Figure("versions", T, lambda c: c.figures.versions, json=True, scope=RUN),
    Figure("env", T, lambda c: c.figures.row_env(), json=True, scope=RUN),
    Figure("run_dir", T, lambda c: c.figures.run_dir, scope=RUN),
    # schema 2: probe trials
    Figure("param", T, lambda c: c.figures.param, since=2, scope=TRIAL, label="the probed setting"),
    Figure(
        "clean",
        I,
        _trial("clean"),
        since=2,
        scope=TRIAL,
        label="the trial ran in a process that had not run out of memory before",
    ),
    Figure("step_time_s", R, _trial("step_time_s"), since=2, unit="s", scope=TRIAL),
    Figure(
        "peak_rank_rss_mb",
        T,
        _snap("rank_peak_rss_mb", per_index),
        since=2,
        unit="MB",
        json=True,
        scope=RUN,
        label="each training process's own peak RSS, by rank",
    ),
    # schema 3
    Figure(
        "interconnect",
        T,
        lambda c: c.figures.cards.interconnect,
        since=3,
        setting=True,
        scope=RUN,
        label="NVLink | PCIe | QPI/UPI between the run's cards",
    ),
    Figure("fresh", I, _trial("fresh"), since=3, scope=TRIAL, label="the first trial of its process"),
    # schema 4: figures that are the run's own (issue 14)
    Figure(
        "mismatch",
        T,
        lambda c: c.figures.mismatch,
        since=4,
        json=True,
        scope=RUN,
        label="{setting: {stated, observed}} where what the run did differs",
    ),
    Figure("peak_tree_rss_mb", R, lambda c: c.figures.host.peak_tree_rss_mb, since=4, unit="MB", scope=RUN),
    Figure("peak_build_rss_mb", R, lambda c: c.figures.host.peak_build_rss_mb, since=4, unit="MB", scope=RUN),
    Figure(
        "host_measure", T, lambda c: c.figures.host.host_measure, since=4, label="ranks | tree | tree (before schema 4)"
    ),
    Figure("gpu_mem_total_mb", T, lambda c: c.figures.gpu.gpu_mem_total_mb, since=4, unit="MB", json=True, scope=RUN),
    Figure("gpu_mem_source", T, lambda c: c.figures.gpu.gpu_mem_source, since=4, scope=RUN),
    Figure("alloc_retries", T, lambda c: c.figures.perf.alloc_retries, since=4, json=True, scope=RUN),
    Figure("min_headroom_mb", T, lambda c: c.figures.perf.min_headroom_mb, since=4, unit="MB", json=True, scope=RUN),
    Figure(
        "mfu", T, lambda c: c.figures.perf.mfu, since=4, json=True, scope=RUN, label="model FLOPs utilisation per card"
    ),
    Figure("flops_per_token", R, lambda c: c.figures.perf.flops_per_token, since=4, scope=RUN),
    Figure("near_oom", I, lambda c: c.figures.perf.near_oom, since=4, scope=RUN),
    Figure("recorded_by", T, lambda c: c.recorded_by, since=4, label="supervisor | recovered | probe | worker | watch"),
    # schema 6: results kept (issue 16)
    Figure("resumed_from", T, lambda c: c.figures.kept.resumed_from, since=6, setting=True, scope=RUN),
    Figure("resumed_step", I, lambda c: c.figures.kept.resumed_step, since=6, scope=RUN),
    Figure("eval_loss", R, lambda c: c.figures.kept.eval_loss, since=6, scope=RUN),
    Figure("eval_step", I, lambda c: c.figures.kept.eval_step, since=6, scope=RUN),
    Figure("output_dir", T, lambda c: c.figures.kept.output_dir, since=6, setting=True, scope=RUN),
    Figure("checkpoint", T, lambda c: c.figures.kept.checkpoint, since=6, scope=RUN),
    # schema 7: commands (issue 17)
    Figure(
        "loss",
        R,
        _snap("loss", lambda x: rounded(x, 6)),
        since=7,
        scope=RUN,
        label="the training loss of the last step (the lowest rank's)",
    ),
    # after schema 7 (added when the store opens): the forecast made at launch (issue 23), beside duration_s
    Figure(
        "forecast_s",
        R,
        _forecast("run_seconds", rounded),
        since=8,
        unit="s",
        scope=RUN,
        label="training time forecast at launch (compare duration_s)",
    ),
    Figure("forecast_step_s", R, _forecast("step_seconds", lambda x: rounded(x, 6)), since=8, unit="s", scope=RUN),
    Figure(
        "forecast_source",
        T,
        _forecast("mfu_source"),
        since=8,
        scope=RUN,
        label="what calibrated the forecast, or the default it used",
    ),
    Figure(
        "step_fit",
        T,
        _step_fit,
        since=8,
        json=True,
        scope=RUN,
        label="the step's measured parts: pass_s, fixed_step_s, floor_s, ... (the forecast's one-run calibration)",
    ),
    # out of memory, recovered (issue 25, train.on_oom = "shrink"): each attempt is a row
    Figure(
        "attempt",
        I,
        _attempt("attempt", 1),
        since=8,
        scope=RUN,
        label="1, or the attempt that continued a run which ran out of memory",
    ),
    Figure("attempt_of", T, _attempt("first"), since=8, scope=RUN, label="the run id of the chain's first attempt"),
    Figure(
        "recovered",
        T,
        _attempt("message"),
        since=8,
        scope=RUN,
        label="recovered from OOM at step N: batch 8 -> 4, accumulation 2 -> 4 (...)",
    ),
    Figure(
        "retried_as",
        T,
        _retried_as,
        since=8,
        scope=RUN,
        label="the attempt that continued this run after its out of memory",
    ),
    # the worst batch a run or a probe trial fed (issue 24)
    Figure(
        "longest_seq",
        I,
        _longest_seq,
        since=8,
        unit="tokens",
        label="the longest sequence a step fed (tokens per sample, padding included; an OOM's: the batch it failed on)",
    ),
    # an out of memory explained (issue 44): its training phase and the estimate's terms against the budget
    Figure(
        "oom_phase",
        T,
        lambda c: c.figures.oom_phase,
        since=8,
        scope=RUN,
        group_by=True,
        label="an out of memory's training phase: data | forward | backward | optimizer | save | resume-load | eval",
    ),
    Figure(
        "oom_explained",
        T,
        lambda c: c.figures.oom_explained,
        since=8,
        scope=RUN,
        label="the out of memory's phase and step, and the estimate's term that grew against what the budget left",
    ),
    Figure(
        "oom_held",
        T,
        lambda c: c.figures.oom_held,
        since=8,
        scope=RUN,
        label="what held the card's memory at a CUDA out of memory (the allocator's snapshot by category, "
        "beside the estimate's terms; the largest allocation sites)",
    ),
    # added when the store opens (issue 25): memory creep and speed (docs/reliability.md, docs/performance.md)
    Figure(
        "memory_warning",
        T,
        _first_warning,
        since=8,
        scope=RUN,
        label="the first memory trend warned of: its rate and the steps left to out of memory",
    ),
    Figure("why_slow", T, _snap("why_slow"), since=8, scope=RUN, label="the leading cause of slowness, in words"),
    Figure(
        "data_wait_pct",
        R,
        _speed("data_wait_share", lambda x: rounded(100 * x, 1)),
        since=8,
        unit="%",
        scope=RUN,
        label="share of the steady steps' time spent waiting for data",
    ),
    Figure(
        "step_outliers", I, _speed("outliers"), since=8, scope=RUN, label="steady steps over twice the median step time"
    ),
    # the slow rank (issue 39): the run's worst window of the ranks' compute and wait
    # (fttui.core.run.fold.skew; docs/reliability.md, "The slow rank")
    Figure(
        "hang",
        T,
        _snap("hang"),
        since=8,
        scope=RUN,
        label="where a stalled run's ranks were: the one that stopped, the collective the others waited in",
    ),
    Figure("straggler", T, _worst("text"), since=8, scope=RUN, label="the rank the others waited for, in words"),
    Figure("straggler_rank", I, _worst("rank"), since=8, scope=RUN, label="the rank the others waited for"),
    Figure("straggler_node", T, _worst("node"), since=8, scope=RUN, label="the node of the rank the others waited for"),
    Figure(
        "rank_skew",
        R,
        _worst("skew"),
        since=8,
        unit="x",
        scope=RUN,
        label="the rank the others waited for most: its compute over the others' median (the run's worst window)",
    ),
    Figure(
        "rank_wait_pct",
        R,
        _worst("share", lambda x: rounded(100 * x, 1)),
        since=8,
        unit="%",
        scope=RUN,
        label="share of each step the other ranks waited for that rank (the run's worst window)",
    ),
    # which source gave each figure (issue 42): a command's callback, the API, its printed lines
    # or its TensorBoard files (fttui.core.run.supervising.cmdsources; docs/commands.md)
    Figure(
        "sources",
        T,
        lambda c: figure_sources(c.events),
        since=8,
        scope=RUN,
        label="which source gave the steps, loss, samples and tokens: steps=log loss=tensorboard",
    ),
)

BY_NAME: dict[str, Figure] = {f.name: f for f in FIGURES}
#: column -> SQL type, in the store's order
COLUMNS: dict[str, str] = {f.name: f.sql for f in FIGURES}
JSON_COLUMNS: frozenset[str] = frozenset(f.name for f in FIGURES if f.json)
#: the row's settings: what the trackers log as parameters (the numbers go as metrics)
SETTINGS: tuple[str, ...] = tuple(f.name for f in FIGURES if f.setting)
#: the settings a report's bar label may name, in the label's order
LABEL_KEYS: tuple[str, ...] = tuple(
    name for _, name in sorted(((f.bar, f.name) for f in FIGURES if f.bar is not None), key=lambda p: p[0])
)
#: the columns ``fttui report --group-by`` offers
GROUP_BY: tuple[str, ...] = tuple(f.name for f in FIGURES if f.group_by)


def fold_row(c: RowInputs) -> dict[str, Any]:
    """The row: every figure in scope (a run's, or a probe trial's when ``c.trial`` is set)."""
    skip = RUN if c.trial is not None else TRIAL
    return {f.name: f.fold(c) for f in FIGURES if f.scope != skip}
