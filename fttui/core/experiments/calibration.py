"""The stored rows a forecast is calibrated from (:mod:`fttui.core.experiments.forecast`): the
completed rows nearest to a profile on a card, and what each gives: its rate (FLOP/s per training
process, padded tokens: what the model computed), its steady step (warm-up excluded), its warm-up,
and over rows at two or more micro-batch sizes the fixed cost per pass (least squares). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fttui.core.base import shardings
from fttui.core.base.linefit import line_fit
from fttui.core.models.peaks import peak_tflops
from fttui.core.profiles.typed import Profile

__all__ = [
    "RANKS_CPU",
    "calibration_rows",
    "closeness",
    "fit_fixed",
    "num",
    "row_accum",
    "row_pass_flops",
    "row_rate",
    "setup_key",
    "steady_step",
    "warmup_s",
]

#: the card of CPU ranks (a row's ``gpu`` on CPU ranks)
RANKS_CPU = "cpu"


def num(v: Any) -> float | None:
    """A finite number of a row, else None (a bool, a string, NaN or an infinity)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (math.inf, -math.inf):
        return None
    return float(v)


def setup_key(p: Profile) -> dict[str, Any]:
    return {
        "model": p.model.name_or_path,
        "method": p.method,
        "sharding": p.sharding or shardings.NONE.name,
        "precision": p.train.precision or "fp32",
    }


def row_rate(row: Mapping[str, Any]) -> float | None:
    """FLOP/s per training process of a stored row (padded tokens: what the model computed)."""
    tps = num(row.get("tokens_padded_per_s")) or num(row.get("tokens_per_s"))
    fpt = num(row.get("flops_per_token"))
    ranks = int(num(row.get("world_size")) or 1)
    if not tps or not fpt:
        return None
    return tps * fpt / max(1, ranks)


def row_accum(row: Mapping[str, Any]) -> int:
    return max(1, int(num(row.get("grad_accum")) or 1))


def row_pass_flops(row: Mapping[str, Any]) -> float | None:
    """FLOPs of one forward and backward pass (one micro batch) on one rank of a stored row."""
    fpt = num(row.get("flops_per_token"))
    steps, tokens = num(row.get("steps")), num(row.get("tokens_padded")) or num(row.get("tokens"))
    ranks = int(num(row.get("world_size")) or 1)
    if not fpt or not steps or not tokens:
        return None
    return tokens / steps * fpt / max(1, ranks) / row_accum(row)


def closeness(row: Mapping[str, Any], key: Mapping[str, Any]) -> int:
    score = 0
    score += 8 if row.get("model") == key["model"] else 0
    score += 4 if row.get("method") == key["method"] else 0
    score += 2 if (row.get("sharding") or shardings.NONE.name) == key["sharding"] else 0
    score += 1 if row.get("precision") == key["precision"] else 0
    return score


def calibration_rows(
    profile: Profile, rows: Iterable[Mapping[str, Any]], card: str
) -> tuple[list[Mapping[str, Any]], int]:
    """The completed rows nearest to the profile on ``card`` (``"cpu"`` or an NVML name; rows of
    other cards of known peak count on a GPU of known peak, scaled by the peaks; a card of no known
    peak is calibrated by its own rows only), with their closeness (15: same model, method,
    sharding and precision)."""
    key = setup_key(profile)
    card_peak = None if card == RANKS_CPU else peak_tflops(card, key["precision"])
    usable = []
    for r in rows:
        if r.get("status") != "completed" or r.get("kind") not in ("run", "sweep", None):
            continue
        if row_rate(r) is None:
            continue
        rgpu = str(r.get("gpu") or "")
        if card == RANKS_CPU:
            if rgpu != RANKS_CPU:
                continue
        elif rgpu == RANKS_CPU or (
            rgpu != card and (card_peak is None or peak_tflops(rgpu, r.get("precision")) is None)
        ):
            continue
        same_card = rgpu == card
        usable.append(((1 if same_card else 0), closeness(r, key), r))
    if not usable:
        return [], 0
    best = max((c, s) for c, s, _ in usable)
    chosen = [r for c, s, r in usable if (c, s) == best]
    return chosen, best[1]


def steady_step(row: Mapping[str, Any]) -> float | None:
    """A stored row's optimizer step time in the steady state (its warm-up excluded): padded
    tokens per step over the steady padded tokens/s; the whole run's average when unknown."""
    steps = num(row.get("steps"))
    tokens, tps = num(row.get("tokens_padded")), num(row.get("tokens_padded_per_s"))
    if steps and tokens and tps:
        return tokens / steps / tps
    dur = num(row.get("duration_s"))
    return dur / steps if dur and steps else None


def warmup_s(rows: Sequence[Mapping[str, Any]]) -> float:
    """Seconds a run takes beyond its steps at the steady rate (the first steps: lazy setup,
    allocator and thread-pool warm-up), the mean over ``rows``: the training time less steps x
    the steady step time."""
    out = []
    for r in rows:
        dur, steps, steady = num(r.get("duration_s")), num(r.get("steps")), steady_step(r)
        if dur and steps and steady:
            out.append(max(0.0, dur - steps * steady))
    return sum(out) / len(out) if out else 0.0


def fit_fixed(rows: Sequence[Mapping[str, Any]]) -> tuple[float, float, str] | None:
    """``(seconds per FLOP, fixed seconds per pass, from what)``: by least squares of the time of
    one forward and backward pass on its FLOPs, from rows at two or more different micro-batch
    sizes (rows whose steps were not measured by parts: :mod:`.stepmodel`); None when they do not
    spread."""
    pts = []
    for r in rows:
        flops, steady = row_pass_flops(r), steady_step(r)
        if flops and steady:
            pts.append((flops, steady / row_accum(r)))
    if len({round(x, -3) for x, _ in pts}) >= 2:
        fit = line_fit(pts)
        if fit is not None and fit[0] > 0:
            return fit[0], max(0.0, fit[1]), "fitted over the rows' sizes"
    return None
