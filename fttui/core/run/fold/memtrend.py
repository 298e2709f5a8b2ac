"""Memory that creeps: per rank and step, the caching allocator's allocated and reserved memory,
their gap (fragmentation: cached, not in use), the process's RSS and address space, each one's
trend, and the warning when a trend reaches its limit within the horizon (docs/reliability.md,
"Memory that creeps").

The trend of a figure is a robust slope (Theil-Sen: the median of the pairwise slopes) over the
rank's last :data:`WINDOW` steps after the first :data:`WARMUP_STEPS` (the optimizer states, the
first batches and the allocator's cache are allocated then). A slope is evidence only when

* at least :data:`MIN_STEPS` steps are in the window,
* the figure rose by at least :data:`MIN_RISE_MB` over the window (a slope of a few KiB per step
  is noise, not a leak), and
* its high-water mark rose: the larger half of the window's maximum is above the earlier half's
  by half the slope's rise over that half. A sawtooth (memory freed every N steps) or a plateau
  reached inside the window leaves the maximum where it was, whatever its median slope.

Limits: a card's reserved memory can grow by the card's free memory (``cudaMemGetInfo``: every
process's use counted); its allocated memory by that plus the reserved-but-unused gap; a rank's
RSS by the host's available memory (the latest host sample, shared by the node's ranks: their
slopes add up); its address space by its RLIMIT_AS (``limits.host_memory``). A warning is raised
when a limit is reached within ``horizon`` steps (``monitor.oom_warn_steps``) and before the run
ends. Pure.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "WARMUP_STEPS",
    "WINDOW",
    "MIN_STEPS",
    "MIN_RISE_MB",
    "DEFAULT_HORIZON",
    "MemPoint",
    "RankMemory",
    "Trend",
    "MemoryWarning",
    "RankSeries",
    "WarnedOnce",
    "theil_sen",
    "trend",
    "rank_memory",
    "warnings",
    "slope_text",
]

WARMUP_STEPS = 3
WINDOW = 48
MIN_STEPS = 12
MIN_RISE_MB = 16.0
DEFAULT_HORIZON = 200


@dataclass(frozen=True)
class MemPoint:
    """One step of one rank (MiB; ``None``: not measured, e.g. no CUDA)."""

    step: int
    alloc: float | None = None
    reserved: float | None = None
    free: float | None = None
    rss: float | None = None
    vm: float | None = None
    vm_limit: float | None = None


@dataclass(frozen=True)
class Trend:
    slope: float | None  # MiB per step (Theil-Sen); None with fewer than two points
    steps: int  # points in the window
    rise: float  # the window's last minus first value (MiB)
    rising: bool  # the evidence rule holds: a creep, not noise or a sawtooth


def theil_sen(points: Sequence[tuple[float, float]]) -> float | None:
    """The median of the slopes between every pair of points with different x."""
    slopes = []
    for i in range(len(points)):
        x0, y0 = points[i]
        for j in range(i + 1, len(points)):
            x1, y1 = points[j]
            if x1 != x0:
                slopes.append((y1 - y0) / (x1 - x0))
    if not slopes:
        return None
    slopes.sort()
    n = len(slopes)
    return slopes[n // 2] if n % 2 else (slopes[n // 2 - 1] + slopes[n // 2]) / 2


def trend(
    points: Iterable[tuple[int, float | None]],
    warmup: int = WARMUP_STEPS,
    window: int = WINDOW,
    min_steps: int = MIN_STEPS,
    min_rise: float = MIN_RISE_MB,
) -> Trend:
    """The trend of one figure over ``points`` (step, MiB) in step order (see the module's doc)."""
    pts = [(s, v) for s, v in points if v is not None and s > warmup][-window:]
    slope = theil_sen(pts) if len(pts) >= 2 else None
    rise = pts[-1][1] - pts[0][1] if pts else 0.0
    rising = False
    if slope is not None and slope > 0 and len(pts) >= min_steps and rise >= min_rise:
        half = len(pts) // 2
        early, late = pts[:half], pts[half:]
        span = late[-1][0] - early[-1][0]
        rising = max(v for _, v in late) - max(v for _, v in early) >= 0.5 * slope * span
    return Trend(slope=slope, steps=len(pts), rise=rise, rising=rising)


@dataclass(frozen=True)
class RankMemory:
    """One rank's memory now and its trends (MiB, per step)."""

    rank: int
    step: int
    alloc_mb: float | None
    reserved_mb: float | None
    gap_mb: float | None  # reserved - allocated: cached by the allocator, not in use
    free_mb: float | None  # the card's free memory
    rss_mb: float | None
    vm_mb: float | None
    vm_limit_mb: float | None
    alloc: Trend
    reserved: Trend
    gap: Trend
    rss: Trend
    vm: Trend


def rank_memory(rank: int, points: Sequence[MemPoint], warmup: int = WARMUP_STEPS) -> RankMemory | None:
    """The memory of one rank from its step points (oldest first); ``None`` without points."""
    if not points:
        return None
    last = points[-1]
    gap = [(p.step, p.reserved - p.alloc if p.reserved is not None and p.alloc is not None else None) for p in points]

    def of(key: str) -> Trend:
        return trend(((p.step, getattr(p, key)) for p in points), warmup)

    g = gap[-1][1]
    return RankMemory(
        rank=rank,
        step=last.step,
        alloc_mb=last.alloc,
        reserved_mb=last.reserved,
        gap_mb=g,
        free_mb=last.free,
        rss_mb=last.rss,
        vm_mb=last.vm,
        vm_limit_mb=last.vm_limit,
        alloc=of("alloc"),
        reserved=of("reserved"),
        gap=trend(gap, warmup),
        rss=of("rss"),
        vm=of("vm"),
    )


@dataclass(frozen=True)
class MemoryWarning:
    where: str  # "card" or "host"
    figure: str  # "reserved", "allocated", "rss", "address space"
    rank: int
    step: int
    slope_mb: float
    steps_left: int
    headroom_mb: float

    @property
    def message(self) -> str:
        """``rank 0 reserved +40 MiB/step: out of memory in ~120 steps (1.2 GiB left on its card)``."""
        left = {"card": "on its card", "host": "of host memory"}.get(self.where, "")
        if self.figure == "address space":
            left = "under its address-space limit"
        steps = f"~{self.steps_left} step{'' if self.steps_left == 1 else 's'}"
        return (
            f"rank {self.rank} {self.figure} {slope_text(self.slope_mb)}: out of memory in {steps} "
            f"({_size(self.headroom_mb)} left {left})"
        )


def slope_text(mb: float) -> str:
    """``+40 MiB/step`` (``+0.5 MiB/step`` under 10)."""
    return (
        f"{'+' if mb >= 0 else ''}{mb:.1f} MiB/step" if abs(mb) < 10 else f"{'+' if mb >= 0 else ''}{mb:.0f} MiB/step"
    )


def _size(mb: float) -> str:
    return f"{mb / 1024:.1f} GiB" if mb >= 1024 else f"{mb:.0f} MiB"


def _steps(headroom: float | None, slope: float) -> int | None:
    if headroom is None or slope <= 0:
        return None
    return max(0, int(math.floor(max(0.0, headroom) / slope)))


def warnings(
    ranks: Mapping[int, RankMemory],
    host_available_mb: float | None,
    horizon: int = DEFAULT_HORIZON,
    steps_remaining: int | None = None,
) -> list[MemoryWarning]:
    """The warnings of the ranks' trends: one per rank and limit whose rising trend reaches it
    within ``horizon`` steps and before the run's ``steps_remaining`` are done; soonest first."""
    out: list[MemoryWarning] = []
    reach = horizon if steps_remaining is None else min(horizon, max(0, steps_remaining - 1))

    def add(
        where: str, figure: str, r: RankMemory, t: Trend, headroom: float | None, slope: float | None = None
    ) -> None:
        s = t.slope if slope is None else slope
        if not t.rising or s is None or headroom is None:
            return
        n = _steps(headroom, s)
        if n is not None and n <= reach:
            out.append(MemoryWarning(where, figure, r.rank, r.step, round(s, 2), n, round(max(0.0, headroom), 1)))

    for r in ranks.values():
        if r.free_mb is not None:
            add("card", "reserved", r, r.reserved, r.free_mb)
            if not r.reserved.rising:  # allocations still fit the cache: it has the gap left too
                add("card", "allocated", r, r.alloc, r.free_mb + (r.gap_mb or 0.0))
        if r.vm_limit_mb is not None and r.vm_mb is not None:
            add("host", "address space", r, r.vm, r.vm_limit_mb - r.vm_mb)
    # the node's ranks share its available memory: their RSS slopes add up (one warning, the
    # lowest creeping rank's)
    creeping = [r for r in ranks.values() if r.rss.rising and r.rss.slope]
    if host_available_mb is not None and creeping:
        growth = sum(r.rss.slope or 0.0 for r in creeping)  # every creeping rank has a slope
        add(
            "host",
            "RSS" if len(creeping) == 1 else f"RSS (+{len(creeping) - 1} ranks)",
            creeping[0],
            creeping[0].rss,
            host_available_mb,
            slope=growth,
        )
    out.sort(key=lambda w: (w.steps_left, w.rank))
    return out


class RankSeries:
    """The last :data:`WINDOW` + :data:`WARMUP_STEPS` step points of each rank (the fold's)."""

    def __init__(self, keep: int = WINDOW + WARMUP_STEPS) -> None:
        self.keep = keep
        self.points: dict[int, deque[MemPoint]] = {}

    def add(self, rank: int, point: MemPoint) -> None:
        q = self.points.get(rank)
        if q is None:
            q = self.points[rank] = deque(maxlen=self.keep)
        if not q or point.step > q[-1].step:
            q.append(point)

    def ranks(self, warmup: int = WARMUP_STEPS) -> dict[int, RankMemory]:
        out = {}
        for rank, q in sorted(self.points.items()):
            m = rank_memory(rank, list(q), warmup)
            if m is not None:
                out[rank] = m
        return out


class WarnedOnce:
    """The supervisor's ``memory_warning`` events: one per rank and limit (where, figure), the first
    time its trend reaches the limit within the horizon."""

    def __init__(self) -> None:
        self.seen: set[tuple[int, str, str]] = set()

    def new(self, found: Iterable[MemoryWarning]) -> list[dict]:
        """The event fields of the warnings in ``found`` not written before."""
        out = []
        for w in found:
            if (w.rank, w.where, w.figure) not in self.seen:
                self.seen.add((w.rank, w.where, w.figure))
                out.append(
                    {
                        "where": w.where,
                        "figure": w.figure,
                        "of_rank": w.rank,
                        "step": w.step,
                        "slope_mb": w.slope_mb,
                        "steps_left": w.steps_left,
                        "headroom_mb": w.headroom_mb,
                        "message": w.message,
                    }
                )
        return out
