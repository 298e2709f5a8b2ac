"""The step model of the forecast, calibrated from rows whose steps were measured by parts (the
row's ``step_fit``, :mod:`fttui.core.results.stepparts`)::

    step_seconds = fixed_step + grad_accum x (fixed_pass + pass_flops x seconds_per_flop)

* ``fixed_step``: the step's seconds outside its forward and backward passes (the optimizer,
  clipping, fetching the batches, logging), measured by the row;
* on CPU ranks a pass's time is a line in its FLOPs: ``fixed_pass`` (the operators' own cost, what
  a pass costs with next to no work) plus its FLOPs at ``seconds_per_flop``. Its points: each row's
  mean pass (its padded tokens per micro-batch, each at its micro-batch's padded length, so
  attention's length-squared term is in the FLOPs) and each row's pass floor (one short sample,
  timed by the worker after training); least squares through them. One row with its floor is two
  points: its line. Rows without a floor at two or more sizes fit the line too; one size alone
  gives no fixed cost per pass, and the words say so.
* on a card (``overlap``) the host issues a pass's kernels while the card runs the earlier ones, so
  a pass takes the longer of the two, not their sum: ``max(fixed_pass, pass_flops x
  seconds_per_flop)``, ``fixed_pass`` the pass floor (the host's issuing with next to no work) and
  ``seconds_per_flop`` from the rows' passes that took longer than it (through the origin). A
  row's pass no longer than its floor is launch-bound: it bounds ``seconds_per_flop`` from above,
  and the words say so. (On an H100 the line's sum forecast a 4 x 256 run at 1.88 of its time
  and 16 x 1024 at 0.82: the 4 x 256 pass, 36.5 ms, was shorter than the 16-token floor, 41 ms.)

FLOPs per token: :func:`fttui.core.models.flops.flops_per_token`, linear in the sequence length,
so a micro-batch's FLOPs are ``tokens x fpt(0) + tokens_x_len x (fpt(1) - fpt(0))``. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fttui.core.base.linefit import line_fit
from fttui.core.models.flops import ModelShape, flops_per_token

__all__ = ["StepModel", "row_parts", "pass_flops", "step_model"]


@dataclass(frozen=True)
class StepModel:
    seconds_per_flop: float
    fixed_pass_s: float
    fixed_step_s: float
    warmup_s: float
    words: str
    overlap: bool = False  # a card: a pass takes max(fixed, work), not their sum

    def pass_seconds(self, flops_per_pass: float) -> float:
        work = flops_per_pass * self.seconds_per_flop
        return max(self.fixed_pass_s, work) if self.overlap else self.fixed_pass_s + work

    def step_seconds(self, flops_per_pass: float, accum: int) -> float:
        return self.fixed_step_s + max(1, accum) * self.pass_seconds(flops_per_pass)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v else None


def row_parts(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """A row's measured step parts (its ``step_fit``), or None (a row of an older fttui)."""
    sf = row.get("step_fit")
    if isinstance(sf, str):
        try:
            sf = json.loads(sf)
        except ValueError:
            return None
    if not isinstance(sf, Mapping) or None in (
        _num(sf.get(k)) for k in ("pass_s", "fixed_step_s", "tokens", "tokens_x_len")
    ):
        return None
    return dict(sf)


def pass_flops(shape: ModelShape, method: str, gc: bool, tokens: float, tokens_x_len: float) -> float:
    """FLOPs of one pass of ``tokens`` padded tokens whose lengths, weighted by their tokens, sum
    to ``tokens_x_len`` (one sample of ``n`` tokens: ``n``, ``n * n``)."""
    a = flops_per_token(shape, method, 0.0, gc).total
    per_len = flops_per_token(shape, method, 1.0, gc).total - a
    return tokens * a + tokens_x_len * per_len


def _row_shape(shape: ModelShape, row: Mapping[str, Any]) -> ModelShape:
    """The forecast's model shape with the row's own parameter counts (another LoRA rank, say)."""
    total, trainable = _num(row.get("params_total")), _num(row.get("params_trainable"))
    return replace(
        shape, params_total=int(total or shape.params_total), params_trainable=int(trainable or shape.params_trainable)
    )


