"""Per-rank progress and the rates derived from it: steady and average rates, seconds per step
and the per-step histories.

Rates (per rank, then summed over ranks for the global figure):

* steady: from the end of step ``warmup_exclude_steps`` to the latest step,
  ``(samples_now - samples_k) / (train_time_now - train_time_k)``. The reference is the latest
  step event with ``step <= warmup_exclude_steps`` (or the rank's first step event if the first
  one it logged is already past warm-up; with ``warmup_exclude_steps <= 0`` it is the start of
  training). Until a rank has a step beyond its reference, its whole-run average is used.
* average: ``samples / train_time`` (latest cumulative figures, ``end`` included).
* ``seconds_per_step``: steady ``(train_time_now - train_time_k) / (step_now - step_k)`` per
  rank (whole-run ``train_time / step`` as fallback); the global figure is the slowest rank's.
* histories (instantaneous, one entry per optimizer step): loss of the lowest rank that logged
  the step; samples/s and tokens/s = per rank ``delta cumulative / step time`` (``step_time``
  when one step passed since the rank's previous step event, else the ``train_time`` delta),
  summed over the ranks that logged the step. The newest step is left out of the rate
  histories until every rank seen so far has logged it, so the last point never dips.

Pure and stdlib only; ``fttui.core.run.fold.state.RunState`` drives it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fttui.core.run.fold.snapshot import rate, sum_known

__all__ = ["Point", "RankProgress", "Rates", "rates", "rank_token_rates", "StepHistory"]


class Point:
    """One rank's cumulative figures at the end of one step."""

    __slots__ = ("samples", "step", "tokens", "tokens_padded", "train_time")

    def __init__(
        self,
        step: int,
        samples: float | None,
        tokens: float | None,
        tokens_padded: float | None,
        train_time: float | None,
    ) -> None:
        self.step = step
        self.samples = samples
        self.tokens = tokens
        self.tokens_padded = tokens_padded
        self.train_time = train_time


ORIGIN = (0, 0.0, 0.0, 0.0, 0.0)  # the start of training, as a Point's arguments


class RankProgress:
    """One rank's progress: its warm-up reference, its latest step and latest figures."""

    __slots__ = ("cur", "epoch", "loss", "lr", "ref", "samples", "tokens", "tokens_padded", "total_steps", "train_time")

    def __init__(self) -> None:
        self.ref: Point | None = None  # warm-up boundary
        self.cur: Point | None = None  # latest step event
        self.samples: float | None = None  # latest cumulative figures (step or end)
        self.tokens: float | None = None
        self.tokens_padded: float | None = None
        self.train_time: float | None = None
        self.loss: float | None = None
        self.lr: float | None = None
        self.epoch: float | None = None
        self.total_steps: int | None = None

    def advance(self, point: Point, warmup_exclude_steps: int) -> None:
        """A new step event (newer than ``cur``): move the reference and the figures."""
        k = warmup_exclude_steps
        if k <= 0 and self.ref is None:
            self.ref = Point(*ORIGIN)
        elif point.step <= k or self.ref is None:
            self.ref = point
        self.cur = point
        for attr in ("samples", "tokens", "tokens_padded", "train_time"):
            v = getattr(point, attr)
            if v is not None:
                setattr(self, attr, v)


@dataclass(frozen=True)
class Rates:
    samples_per_s: float | None
    tokens_per_s: float | None
    tokens_padded_per_s: float | None
    samples_per_s_avg: float | None
    tokens_per_s_avg: float | None
    tokens_padded_per_s_avg: float | None
    seconds_per_step: float | None
    steady: bool = False  # every rank has steps beyond its warm-up: the figures are steady ones


