"""The boundary: the largest batch size or sequence length whose predicted peak fits a card.

Owns :func:`solve_max` (an exponential then a binary search over integers, exact because the
prediction is monotonic in both settings) and its bisection step. The settings it can search
are :data:`fttui.core.base.constants.PROBE_PARAMS`.
"""

from __future__ import annotations

from collections.abc import Callable

from fttui.core.base.errors import EstimateError
from fttui.core.memory.breakdown import Calibration, Estimate
from fttui.core.memory.estimate import estimate
from fttui.core.memory.inputs import PARAMS, _with
from fttui.core.profiles.typed import Profile

__all__ = ["solve_max"]


def _peak(e: Estimate) -> int:
    return max(e.gpu_peak_bytes) if e.gpu_peak_bytes else e.host_peak_bytes


def solve_max(
    resolved: Profile,
    param: str,
    device_bytes: int,
    *,
    calibration: Calibration | None = None,
    hi: int = 1 << 20,
) -> int:
    """The largest value of ``param`` (``batch_size`` or ``max_seq_len``) whose predicted peak
    (per card; host memory for a CPU profile) fits ``device_bytes``; 0 when even 1 does not fit.
    The prediction is monotonic in both, so an exponential then a binary search over integers
    finds it exactly: ``value`` fits and ``value + 1`` does not."""
    if param not in PARAMS:
        raise EstimateError(f"--max: use {' or '.join(PARAMS)}")

    def fits(v: int) -> bool:
        return _peak(estimate(_with(resolved, param, v), calibration, device_bytes)) <= device_bytes

    if not fits(1):
        return 0
    lo, step = 1, 2
    while step <= hi and fits(step):
        lo, step = step, step * 2
    if step > hi:
        return hi if fits(hi) else _bisect(fits, lo, hi)
    return _bisect(fits, lo, step)


def _bisect(fits: Callable[[int], bool], lo: int, hi: int) -> int:
    """lo fits, hi does not: the largest fitting value."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo
