"""Per-card figures of a run: memory headroom and allocator retries (the near-OOM warning), and
model FLOPs utilisation (docs/performance.md).

* Cards: the run's (visible ones, CUDA order, as the latest GPU sample recorded them), the k-th
  lowest rank on the k-th card (local rank k uses ``cuda:k``); without a GPU sample, the cards the
  worker's CUDA listed (``env.gpus``: name and total, no headroom). None for a CPU run.
* Headroom: card total minus device used (NVML, every process on the card: other users' too);
  ``min_headroom_mb`` uses the run's peak of device used.
* Near OOM: the card's ranks' caching allocator had to free its cache and retry an allocation
  (``num_alloc_retries`` > 0: it starts at 0 in each process) or raised an OOM
  (``num_ooms`` > 0), or the lowest headroom fell under :func:`headroom_threshold_mb`:
  ``max(5% of the card, 1 GiB)``.
* MFU: tokens/s of the card's ranks x FLOPs per token (:mod:`fttui.core.models.flops`) / the
  card's dense peak at the training precision (:mod:`fttui.core.models.peaks`); live from the
  steady tokens/s, ``mfu_avg`` (the row's) from the ranks' tokens over their training time.
  ``None`` for an unknown card, a MIG slice (a fraction of the card), a CPU run or an unknown
  model: never a guessed figure.

Pure: reads the snapshot only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from fttui.core.base import fmt
from fttui.core.base.event_records import StartEvent
from fttui.core.models.flops import ModelShape, flops_per_token, shape_from
from fttui.core.models.peaks import peak_tflops
from fttui.core.results.row_inputs import PerfFigures
from fttui.core.run.fold.snapshot import CardPerf, RunSnapshot, to_int
from fttui.monitor import GpuInfo, cards_run_first, num

__all__ = [
    "NEAR_OOM_FRACTION",
    "NEAR_OOM_MIN_MB",
    "headroom_threshold_mb",
    "model_shape",
    "seq_len",
    "run_flops_per_token",
    "card_perf",
    "with_perf",
    "row_perf",
    "mfu_text",
]

NEAR_OOM_FRACTION = 0.05  # of the card's total memory
NEAR_OOM_MIN_MB = 1024.0  # 1 GiB: the smallest headroom threshold, whatever the card


def headroom_threshold_mb(total_mb: float | None) -> float | None:
    """Headroom under this (MB) is near OOM: ``max(5% of total, 1 GiB)``."""
    if total_mb is None or total_mb <= 0:
        return None
    return max(NEAR_OOM_FRACTION * total_mb, NEAR_OOM_MIN_MB)


def model_shape(start: StartEvent) -> ModelShape | None:
    """The model's shape from a ``start`` event: the worker's ``model_shape``, else the numbers of
    the profile's architecture (``fttui.core.models.numbers``), with the worker's real parameter
    counts either way; ``None`` when neither is there."""
    total, trainable = start.params_total, start.params_trainable
    shape = shape_from(total, trainable, start.model_shape)
    if shape is None and isinstance(start.config, Mapping):
        from fttui.core.models.numbers import arch_numbers
        from fttui.core.profiles.typed import ModelSettings

        try:
            a = arch_numbers(ModelSettings.from_partial(start.config.get("model")))
        except Exception:  # no architecture numbers in the profile: no shape, no MFU
            return None
        shape = shape_from(total, trainable, a.shape_numbers())
    return shape


def _settings(snap: RunSnapshot) -> tuple[str | None, str | None, bool, int | None]:
    """(method, precision, gradient checkpointing, GPUs per node) of the run's profile."""
    cfg = snap.config or {}
    train = t if isinstance(t := cfg.get("train"), dict) else {}
    dev = d if isinstance(d := cfg.get("devices"), dict) else {}
    method = cfg.get("method") if isinstance(cfg.get("method"), str) else None
    precision = train.get("precision") if isinstance(train.get("precision"), str) else None
    return method, precision, bool(train.get("gradient_checkpointing")), to_int(dev.get("gpus"))


def seq_len(snap: RunSnapshot) -> float | None:
    """The attention term's sequence length: the mean non-padding tokens per sample so far, else
    the run's ``max_seq_len``."""
    if snap.tokens and snap.samples and snap.samples > 0:
        return snap.tokens / snap.samples
    return float(snap.max_seq_len) if snap.max_seq_len else None


def run_flops_per_token(snap: RunSnapshot) -> float | None:
    """Model FLOPs per trained token of the run (``None`` without the model's shape or method)."""
    method, _precision, gc, _gpus = _settings(snap)
    s = seq_len(snap)
    if snap.model_shape is None or method is None or s is None:
        return None
    return flops_per_token(snap.model_shape, method, s, gc).total


def _live_cards(snap: RunSnapshot) -> list[GpuInfo]:
    """The run's cards in the latest GPU sample, CUDA order, one per rank seen (or per GPU the
    profile asks for before any step)."""
    _m, _p, _gc, gpus = _settings(snap)
    g = snap.gpu
    if gpus == 0 or g is None or not g.available:
        return []
    run = [c.gpu for c in cards_run_first(g) if c.run]
    n = len(snap.ranks) or gpus or len(run)
    return run[:n]


def _env_cards(snap: RunSnapshot, n: int) -> list[GpuInfo]:
    """The cards the worker's CUDA listed (start event ``env.gpus``), when no GPU sample has them."""
    listed = (snap.env or {}).get("gpus")
    if not isinstance(listed, list):
        return []
    out = [
        GpuInfo(index=-1, name=d.get("name"), mem_total_mb=num(d.get("mem_total_mb")))
        for d in listed
        if isinstance(d, dict)
    ]
    return out[:n]


