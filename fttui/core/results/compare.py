"""This run's MFU against the store's earlier rows of the same model, method (with its sharding)
and card (docs/performance.md, "Why slow"): a run slower than its own history is the one to
explain. Pure: rows in, words out."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["SAME", "row_mfu", "mfu_against", "mfu_history_text"]

#: what makes an earlier row comparable
SAME = ("model", "method", "sharding", "gpu")


def row_mfu(row: Mapping[str, Any]) -> float | None:
    """The row's MFU: the mean over its cards that have one (``None`` for a CPU run or an unknown card)."""
    vals = row.get("mfu")
    if not isinstance(vals, list):
        return None
    known = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return sum(known) / len(known) if known else None


def mfu_against(row: Mapping[str, Any], rows: Iterable[Mapping[str, Any]]) -> tuple[float, float, int] | None:
    """(this run's MFU, the median of the earlier comparable rows' completed runs, how many);
    ``None`` when either side is unknown."""
    mine = row_mfu(row)
    if mine is None:
        return None
    started = row.get("started_at") or ""
    earlier = [
        m
        for r in rows
        if r.get("run_id") != row.get("run_id")
        and (r.get("started_at") or "") < started
        and r.get("status") == "completed"
        and all(r.get(k) == row.get(k) for k in SAME)
        and (m := row_mfu(r)) is not None
    ]
    if not earlier:
        return None
    return mine, statistics.median(earlier), len(earlier)


def mfu_history_text(row: Mapping[str, Any], rows: Iterable[Mapping[str, Any]]) -> str | None:
    """``MFU 31% against 42% (median of 5 earlier runs of this model, method and card): 26% lower``."""
    found = mfu_against(row, rows)
    if found is None:
        return None
    mine, median, n = found
    change = (mine - median) / median if median > 0 else 0.0
    how = "the same" if abs(change) < 0.05 else f"{abs(change):.0%} {'lower' if change < 0 else 'higher'}"
    runs = "1 earlier run" if n == 1 else f"median of {n} earlier runs"
    return f"MFU {mine:.0%} against {median:.0%} ({runs} of this model, method and card): {how}"
