"""``RunSnapshot``: the frozen record of one run at one moment, and the number helpers of the fold.

A snapshot is everything a view shows about a run: its status (with the supervisor's final
verdict folded in: ``final``, ``message``, ``oom_kind``), progress, rates, histories, memory
peaks and the latest resource sample. ``fttui.core.run.fold.state.RunState`` builds it; views and the
summary row only read it. Stdlib only (plus the monitor's sample records).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fttui.core.run.files.statusfile import to_int
from fttui.monitor import GpuSnapshot, HostSnapshot

__all__ = ["RunSnapshot", "CardPerf", "to_int", "sum_known", "rate"]


def sum_known(values: list[float | None]) -> float | None:
    """The sum of the known values, in order; ``None`` when none is known."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def rate(num_now: float | None, num_ref: float | None, t_now: float | None, t_ref: float | None) -> float | None:
    """``(num_now - num_ref) / (t_now - t_ref)``; ``None`` when a figure is missing or no time passed."""
    if num_now is None or num_ref is None or t_now is None or t_ref is None:
        return None
    dt = t_now - t_ref
    if dt <= 0:
        return None
    return (num_now - num_ref) / dt


@dataclass(frozen=True)
class CardPerf:
    """One of the run's cards as ``fttui.core.run.fold.perf`` sees it (docs/performance.md): memory
    headroom (total minus device used, latest and lowest), the allocator retries and OOMs of its
    ranks, the near-OOM warning and its reason, and MFU (live: steady tokens/s; ``mfu_avg``: tokens
    over training time, the row's). ``None``: not known (no NVML sample, a CPU rank, an unknown
    card), never 0."""

    index: int | None  # NVML index; None when the card is known from the worker's list only
    name: str | None
    ranks: tuple[int, ...] = ()
    rank_clash: dict[int, tuple[int, ...]] = field(default_factory=dict)  # rank -> pids of processes claiming it
    total_mb: float | None = None
    used_mb: float | None = None
    headroom_mb: float | None = None
    min_headroom_mb: float | None = None
    threshold_mb: float | None = None
    alloc_retries: int | None = None
    ooms: int | None = None
    near_oom: bool = False
    reason: str | None = None
    tokens_per_s: float | None = None
    peak_tflops: float | None = None
    mfu: float | None = None
    mfu_avg: float | None = None


