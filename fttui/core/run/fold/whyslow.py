"""Why a run is slow, in words (docs/performance.md, "Why slow"): the leading cause among the input
pipeline (the steps' time spent waiting for their batches), the run's cards held below their
clock (NVML's clock event reasons: power cap, thermal, hardware slowdown, sync boost...), cards
left idle, and step-time outliers.

Each cause is given the share of the run's time it costs, so that causes of different kinds
compare:

* input pipeline: the steady steps' data wait over their step time (the worker's Trainer callback
  times ``get_batch_samples``, which fetches a step's batches);
* a card held below its clock: ``1 - SM clock / max SM clock``, averaged over the samples taken
  while training, counted when a slowing reason is set (idle and application-clock reasons are
  not slowdowns);
* an idle card: half of ``1 - utilisation`` (NVML's utilisation is the share of time a kernel
  ran; a card waiting on the host or the network is idle too, so it stays a weaker sign), when no
  data wait explains it;
* step-time outliers: the time the steps over :data:`OUTLIER_FACTOR` x the median took beyond it.

The leading cause is the largest share of at least :data:`MIN_SHARE`; none is named under it.
Pure.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from fttui.core.base.event_records import StepEvent
from fttui.core.run.files.sample_records import Sample
from fttui.monitor import num

__all__ = ["MIN_SHARE", "OUTLIER_FACTOR", "SLOWING", "Cause", "CardSpeed", "SpeedFold", "Speed", "causes", "why_slow"]

MIN_SHARE = 0.10
OUTLIER_FACTOR = 2.0
MIN_STEPS = 5  # steady steps before anything is said of them
#: clock event reasons that slow a card (idle, application clocks and display clock do not)
SLOWING = (
    "power cap",
    "thermal (software)",
    "thermal (hardware)",
    "hardware slowdown",
    "power brake",
    "sync boost",
    "board limit",
    "reliability",
)


@dataclass(frozen=True)
class Cause:
    share: float  # of the run's time
    text: str


@dataclass
class CardSpeed:
    """One card over the samples taken while the run trained."""

    index: int
    samples: int = 0
    util_sum: float = 0.0
    util_n: int = 0
    clock_sum: float = 0.0  # SM clock / its max
    clock_n: int = 0
    reasons: dict[str, int] = field(default_factory=dict)  # reason -> samples it was set in
    power_cap_w: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None

    @property
    def util(self) -> float | None:
        return self.util_sum / self.util_n if self.util_n else None

    @property
    def clock_ratio(self) -> float | None:
        return self.clock_sum / self.clock_n if self.clock_n else None


@dataclass(frozen=True)
class Speed:
    """The run's speed figures: the steady steps' data wait share, their median step time, the
    outliers, and each card's figures over the training samples."""

    steps: int = 0
    data_wait_share: float | None = None
    median_step_s: float | None = None
    outliers: int = 0
    outlier_share: float | None = None
    cards: tuple[CardSpeed, ...] = ()


class SpeedFold:
    """Folds the step events (after ``warmup`` steps) and the GPU samples taken once a step was seen."""

    def __init__(self, warmup: int = 1, keep: int = 240) -> None:
        self.warmup = warmup
        self.wait = 0.0
        self.wait_time = 0.0  # step time of the steps that said their data wait
        self.times: deque[float] = deque(maxlen=keep)
        self.training = False
        self.cards: dict[int, CardSpeed] = {}

    def on_step(self, ev: StepEvent, step: int) -> None:
        self.training = True
        t = num(ev.step_time)
        if step <= self.warmup or t is None or t <= 0:
            return
        self.times.append(t)
        w = num(ev.data_wait_s)
        if w is not None:
            self.wait += min(w, t)
            self.wait_time += t

    def on_sample(self, sample: Sample) -> None:
        gpu = sample.gpu
        if not self.training or gpu is None:
            return
        for g in gpu.gpus:
            c = self.cards.setdefault(g.index, CardSpeed(g.index))
            c.samples += 1
            if g.util_pct is not None:
                c.util_sum, c.util_n = c.util_sum + g.util_pct, c.util_n + 1
            clock, top = g.sm_clock_mhz, g.sm_clock_max_mhz
            if clock is not None and top:
                c.clock_sum, c.clock_n = c.clock_sum + min(1.0, clock / top), c.clock_n + 1
                c.sm_clock_mhz, c.sm_clock_max_mhz = clock, top
            for r in g.throttle:
                c.reasons[r] = c.reasons.get(r, 0) + 1
            for key in ("power_cap_w", "power_w", "temp_c"):
                v = getattr(g, key)
                if v is not None:
                    setattr(c, key, v)

    def fields(self) -> Speed:
        times = list(self.times)
        med = statistics.median(times) if len(times) >= MIN_STEPS else None
        out = [t for t in times if med is not None and t > OUTLIER_FACTOR * med]
        total = sum(times)
        return Speed(
            steps=len(times),
            data_wait_share=self.wait / self.wait_time if self.wait_time > 0 and len(times) >= MIN_STEPS else None,
            median_step_s=med,
            outliers=len(out),
            outlier_share=sum(t - med for t in out) / total if med is not None and total > 0 else None,
            cards=tuple(CardSpeed(**vars(c)) for c in self.cards.values()),
        )


def _card_cause(c: CardSpeed, data_share: float) -> Cause | None:
    held = [r for r in SLOWING if c.reasons.get(r, 0) * 2 >= c.samples]  # set in half the samples or more
    ratio = c.clock_ratio
    clocks = (
        f" (SM {c.sm_clock_mhz:.0f} of {c.sm_clock_max_mhz:.0f} MHz)"
        if c.sm_clock_mhz is not None and c.sm_clock_max_mhz
        else ""
    )
    if held:
        share = 1.0 - ratio if ratio is not None else MIN_SHARE
        first = held[0]
        if first == "power cap":
            at = f" at {c.power_cap_w:.0f} W" if c.power_cap_w is not None else ""
            text = f"GPU {c.index} power-capped{at}{clocks}"
        elif first.startswith("thermal"):
            at = f" at {c.temp_c:.0f} C" if c.temp_c is not None else ""
            text = f"GPU {c.index} slowed by heat{at}, {first}{clocks}"
        elif first == "sync boost":
            text = f"GPU {c.index} held to its group's slowest clock (sync boost){clocks}"
        else:
            text = f"GPU {c.index} slowed: {first}{clocks}"
        return Cause(share, text)
    util = c.util
    if util is not None and util < 100 and data_share < MIN_SHARE:
        return Cause(
            0.5 * (1 - util / 100),
            f"GPU {c.index} busy {util:.0f}% of the time (waiting on the host or the other ranks)",
        )
    return None


def causes(speed: Speed, run_cards: tuple[int, ...] | None = None) -> list[Cause]:
    """Every cause found, the largest first. ``run_cards``: the NVML indices of the run's cards
    (``None``: every card sampled)."""
    out = []
    data = speed.data_wait_share or 0.0
    if speed.data_wait_share is not None:
        out.append(Cause(data, f"input pipeline: {100 * data:.0f}% of step time waiting for data"))
    for c in speed.cards:
        if run_cards is None or c.index in run_cards:
            cause = _card_cause(c, data)
            if cause is not None:
                out.append(cause)
    if speed.outliers and speed.outlier_share is not None and speed.median_step_s is not None:
        out.append(
            Cause(
                speed.outlier_share,
                f"step-time outliers: {speed.outliers} of {speed.steps} steps over "
                f"{OUTLIER_FACTOR:g}x the median {speed.median_step_s:.3g} s",
            )
        )
    out.sort(key=lambda c: -c.share)
    return out


def why_slow(speed: Speed, run_cards: tuple[int, ...] | None = None) -> str | None:
    """The leading cause in words, ``None`` when none costs :data:`MIN_SHARE` of the time."""
    found = causes(speed, run_cards)
    return found[0].text if found and found[0].share >= MIN_SHARE else None