def rates(ranks: Iterable[RankProgress]) -> Rates:
    """The global rates: per rank steady (average as fallback) and average, summed; seconds per
    step of the slowest rank."""
    steady_s: list[float | None] = []
    steady_t: list[float | None] = []  # each rank's, in order: rank_token_rates keeps them apart
    steady_tp: list[float | None] = []
    avg_s: list[float | None] = []
    avg_t: list[float | None] = []
    avg_tp: list[float | None] = []
    sps: list[float] = []
    steady = True
    for r in ranks:
        a_s = rate(r.samples, 0.0, r.train_time, 0.0)
        a_t = rate(r.tokens, 0.0, r.train_time, 0.0)
        a_tp = rate(r.tokens_padded, 0.0, r.train_time, 0.0)
        avg_s.append(a_s)
        avg_t.append(a_t)
        avg_tp.append(a_tp)
        ref, cur = r.ref, r.cur
        if (
            ref is not None
            and cur is not None
            and cur.step > ref.step
            and cur.train_time is not None
            and ref.train_time is not None
            and rate(0.0, 0.0, cur.train_time, ref.train_time) is not None  # time passed
        ):
            steady_s.append(rate(cur.samples, ref.samples, cur.train_time, ref.train_time))
            steady_t.append(rate(cur.tokens, ref.tokens, cur.train_time, ref.train_time))
            steady_tp.append(rate(cur.tokens_padded, ref.tokens_padded, cur.train_time, ref.train_time))
            sps.append((cur.train_time - ref.train_time) / (cur.step - ref.step))
        else:
            steady = False
            steady_s.append(a_s)
            steady_t.append(a_t)
            steady_tp.append(a_tp)
            if cur is not None and cur.step > 0 and r.train_time is not None and r.train_time > 0:
                sps.append(r.train_time / cur.step)
    return Rates(
        samples_per_s=sum_known(steady_s),
        tokens_per_s=sum_known(steady_t),
        tokens_padded_per_s=sum_known(steady_tp),
        samples_per_s_avg=sum_known(avg_s),
        tokens_per_s_avg=sum_known(avg_t),
        tokens_padded_per_s_avg=sum_known(avg_tp),
        seconds_per_step=max(sps) if sps else None,
        steady=steady and bool(sps),
    )


def rank_token_rates(ranks: Mapping[int, RankProgress]) -> dict[int, float]:
    """Each rank's steady tokens/s, the figures :func:`rates` sums (its whole-run average until a
    step beyond its warm-up reference); a rank without one is left out."""
    out: dict[int, float] = {}
    for k, r in ranks.items():
        ref, cur = r.ref, r.cur
        if (
            ref is not None
            and cur is not None
            and cur.step > ref.step
            and rate(0.0, 0.0, cur.train_time, ref.train_time) is not None
        ):
            v = rate(cur.tokens, ref.tokens, cur.train_time, ref.train_time)
        else:
            v = rate(r.tokens, 0.0, r.train_time, 0.0)
        if v is not None:
            out[k] = v
    return out


class StepHistory:
    """The last ``maxlen`` optimizer steps: loss, samples/s and tokens/s of each."""

    def __init__(self, maxlen: int) -> None:
        # entries: [step, loss_rank, loss, samples_rate, tokens_rate, nranks]
        self._hist: deque[list[Any]] = deque(maxlen=maxlen)

    def add(
        self, rank: int, step: int, prev: Point | None, cur: Point, step_time: float | None, loss: float | None
    ) -> None:
        """One rank's step event (``prev``: the rank's previous step, ``None`` for its first)."""
        if prev is None:
            base = Point(*ORIGIN)
            nsteps = step
        else:
            base = prev
            nsteps = step - prev.step
        if nsteps == 1 and step_time is not None and step_time > 0:
            dt: float | None = step_time
        elif cur.train_time is not None and base.train_time is not None:
            dt = cur.train_time - base.train_time
        else:
            dt = step_time
        srate = trate = None
        if dt is not None and dt > 0:
            if cur.samples is not None and base.samples is not None:
                srate = (cur.samples - base.samples) / dt
            if cur.tokens is not None and base.tokens is not None:
                trate = (cur.tokens - base.tokens) / dt
        entry = None
        for e in reversed(self._hist):
            if e[0] == step:
                entry = e
                break
            if e[0] < step:
                break
        if entry is None:
            if self._hist and self._hist[-1][0] > step:
                return  # too old to place
            self._hist.append([step, rank, loss, srate, trate, 1])
            return
        if loss is not None and (entry[2] is None or rank < entry[1]):
            entry[1], entry[2] = rank, loss
        if srate is not None:
            entry[3] = srate if entry[3] is None else entry[3] + srate
        if trate is not None:
            entry[4] = trate if entry[4] is None else entry[4] + trate
        entry[5] += 1

    def series(self, nranks: int) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
        """(loss, samples/s, tokens/s) histories; the newest step stays out of the rate histories
        until all ``nranks`` ranks logged it."""
        hist = list(self._hist)
        rate_hist = hist
        if hist and hist[-1][5] < nranks:
            rate_hist = hist[:-1]
        return (
            tuple(e[2] for e in hist if e[2] is not None),
            tuple(e[3] for e in rate_hist if e[3] is not None),
            tuple(e[4] for e in rate_hist if e[4] is not None),
        )