@dataclass(frozen=True)
class RunSnapshot:
    # status
    status: str = "starting"
    command: bool = False  # a user command's run (profile.command.argv): none of the worker's model phases
    error: dict[str, Any] | None = None  # {kind, oom_kind, message, step, rank} from the events
    returncode: int | None = None
    signal: int | None = None
    final: bool = False  # the supervisor's final status (status.json) is folded in
    message: str | None = None  # the status's message: the final error, else the event error's
    oom_kind: str | None = None  # the final status's OOM kind, else the OOM event's
    row_saved: bool | None = None  # the final status's: False when the results store did not take the row
    # progress
    step: int | None = None
    total_steps: int | None = None
    epoch: float | None = None
    progress: float | None = None  # 0..1
    samples: float | None = None  # global (summed over ranks)
    tokens: float | None = None
    tokens_padded: float | None = None
    loss: float | None = None  # rank 0 (or lowest rank present)
    lr: float | None = None
    eval_loss: float | None = None  # the latest evaluation (data.eval_ratio), at eval_step
    eval_step: int | None = None
    checkpoint_step: int | None = None  # the latest resumable checkpoint (train.save = "steps")
    # time
    started_t: float | None = None
    last_t: float | None = None
    last_progress_t: float | None = None  # t of the latest step event (stall detection)
    train_time: float | None = None  # max over ranks
    wall_elapsed: float | None = None
    # rates
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    tokens_padded_per_s: float | None = None
    samples_per_s_avg: float | None = None
    tokens_per_s_avg: float | None = None
    tokens_padded_per_s_avg: float | None = None
    seconds_per_step: float | None = None
    eta_s: float | None = None
    eta_source: str | None = None  # "measured" (the steady rate), "forecast" (the launch's, until then)
    # histories
    loss_history: tuple[float, ...] = ()
    samples_per_s_history: tuple[float, ...] = ()
    tokens_per_s_history: tuple[float, ...] = ()
    # peaks
    gpu_peak_used_mb: dict[int, float] = field(default_factory=dict)
    gpu_peak_proc_mb: dict[int, float] = field(default_factory=dict)
    torch_peak_reserved_mb: dict[int, float] = field(default_factory=dict)
    rank_peak_rss_mb: dict[int, float] = field(default_factory=dict)  # each rank's own peak RSS
    stalled: bool = False  # the supervisor flagged no progress for its stall timeout
    stall_message: str | None = None  # "no step for 10 min (usual step 2.1 s)" while stalled
    hang: str | None = None  # where the latest stall's ranks were, in one sentence (kept after a resume)
    # startup (fttui.core.run.fold.phases): the phase shown before the first step, and the t it began
    phase: str | None = None
    phase_since: float | None = None
    startup_ended_t: float | None = None  # t of the first step event (or the end), which ends them
    phase_history: tuple[tuple[str, float | None], ...] = ()  # each change: (phase, t it changed at)
    # out of memory, recovered (fttui.core.run.launching.oomretry): this run's attempt number, what it
    # recovered from ("recovered from OOM at step 7: batch 8 -> 4, ..."), the attempt continuing it
    attempt: int = 1
    recovered: str | None = None
    retried_as: str | None = None
    torch_peak_alloc_mb: dict[int, float] = field(default_factory=dict)
    host_peak_tree_rss_mb: float | None = None
    host_peak_ram_used_mb: float | None = None
    host_peak_build_rss_mb: float | None = None  # the tree's build tools (compilers, linkers), summed per sample
    host_tree_hwm_mb: float | None = None  # each process of the tree's own peak (VmHWM), summed
    host_hwm_unread: int | None = None  # processes of the tree whose VmHWM could not be read
    # latest resources
    gpu: GpuSnapshot | None = None
    host: HostSnapshot | None = None
    # from the start event
    world_size: int | None = None
    ranks: tuple[int, ...] = ()
    rank_clash: dict[int, tuple[int, ...]] = field(default_factory=dict)  # rank -> pids of processes claiming it
    micro_batch: int | None = None
    grad_accum: int | None = None
    max_seq_len: int | None = None
    num_samples: int | None = None
    params_total: int | None = None
    params_trainable: int | None = None
    config: dict[str, Any] | None = None
    env: dict[str, Any] | None = None
    # per rank, for the per-card figures: live (steady) tokens/s, cumulative tokens and training
    # time, the CUDA caching allocator's cumulative retries and OOMs (absent on CPU)
    rank_tokens_per_s: dict[int, float] = field(default_factory=dict)
    rank_tokens: dict[int, float] = field(default_factory=dict)
    rank_train_time: dict[int, float] = field(default_factory=dict)
    rank_alloc_retries: dict[int, float] = field(default_factory=dict)
    rank_ooms: dict[int, float] = field(default_factory=dict)
    model_shape: Any = None  # fttui.core.models.flops.ModelShape, from the start event
    # per card (fttui.core.run.fold.perf): the run's cards, FLOPs per token, the near-OOM warning
    cards: tuple[CardPerf, ...] = ()
    flops_per_token: float | None = None
    near_oom: bool | None = None  # None: no card to judge (CPU run, no GPU sample)
    near_oom_reason: str | None = None  # "GPU 2: 3 allocator retries", the first card's
    # memory now and its trend, per rank (fttui.core.run.fold.memtrend): RankMemory by rank; the
    # warnings of trends that reach a limit within the horizon, soonest first; the first's message
    # (else the first memory_warning event's)
    rank_memory: dict[int, Any] = field(default_factory=dict)
    memory_warnings: tuple[Any, ...] = ()
    memory_warning: str | None = None
    # speed (fttui.core.run.fold.whyslow): the steps' data wait, outliers, each card's clocks and
    # throttle reasons over the training samples; the leading cause of slowness in words
    speed: Any = None
    why_slow: str | None = None
    # the ranks' compute and wait (fttui.core.run.fold.skew): the skew now and the run's worst
    # (Skew records), and the straggler now in words ("rank 3 on n2 computes 1.8x the median; ...")
    skew: Any = None
    skew_worst: Any = None
    straggler: str | None = None
    # bookkeeping
    events: int = 0
    samples_seen: int = 0
