"""A least-squares line through points: the forecast's fixed cost per step (rows at several step
sizes, or one run's steps of varying size). Stdlib only."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["line_fit"]


def line_fit(points: Iterable[tuple[float, float]]) -> tuple[float, float] | None:
    """``(slope, intercept)`` of the least-squares line through ``(x, y)`` points; None with fewer
    than two distinct x."""
    pts = list(points)
    n = len(pts)
    if n < 2:
        return None
    mx, my = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx <= 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
    return slope, my - slope * mx