def _overlapped(points: list[tuple[float, float]], floors: list[float]) -> tuple[float, float, str]:
    """``(seconds_per_flop, fixed_pass_s, how)`` on a card: the floor, and the time per FLOP of the
    passes that took longer than it (least squares through the origin)."""
    floor = sorted(floors)[len(floors) // 2] if floors else 0.0
    busy = [(f, t) for f, t in points if t > 1.1 * floor]
    if busy:
        s_per_flop = sum(f * t for f, t in busy) / sum(f * f for f, _ in busy)
        how = (
            f"a pass takes the longer of {floor * 1e3:.3g} ms (the pass floor measured: the host issuing it) "
            f"and its work on the card"
            if floors
            else "no pass floor measured (the passes' work alone)"
        )
        return s_per_flop, floor, how
    s_per_flop = min(t / f for f, t in points)
    return (
        s_per_flop,
        floor,
        (
            f"launch-bound: the run's passes took no longer than the pass floor "
            f"({floor * 1e3:.3g} ms), so the card's time per FLOP is known only as a bound"
        ),
    )


def step_model(
    rows: Sequence[Mapping[str, Any]], shape: ModelShape, method: str, overlap: bool = False
) -> StepModel | None:
    """The step model of ``rows`` (the same setup on the same card), or None when none of them
    measured its step's parts. ``overlap``: the rows ran on a card (module doc)."""
    points: list[tuple[float, float]] = []
    floor_times: list[float] = []
    fixed: list[float] = []
    warm: list[float] = []
    floors = 0
    for r in rows:
        parts = row_parts(r)
        if parts is None:
            continue
        rs, gc = _row_shape(shape, r), bool(r.get("gradient_checkpointing"))
        flops = pass_flops(rs, method, gc, parts["tokens"], parts["tokens_x_len"])
        if flops <= 0:
            continue
        points.append((flops, float(parts["pass_s"])))
        fixed.append(float(parts["fixed_step_s"]))
        warm.append(_num(parts.get("warmup_s")) or 0.0)
        floor_s, floor_n = _num(parts.get("floor_s")), _num(parts.get("floor_tokens"))
        if floor_s and floor_n:
            if overlap:
                floor_times.append(floor_s)
            else:
                points.append((pass_flops(rs, method, gc, floor_n, floor_n * floor_n), floor_s))
            floors += 1
    if not points:
        return None
    n = len(fixed)
    if overlap:
        s_per_flop, fixed_pass, how = _overlapped(points, floor_times)
        words = f"steps measured by parts: {how}, {sum(fixed) / n * 1e3:.3g} ms per step outside the passes"
        return StepModel(
            seconds_per_flop=s_per_flop,
            fixed_pass_s=fixed_pass,
            fixed_step_s=sum(fixed) / n,
            warmup_s=sum(warm) / n,
            words=words,
            overlap=True,
        )
    fit = line_fit(points) if len({round(x, -3) for x, _ in points}) >= 2 else None
    if fit is not None and fit[0] > 0:
        s_per_flop, fixed_pass = fit[0], max(0.0, fit[1])
        how = (
            f"{fixed_pass * 1e3:.3g} ms fixed per micro batch as the pass floor{'s' if floors > 1 else ''} measured it"
            if floors
            else f"{fixed_pass * 1e3:.3g} ms fixed per micro batch, fitted over the rows' sizes"
        )
    else:
        s_per_flop = sum(t for _, t in points) / sum(f for f, _ in points)
        fixed_pass = 0.0
        how = (
            "no fixed cost per micro batch (the run's pass took no longer than its pass floor: "
            "its time did not grow with its work)"
            if floors
            else "no fixed cost per micro batch (one size measured, no pass floor)"
        )
    fixed_step = sum(fixed) / n
    words = f"steps measured by parts: {how}, {fixed_step * 1e3:.3g} ms per step outside the passes"
    return StepModel(
        seconds_per_flop=s_per_flop,
        fixed_pass_s=fixed_pass,
        fixed_step_s=fixed_step,
        warmup_s=sum(warm) / n,
        words=words,
    )
