"""Where the probe starts: the estimator's largest fitting value on the GPU budget (a CPU profile
starts at the low end of the range: a host budget is address space, which the estimator does not
model)."""

from __future__ import annotations

import sqlite3

from fttui.core.base.errors import EstimateError, FttuiError
from fttui.core.base.units import parse_size
from fttui.core.profiles.typed import Profile

# What the estimator raises on a profile it cannot express: EstimateError, or an arch_config
# whose numbers are missing (KeyError), not numbers (TypeError, ValueError) or zero.
_NOT_ESTIMABLE = (EstimateError, KeyError, TypeError, ValueError, ZeroDivisionError)


def predicted_start(resolved: Profile, param: str, lo: int, hi: int) -> tuple[int | None, str]:
    """Where the probe starts: the estimator's largest fitting value on the GPU budget
    (``limits.gpu_memory`` or the first visible card), calibrated from the store when it can be;
    None on a CPU profile (a host budget is address space, which the estimator does not model)."""
    prof = resolved
    if prof.devices.gpus == 0:
        return None, "CPU profile: starting at the low end of the range"
    from fttui.core.memory import calibration_from_store, solve_max

    budget = prof.limits.gpu_memory
    device = parse_size(budget) if budget else None
    if device is None:
        from fttui.monitor import make_gpu_sampler, run_cards

        with make_gpu_sampler() as sampler:
            cards = run_cards(sampler.sample())  # the card size: the first visible card's total
        if not cards or not cards[0].mem_total_mb:
            return None, "no GPU visible: starting at the low end of the range"
        device = int(cards[0].mem_total_mb * 2**20)
    try:
        from fttui.core.results.store import Store

        with Store() as store:
            cal = calibration_from_store(resolved, store.rows())
    except (FttuiError, sqlite3.Error, OSError, *_NOT_ESTIMABLE):  # no store, or rows the fit cannot use
        cal = None
    try:
        guess = solve_max(resolved, param, device, calibration=cal, hi=hi)
    except _NOT_ESTIMABLE as e:  # the estimator cannot express this profile: start low
        return None, f"no prediction ({e})"
    start = max(lo, min(hi, guess or lo))
    return start, f"starting at the predicted largest fit {guess} ({'calibrated' if cal else 'formula'})"


__all__ = ["predicted_start"]