def _sum(values: list[float]) -> float | None:
    return sum(values) if values else None


def card_perf(snap: RunSnapshot, cards: Sequence[GpuInfo], fpt: float | None) -> tuple[CardPerf, ...]:
    """The figures of each of ``cards`` (the k-th card: the k-th lowest rank's)."""
    _m, precision, _gc, _gpus = _settings(snap)
    ranks = sorted(snap.ranks)
    mig = set(snap.gpu.mig) if snap.gpu is not None else set()
    out = []
    for k, g in enumerate(cards):
        mine = tuple(ranks[k : k + 1])
        index = g.index if g.index >= 0 else None
        total, used = g.mem_total_mb, g.mem_used_mb if index is not None else None
        headroom = total - used if total is not None and used is not None else None
        peak_used = snap.gpu_peak_used_mb.get(index) if index is not None else None
        low = total - peak_used if total is not None and peak_used is not None else headroom
        threshold = headroom_threshold_mb(total)
        retries = _sum([snap.rank_alloc_retries[r] for r in mine if r in snap.rank_alloc_retries])
        ooms = _sum([snap.rank_ooms[r] for r in mine if r in snap.rank_ooms])
        reason = None
        if retries:
            reason = f"{int(retries)} allocator retr{'y' if retries == 1 else 'ies'}"
        elif ooms:
            reason = f"{int(ooms)} allocator OOM{'' if ooms == 1 else 's'}"
        elif low is not None and threshold is not None and low < threshold:
            reason = f"headroom {fmt.mb(max(0.0, low))} under {fmt.mb(threshold)}"
        tps = _sum([snap.rank_tokens_per_s[r] for r in mine if r in snap.rank_tokens_per_s])
        avg = _sum(
            [
                snap.rank_tokens[r] / snap.rank_train_time[r]
                for r in mine
                if snap.rank_tokens.get(r) is not None and (snap.rank_train_time.get(r) or 0) > 0
            ]
        )
        peak = None if index in mig else peak_tflops(g.name, precision)
        scale = fpt / (peak * 1e12) if fpt is not None and peak else None
        out.append(
            CardPerf(
                index=index,
                name=g.name,
                ranks=mine,
                total_mb=total,
                used_mb=used,
                headroom_mb=headroom,
                min_headroom_mb=low,
                threshold_mb=threshold,
                alloc_retries=None if retries is None else int(retries),
                ooms=None if ooms is None else int(ooms),
                near_oom=reason is not None,
                reason=reason,
                tokens_per_s=tps,
                peak_tflops=peak,
                mfu=tps * scale if scale is not None and tps is not None else None,
                mfu_avg=avg * scale if scale is not None and avg is not None else None,
            )
        )
    return tuple(out)


def _verdict(cards: Sequence[CardPerf]) -> tuple[bool | None, str | None]:
    if not cards:
        return None, None
    for c in cards:
        if c.near_oom:
            return True, f"GPU {c.index if c.index is not None else '?'}: {c.reason}"
    return False, None


def with_perf(snap: RunSnapshot) -> RunSnapshot:
    """``snap`` with its per-card figures, FLOPs per token and near-OOM verdict filled in."""
    fpt = run_flops_per_token(snap)
    gpus = _settings(snap)[3]
    cards = _live_cards(snap)
    if not cards and gpus != 0 and (snap.gpu is None or not snap.gpu.available):
        cards = _env_cards(snap, len(snap.ranks) or gpus or 1)
    perf = card_perf(snap, cards, fpt)
    near, why = _verdict(perf)
    return replace(snap, cards=perf, flops_per_token=fpt, near_oom=near, near_oom_reason=why)


def mfu_text(mfu: float | None) -> str:
    """MFU as the views show it: ``41%`` (``4.2%`` under 10%); ``—`` when unknown (an unknown
    card, a CPU run): never a guess."""
    if mfu is None:
        return "—"
    pc = 100 * mfu
    return f"{pc:.1f}%" if pc < 10 else f"{pc:.0f}%"


def _r(x: float | None, nd: int) -> float | None:
    return None if x is None else round(float(x), nd)


def row_perf(snap: RunSnapshot, cards: Sequence[GpuInfo], gpu_run: bool) -> PerfFigures:
    """The row's columns: per card (in the order of ``cards``, the row's) ``alloc_retries``,
    ``min_headroom_mb`` and ``mfu`` (tokens over training time), ``near_oom`` (any card), and
    ``flops_per_token``. A GPU run (``gpu_run``) without a GPU sample takes the worker's card list
    (no headroom); a CPU run has ``None`` in every per-card column."""
    fpt = run_flops_per_token(snap)
    if not cards and gpu_run:
        cards = _env_cards(snap, len(snap.ranks) or 1)
    perf = card_perf(snap, cards, fpt) if gpu_run else ()
    near, _why = _verdict(perf)
    if not perf:
        return PerfFigures(flops_per_token=_r(fpt, 0))
    return PerfFigures(
        alloc_retries=[c.alloc_retries for c in perf],
        min_headroom_mb=[_r(c.min_headroom_mb, 1) for c in perf],
        mfu=[_r(c.mfu_avg, 4) for c in perf],
        near_oom=near,
        flops_per_token=_r(fpt, 0),
    )
