"""The figures of a summary row that must be the run's own: its cards, its GPU memory, its host
memory, and what it did where that differs from what its profile said.

* Cards (:func:`row_cards`): the cards the training can see (``CUDA_VISIBLE_DEVICES`` resolved to
  NVML indices, :mod:`fttui.monitor.visible`: indices, UUIDs, MIG), in CUDA order, the first
  ``processes per node`` of them; none for a CPU run.
* GPU memory (:func:`gpu_figures`): per card, device used (``peak_gpu_mem_mb``), the run's own
  (``peak_gpu_proc_mb``: NVML per-process memory of the run's process tree) and total. Where NVML
  shows none of the run's processes on a card (containers report host pids), the run figure is
  that card's rank's peak reserved memory plus the CUDA context constant, and
  ``gpu_mem_source`` says so; a card with neither figure is ``None``, never a silent 0.
* Host memory (:func:`host_figures`): the sum of the training ranks' own peaks (VmHWM, the step
  events' ``peak_rss_mb``); without them, each process of the tree's own peak (VmHWM read by the
  sampler, ``host_measure`` ``"processes"``), else the sampled tree's peak (``"tree"``). The tree and its build steps
  get their own figures.
* Stated vs observed (:func:`mismatch`): micro batch and accumulation (from the samples one rank
  took per optimizer step), sequence length and world size (the worker's start event).

Pure: reads only the snapshot, the profile and the event records it is given.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from fttui.core.base import shardings
from fttui.core.base.constants import CUDA_CONTEXT_BYTES
from fttui.core.base.event_records import Event, StartEvent, StepEvent
from fttui.core.base.units import MIB
from fttui.core.profiles.typed import Profile
from fttui.core.results.row_inputs import GpuFigures, HostFigures
from fttui.core.run.fold.snapshot import RunSnapshot, to_int
from fttui.monitor import GpuInfo, num, visible_indices

__all__ = [
    "CUDA_CONTEXT_MB",
    "SOURCE_NVML",
    "SOURCE_TORCH",
    "MEASURE_RANKS",
    "MEASURE_TREE",
    "MEASURE_PROCESSES",
    "row_cards",
    "gpu_figures",
    "host_figures",
    "host_measure_text",
    "samples_per_step",
    "mismatch",
    "sharding_read_back",
    "lowest_start",
    "stated_sharding",
]

CUDA_CONTEXT_MB = CUDA_CONTEXT_BYTES / MIB
SOURCE_NVML = "nvml-process"
SOURCE_TORCH = "torch-reserved+context"
MEASURE_RANKS = "ranks"
MEASURE_TREE = "tree"
MEASURE_PROCESSES = "processes"


def _r1(x: float | None) -> float | None:
    return None if x is None else round(float(x), 1)


def row_cards(snap: RunSnapshot, gpus_asked: int, nproc: int, cuda_visible: str | None = None) -> list[GpuInfo]:
    """The run's cards from the latest GPU sample, in CUDA order: the first ``nproc`` of those
    visible. Visible: ``cuda_visible`` (a ``CUDA_VISIBLE_DEVICES`` value) when given, else what the
    sample recorded (the sampling supervisor's ``CUDA_VISIBLE_DEVICES``, which the training
    inherits); every card, in NVML order, when neither says. Empty for a CPU run or without a GPU
    sample."""
    g = snap.gpu
    if gpus_asked <= 0 or g is None or not g.available or not g.gpus:
        return []
    by_index = {c.index: c for c in g.gpus}
    vis = visible_indices(cuda_visible, g.gpus) if cuda_visible is not None else getattr(g, "visible", None)
    order = list(by_index) if vis is None else [i for i in vis if i in by_index]
    return [by_index[i] for i in order[: max(0, nproc)]]


def gpu_figures(snap: RunSnapshot, cards: Sequence[GpuInfo]) -> GpuFigures:
    """``peak_gpu_mem_mb`` (device used), ``peak_gpu_proc_mb`` (the run's own), ``gpu_mem_total_mb``
    and ``gpu_mem_source`` of the run's cards, in the order of ``cards``. The k-th card is the
    k-th lowest rank's (local rank k uses ``cuda:k``) for the reserved-memory fallback."""
    if not cards:
        return GpuFigures(peak_gpu_mem_mb=[], peak_gpu_proc_mb=[], gpu_mem_total_mb=[], gpu_mem_source=None)
    reserved = snap.torch_peak_reserved_mb or {}
    ranks = sorted(reserved)
    used: list[float | None] = []
    proc: list[float | None] = []
    total: list[float | None] = []
    nvml = fallback = False
    for k, card in enumerate(cards):
        used.append(_r1(snap.gpu_peak_used_mb.get(card.index)))
        total.append(_r1(card.mem_total_mb))
        p = snap.gpu_peak_proc_mb.get(card.index)
        if p is not None and p > 0:
            nvml = True
        else:
            res = reserved.get(ranks[k]) if k < len(ranks) else None
            p = None if res is None else res + CUDA_CONTEXT_MB
            fallback = fallback or p is not None
        proc.append(_r1(p))
    source = SOURCE_TORCH if fallback else SOURCE_NVML if nvml else None
    return GpuFigures(peak_gpu_mem_mb=used, peak_gpu_proc_mb=proc, gpu_mem_total_mb=total, gpu_mem_source=source)


def host_figures(snap: RunSnapshot) -> HostFigures:
    """``peak_host_rss_mb`` and what it sums (``host_measure``): the ranks' own peaks (VmHWM, their
    step events: ``ranks``); before any step reported one, or for a process that reports none (a
    command without fttui's callback, a watched process), each process of the tree's own peak
    (VmHWM read by the sampler, kept after the process ends: ``processes``, with how many had no
    readable VmHWM and count their sampled RSS); else the sampled tree's peak (``tree``). Also
    ``peak_tree_rss_mb`` (the whole tree's RSS, sampled) and ``peak_build_rss_mb``."""
    ranks = [v for v in (snap.rank_peak_rss_mb or {}).values() if v is not None]
    tree = _r1(snap.host_peak_tree_rss_mb)
    if ranks:
        host, measure = _r1(sum(ranks)), MEASURE_RANKS
    elif snap.host_tree_hwm_mb is not None:
        host, measure = _r1(snap.host_tree_hwm_mb), MEASURE_PROCESSES
        if snap.host_hwm_unread:
            measure += f" ({snap.host_hwm_unread} without a readable VmHWM: their sampled RSS)"
    else:
        host, measure = tree, MEASURE_TREE
    return HostFigures(
        peak_host_rss_mb=host,
        host_measure=measure,
        peak_tree_rss_mb=tree,
        peak_build_rss_mb=_r1(snap.host_peak_build_rss_mb),
    )


def host_measure_text(measure: str | None) -> str:
    """What a row's ``peak_host_rss_mb`` is, in words, from its ``host_measure``: shown beside the
    figure wherever it is printed, so it is never taken for the sampled tree's peak. Empty for a
    row that does not say."""
    m = str(measure or "")
    for name, text in (
        (MEASURE_RANKS, "the ranks' own peaks, summed"),
        (MEASURE_PROCESSES, "each process's own peak, summed"),
        (MEASURE_TREE, "the process tree, sampled"),
    ):
        if m.startswith(name):
            return text + m[len(name) :]
    return ""


def samples_per_step(events: Iterable[Event]) -> float | None:
    """The most samples one rank took in one optimizer step (cumulative ``samples`` of its step
    events, differenced; a gap of several steps is averaged over them); ``None`` without steps.
    The most, not the mean: an epoch's last step may be short."""
    last: dict[int, tuple[int, float]] = {}
    best: float | None = None
    for ev in events:
        if not isinstance(ev, StepEvent):
            continue
        step, samples = to_int(ev.step), num(ev.samples)
        if step is None or samples is None:
            continue
        rank = to_int(ev.rank) or 0
        prev_step, prev_samples = last.get(rank, (0, 0.0))
        if step <= prev_step:
            continue  # duplicate or out-of-order line
        last[rank] = (step, samples)
        per = (samples - prev_samples) / (step - prev_step)
        best = per if best is None else max(best, per)
    return best


def _whole(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(x, 2)


def mismatch(stated: dict[str, Any], snap: RunSnapshot, events: Iterable[Event]) -> dict[str, Any]:
    """``{setting: {"stated", "observed"}}`` for each setting the run did not run as stated
    (``stated``: ``batch_size``, ``grad_accum``, ``max_seq_len``, ``world_size`` from the
    profile); empty when all agree or nothing was observed.

    The batch, from the most samples one rank took in one optimizer step (``per_step``), against
    ``micro x accumulation``: fewer than one micro batch is a short ``batch_size`` (the data ran
    out inside it); fewer than the full step is a short ``grad_accum`` (``per_step / micro``
    micro batches); more is a larger ``batch_size`` (``per_step / accumulation``). Either way
    ``effective_batch`` (all ranks) is flagged beside it. Sequence length and world size: the
    worker's start event. Precision: the lowest rank's start event (``precision``: what the Trainer
    or DeepSpeed's engine runs, read back) against ``train.precision``."""
    events = list(events)
    out: dict[str, Any] = {}
    micro, accum = to_int(stated.get("batch_size")), to_int(stated.get("grad_accum")) or 1
    per_step = samples_per_step(events)
    if micro is not None and micro > 0 and per_step is not None and per_step != micro * accum:
        if per_step < micro:
            out["batch_size"] = {"stated": micro, "observed": _whole(per_step)}
            if accum > 1:
                out["grad_accum"] = {"stated": accum, "observed": 1}
        elif per_step < micro * accum:
            out["grad_accum"] = {"stated": accum, "observed": _whole(per_step / micro)}
        else:
            out["batch_size"] = {"stated": micro, "observed": _whole(per_step / accum)}
        ranks = snap.world_size or to_int(stated.get("world_size")) or 1
        out["effective_batch"] = {
            "stated": micro * accum * (to_int(stated.get("world_size")) or 1),
            "observed": _whole(per_step * ranks),
        }
    if snap.config is not None:  # the worker's start event was seen
        for key, seen in (("max_seq_len", snap.max_seq_len), ("world_size", snap.world_size)):
            want = to_int(stated.get(key))
            if want is not None and seen is not None and seen != want:
                out[key] = {"stated": want, "observed": seen}
    # Precision: what the Trainer (or DeepSpeed's engine) ran, from the lowest rank's start event.
    starts = sorted((e for e in events if isinstance(e, StartEvent) and e.precision), key=_rank)
    if starts and stated.get("precision") and starts[0].precision != stated["precision"]:
        out["precision"] = {"stated": stated["precision"], "observed": starts[0].precision}
    ran = (sharding_read_back(events) or {}).get("ran")
    if ran and stated.get("sharding") and ran != stated["sharding"]:
        out["sharding"] = {"stated": stated["sharding"], "observed": ran}
    return out


def stated_sharding(prof: Profile) -> tuple[str | None, str]:
    """``(method, sharding)`` a run's profile asks for (a command run's: what its Trainer told,
    or ``None``); a profile.json written before the sharding axis (``full-zero3-offload`` as
    the method) reads back as full under ZeRO-3 offload already (``RunDir.profile``)."""
    return shardings.of(prof.method, prof.sharding)


def _rank(ev: Event) -> int:
    return to_int(ev.rank) or 0


def lowest_start(events: Iterable[Event]) -> StartEvent | None:
    """The start event of the lowest rank (the first of that rank), or None before any."""
    return min((e for e in events if isinstance(e, StartEvent)), key=_rank, default=None)


def sharding_read_back(events: Iterable[Event]) -> dict[str, Any] | None:
    """What sharded the run, read back from the engine or the wrapper by the lowest rank (its
    start event's ``sharding``: ``ran``, the ZeRO stage and offload devices or the FSDP
    modules); None before any start event says."""
    starts = sorted((e for e in events if isinstance(e, StartEvent) and isinstance(e.sharding, dict)), key=_rank)
    return dict(starts[0].sharding or {}) if starts else None
