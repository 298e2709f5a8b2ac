"""Where a fresh process runs out of memory, from what a probe observed.

Only first trials of fresh processes are verdicts (fttui.core.experiments.probe). Per value they
may be repeated (``--repeats``), so the answer is a band:

  * ``largest_fit``: the largest value that fitted every time it was tried, below every value
    that ever ran out of memory (the answer to use);
  * ``smallest_oom``: the smallest value that ran out of memory every time, above every value
    that ever fitted;
  * ``mixed``: the values that went both ways, with their counts.

The next value to check comes from a prediction where one can be made: a fresh fit reports its
headroom (the MiB its budget left unused, fttui.worker.probe.headroom_mb) and the trials' peaks
grow by a measurable amount per value, so ``value + headroom / growth`` is where the budget runs
out; a second fresh fit gives the growth exactly (the difference of the two headrooms).

A prediction can overshoot: the peaks do not grow in equal steps (sequence length: tiny-lora at
48 MiB, the growth from 16 to 247 tokens predicted 273 where fresh processes ran out of memory
from 270 down). An OOM at or below the prediction says the growth near the boundary is steeper
than the fits said; the next check then lies below the OOM by the prediction's possible miss
(:func:`next_check`), not one value below it: stepping down one value per model load ran a CI
probe out of loads (273, 272, 271, 270 all OOM). From the third OOM above the fit on, each
doubles the overshoot assumed (regula falsi's Illinois rule), and a prediction is the largest value whose
peak stays within the headroom (rounded down: rounding to the nearest overshot by one value
when the boundary fell between two values). A later CI probe (16, 245, 277 fit; 283 OOM; 280 fit;
282 OOM; 281 unknown) needed a seventh load: a max_seq_len probe has seven.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import NamedTuple

from fttui.core.experiments.trials import Trial


class Band(NamedTuple):
    largest_fit: int | None
    smallest_oom: int | None
    mixed: list[dict]  # [{"value", "fit", "oom"}], by value

    @property
    def adjacent(self) -> bool:
        """Nothing unknown between the ends: they are neighbours, or every value between them went
        both ways."""
        if self.largest_fit is None or self.smallest_oom is None:
            return False
        between = set(range(self.largest_fit + 1, self.smallest_oom))
        return between <= {m["value"] for m in self.mixed}


def band(trials: list[Trial]) -> Band:
    fit: Counter[int] = Counter(t.value for t in trials if t.fresh and t.status == "fit")
    oom: Counter[int] = Counter(t.value for t in trials if t.fresh and t.status == "oom")
    any_oom = min(oom, default=None)
    any_fit = max(fit, default=None)
    always_fit = [v for v in fit if v not in oom and (any_oom is None or v < any_oom)]
    always_oom = [v for v in oom if v not in fit and (any_fit is None or v > any_fit)]
    mixed = [{"value": v, "fit": fit[v], "oom": oom[v]} for v in sorted(set(fit) & set(oom))]
    return Band(max(always_fit, default=None), min(always_oom, default=None), mixed)


#: What an OOM at a value is taken to have needed beyond the budget, in MiB, when a prediction
#: overshot it (the peaks of values next to each other differ by about a MiB or less: measured
#: under a host limit, 0.1 to 0.14 MiB per token of tiny-lora's sequence length)
OVERSHOOT_MB = 0.5


#: The least headroom difference two fits give the growth from, when a pair that far apart was
#: seen: the peaks of fresh launches at one value differ by a few hundredths of a MiB (tiny-lora,
#: 48MiB, 292 tokens: 0.23 to 0.28 MiB of headroom), which between neighbouring sequence lengths
#: (0.12 MiB a token) drowned the growth: fits at 292 and 293 (0.23, 0.21) gave 0.02 MiB a token,
#: the next check overshot by 21 tokens and the 7 loads ran out.
GROWTH_SPAN_MB = 0.5


def _peak(t: Trial) -> float | None:
    if t.peak_torch_reserved_mb:
        return max(t.peak_torch_reserved_mb)
    return t.peak_host_rss_mb


def growth_per_value(trials: list[Trial]) -> float | None:
    """MiB the peak grows per value. Two fresh fits that reported their headroom give it exactly
    (the difference of their headrooms: the largest fit and the nearest below it whose headroom
    is ``GROWTH_SPAN_MB`` more, near the boundary as attention makes the growth in sequence length
    more than linear, far enough apart that the processes' jitter does not decide it); else one launched fit's
    ``steps_mb`` per value
    (an upper bound); else a least-squares line through the fitting trials' peaks (in-process
    trials carry an offset, not a different growth)."""
    heads = sorted(
        {t.value: t.headroom_mb for t in trials if t.fresh and t.status == "fit" and t.headroom_mb is not None}.items()
    )
    if len(heads) >= 2:
        v2, h2 = heads[-1]
        # the nearest fit below whose headroom is GROWTH_SPAN_MB more, else the next one down
        v1, h1 = next(((v, h) for v, h in reversed(heads[:-1]) if h - h2 >= GROWTH_SPAN_MB), heads[-2])
        if h1 > h2:
            return (h1 - h2) / (v2 - v1)
    # one launched fit: what its batches added, per value, is at least the growth so far (fixed
    # costs of a step count in it): for a linear growth a prediction from it is not above the boundary
    bounds = [
        (t.value, mb)
        for t in trials
        if t.fresh and t.status == "fit" and t.headroom_mb is not None and (mb := t.steps_mb) and t.value > 0
    ]
    if bounds:
        value, mb = max(bounds, key=lambda b: b[0])
        return mb / value
    pts = [(t.value, p) for t in trials if t.status == "fit" and (p := _peak(t)) is not None]
    if len({v for v, _ in pts}) < 2:
        return None
    mx = sum(v for v, _ in pts) / len(pts)
    my = sum(p for _, p in pts) / len(pts)
    sxx = sum((v - mx) ** 2 for v, _ in pts)
    g = sum((v - mx) * (p - my) for v, p in pts) / sxx
    return g if g > 0 else None


def predicted(trials: list[Trial], below: int | None = None) -> int | None:
    """The largest value a fresh process should fit, from the largest fresh fit that reported its
    headroom (below ``below`` when given), or None."""
    g = growth_per_value(trials)
    fits = [
        (t.value, h)
        for t in trials
        if t.fresh and t.status == "fit" and (h := t.headroom_mb) is not None and (below is None or t.value < below)
    ]
    if g is None or not fits:
        return None
    value, head = max(fits, key=lambda f: f[0])
    return value + max(0, math.floor(head / g + 1e-6))


def next_check(trials: list[Trial], low: int, ceil: int) -> int | None:
    """The value the next fresh process checks strictly between ``low`` (the largest fresh fit, or
    one below the range) and ``ceil`` (the smallest fresh OOM, or one above the range), from the
    fits' headroom; None without a prediction.

    A prediction below ``ceil`` is checked as it is. One at or above ``ceil`` overshot an observed
    OOM: the growth from the largest fit to ``ceil`` was steeper than the fits said, and the next
    check interpolates between them (regula falsi), the fit's headroom against ``OVERSHOOT_MB``
    needed beyond the budget at ``ceil``: an overshoot by several values costs one or two loads,
    not one per value."""
    p = predicted(trials, below=ceil)
    if p is None:
        return None
    if p < ceil:
        return max(p, low + 1)
    if not any(t.fresh and t.status == "oom" and t.value == ceil for t in trials):
        return ceil - 1  # the range's end, no OOM seen there: check the end itself
    best, best_head = max(
        (
            (t.value, h)
            for t in trials
            if t.fresh and t.status == "fit" and (h := t.headroom_mb) is not None and t.value < ceil
        ),
        key=lambda f: f[0],
    )
    head = max(0.0, best_head)
    # from the third fresh OOM above that fit on, each doubles what ceil is taken to have needed
    # (regula falsi's Illinois rule): a sharp kink is not walked down a few values per load
    misses = sum(1 for t in trials if t.fresh and t.status == "oom" and best < t.value)
    over = OVERSHOOT_MB * 2 ** max(0, misses - 2)
    x = best + math.floor((ceil - best) * head / (head + over))
    return min(ceil - 1, max(low + 1, x))


__all__ = ["Band", "GROWTH_SPAN_MB", "OVERSHOOT_MB", "band", "growth_per_value", "next_check", "predicted"]
