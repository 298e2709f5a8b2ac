"""The parts of a run's optimizer step, measured: the row's ``step_fit`` (the forecast's one-run
calibration, docs/forecast.md).

From the lowest rank's ``step`` events after its first ``warmup_exclude_steps`` (each step's
training time from the previous step event's, so the parts add up to the training time):

* ``step_s``: seconds per optimizer step;
* ``pass_s``: seconds of one forward and backward pass (a micro-batch; the step events'
  ``pass_time`` over their ``passes``), ``passes``: passes per step;
* ``fixed_step_s``: ``step_s - passes x pass_s``, the step's seconds outside its passes (the
  optimizer, gradient clipping, fetching the batches, logging): a fixed cost per step, measured;
* ``tokens``, ``tokens_x_len``: padded tokens per pass and those tokens times their micro-batch's
  padded length (what the pass's FLOPs are counted on, attention included);
* ``floor_s``, ``floor_tokens``: the worker's pass floor (the ``end`` event: one sample of
  ``floor_tokens`` tokens, :mod:`fttui.worker.passfloor`), the passes' own fixed cost;
* ``warmup_s``: the rank's training time beyond its steps at ``step_s`` (the first steps);
* ``steps``: the steps measured.

None without two measured steps (events of an fttui before ``pass_time``). Pure, stdlib only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["step_parts"]


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _figures(event: Any, keys: tuple[str, ...]) -> list[float] | None:
    """The event's numbers ``keys``, None when one is missing."""
    values = [v for k in keys if (v := _num(getattr(event, k))) is not None]
    return values if len(values) == len(keys) else None


def step_parts(events: Iterable[Any], warmup_exclude_steps: int = 1) -> dict[str, Any] | None:
    """The step's measured parts (module doc) from a run's typed event records."""
    events = list(events)
    steps = [e for e in events if getattr(e, "EVENT", None) == "step" and e.step]
    if not steps:
        return None
    lowest = min(getattr(e, "rank", 0) or 0 for e in steps)
    steps = sorted((e for e in steps if (getattr(e, "rank", 0) or 0) == lowest), key=lambda e: e.step)
    keys = ("train_time", "passes", "pass_time", "tokens_padded", "tokens_padded_x_len")
    dt = passes = pass_time = tokens = x_len = 0.0
    n = 0
    for a, b in zip(steps, steps[1:]):
        if b.step != a.step + 1 or b.step <= warmup_exclude_steps:
            continue
        va, vb = _figures(a, keys), _figures(b, keys)
        if va is None or vb is None or vb[1] <= va[1]:
            continue
        n += 1
        dt += vb[0] - va[0]
        passes += vb[1] - va[1]
        pass_time += vb[2]
        tokens += vb[3] - va[3]
        x_len += vb[4] - va[4]
    if n < 2 or dt <= 0 or passes <= 0:
        return None
    step_s, pass_s = dt / n, pass_time / passes
    end = next(
        (e for e in events if getattr(e, "EVENT", None) == "end" and (getattr(e, "rank", 0) or 0) == lowest), None
    )
    last = _num(getattr(end, "train_time", None)) or _num(steps[-1].train_time) or 0.0
    return {
        "step_s": round(step_s, 6),
        "pass_s": round(pass_s, 6),
        "passes": round(passes / n, 3),
        "fixed_step_s": round(max(0.0, step_s - passes / n * pass_s), 6),
        "tokens": round(tokens / passes, 1),
        "tokens_x_len": round(x_len / passes, 1),
        "floor_s": _num(getattr(end, "pass_floor_s", None)),
        "floor_tokens": _num(getattr(end, "pass_floor_tokens", None)),
        "warmup_s": round(max(0.0, last - len(steps) * step_s), 6),
        "steps": n,
    }
