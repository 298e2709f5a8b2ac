"""The measured ranking (``fttui plan --measure N``, issue 43): the setups that fit, in forecast
order, each run for real for a warm-up step and ``N`` timed steps at the longest real batch (one
recorded run each, as ``--verify``'s), then ranked by the measured seconds per optimizer step.

The pure part (:func:`correction`, :func:`stop_reason`, :func:`rerank`, :func:`measured_table`)
decides from the trials so far; :func:`measure` launches them
(:func:`fttui.core.experiments.planning.trial_run`). Every setup of a plan keeps the effective
batch, so their seconds per optimizer step compare directly.

When to stop: a ``budget_s`` spent (no trial is started after it; the running one is ended), or
when no setup left can beat the best measured one: each left setup's forecast, times the lowest
measured/forecast ratio the measured ones showed (the most favourable error), less
:data:`NOISE` (what two timings of one setup differ by), is not below the best measured step.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fttui.core.base.event_records import Event, StepEvent
from fttui.core.experiments.forecast import duration_words
from fttui.core.experiments.plan import Budget, Option, PlanError
from fttui.core.profiles.typed import Profile

__all__ = [
    "NOISE",
    "MEASURED_HEADERS",
    "Trial",
    "correction",
    "measure",
    "measured_table",
    "parse_budget",
    "rerank",
    "step_seconds",
    "stop_reason",
]

#: the share by which two timings of one setup can differ (a quiet 2-core machine: 3-4%,
#: docs/plan.md): a left setup whose corrected forecast is within it of the best measured is tried
NOISE = 0.05


@dataclass(frozen=True)
class Trial:
    """One measured setup: its place in the plan (``index``), its forecast and measured seconds
    per optimizer step (``step_s``: the median of the timed steps, the slowest rank's each;
    None when it did not complete), the verdict (``completed``, ``oom``, ``failed``,
    ``cancelled``, ``timeout``), its run and the trial's wall time, launch included."""

    index: int
    setup: str
    settings: dict[str, Any] = field(default_factory=dict)
    forecast_s: float | None = None
    step_s: float | None = None
    status: str = "failed"
    run_id: str = ""
    wall_s: float = 0.0

    @property
    def measured(self) -> bool:
        return self.status == "completed" and self.step_s is not None and self.step_s > 0

    @property
    def ratio(self) -> float | None:
        """Measured over forecast step time (None without both)."""
        if not self.measured or not self.forecast_s or self.step_s is None:
            return None
        return self.step_s / self.forecast_s

    @property
    def error(self) -> float | None:
        """The forecast's error: (forecast - measured) / measured (negative: forecast too fast)."""
        if not self.measured or self.forecast_s is None or self.step_s is None:
            return None
        return (self.forecast_s - self.step_s) / self.step_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "setup": self.setup,
            "settings": dict(self.settings),
            "forecast_step_s": self.forecast_s,
            "measured_step_s": self.step_s,
            "forecast_error": None if self.error is None else round(self.error, 4),
            "status": self.status,
            "run_id": self.run_id,
            "wall_s": round(self.wall_s, 3),
        }


def parse_budget(text: str) -> float:
    """``--budget``: ``90s``, ``10m``, ``1.5h`` or plain seconds, above 0."""
    t = (text or "").strip().lower()
    scale = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
    unit = next((u for u in ("min", "s", "m", "h") if t.endswith(u)), "")
    try:
        value = float(t[: len(t) - len(unit)] if unit else t) * scale.get(unit, 1.0)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value <= 0:
        raise PlanError(f"--budget {text}: give a time above 0, e.g. 90s, 10m or 1h")
    return value


def correction(trials: Sequence[Trial]) -> float | None:
    """The lowest measured/forecast ratio of the measured trials (None: none measured with a
    forecast): a left setup's forecast times it is the fastest it can be, by the errors seen."""
    ratios = [r for r in (t.ratio for t in trials) if r is not None]
    return min(ratios) if ratios else None


def stop_reason(
    left: Sequence[float | None],
    trials: Sequence[Trial],
    elapsed_s: float = 0.0,
    budget_s: float | None = None,
    noise: float = NOISE,
    left_kinds: Sequence[str] | None = None,
) -> str | None:
    """Why to start no further trial, in words, or None to go on. ``left``: the forecast step
    seconds of the setups not yet tried, in order (None: no forecast, never ruled out);
    ``trials``: those tried; ``elapsed_s`` of ``budget_s`` spent. ``left_kinds``: the left
    setups' sharding kinds; a left setup of a kind already measured is corrected by that kind's
    own most favourable error (the uncalibrated forecast does not tell the kinds apart: their
    errors differ by kind), one of a kind not yet measured by the lowest of all."""
    if not left:
        return "every setup that fits was measured"
    if budget_s is not None and elapsed_s >= budget_s:
        many = "s" if len(left) != 1 else ""
        return f"the budget of {duration_words(budget_s)} is spent ({len(left)} setup{many} not measured)"
    best = min((t.step_s for t in trials if t.measured and t.step_s is not None), default=None)
    ratio = correction(trials)
    if best is None or ratio is None or any(f is None for f in left):
        return None
    kinds: Sequence[str | None] = list(left_kinds) if left_kinds is not None else [None] * len(left)
    own: dict[str | None, float | None] = {
        k: correction([t for t in trials if t.settings.get("sharding") == k]) for k in set(kinds) if k is not None
    }
    corrected = [f * (own.get(k) or ratio) for f, k in zip(left, kinds) if f is not None]
    fastest = min(corrected) * (1.0 - noise)
    if fastest >= best:
        how = (
            "its kind's measured error (else the lowest)" if any(own.values()) else f"the measured error (x{ratio:.2f})"
        )
        return (
            f"no setup left can beat the best measured {best:.3g} s/step: the fastest left, forecast with "
            f"{how}, less {noise:.0%}, is {fastest:.3g} s/step"
        )
    return None


def rerank(trials: Sequence[Trial]) -> list[Trial]:
    """The trials by measured step time, fastest first; those not measured after, in plan order."""
    done = sorted((t for t in trials if t.measured), key=lambda t: (t.step_s, t.index))
    return done + sorted((t for t in trials if not t.measured), key=lambda t: t.index)


#: the measured ranking's table (the CLI prints it)
MEASURED_HEADERS = ("rank", "plan #", "setup", "forecast/step", "measured/step", "forecast error", "verdict", "run")


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g} s"


def measured_table(trials: Sequence[Trial]) -> list[list[str]]:
    """The rows of :data:`MEASURED_HEADERS`, re-ranked (:func:`rerank`)."""
    out = []
    for i, t in enumerate(rerank(trials), 1):
        out.append(
            [
                str(i) if t.measured else "-",
                str(t.index + 1),
                t.setup,
                _secs(t.forecast_s),
                _secs(t.step_s),
                "-" if t.error is None else f"{t.error:+.0%}",
                t.status,
                t.run_id,
            ]
        )
    return out


def step_seconds(events: Sequence[Event], warmup: int = 1) -> float | None:
    """The median seconds of the optimizer steps after ``warmup``, each the slowest rank's
    (the step records of a run's ``events.jsonl``); None when no timed step was recorded."""
    per_step: dict[int, float] = {}
    for ev in events:
        if not isinstance(ev, StepEvent):
            continue
        step, t = ev.step, ev.step_time
        if not isinstance(step, int) or not isinstance(t, int | float) or step <= warmup or t <= 0:
            continue
        per_step[step] = max(per_step.get(step, 0.0), float(t))
    return statistics.median(per_step.values()) if per_step else None


def measure(
    profile: Profile,
    options: Sequence[Option],
    budget: Budget,
    steps: int,
    *,
    warmup: int = 1,
    budget_s: float | None = None,
    trial_timeout_s: float | None = None,
    on_result: Callable[[Trial], Any] | None = None,
    noise: float = NOISE,
    stop: Callable[[], bool] | None = None,
    on_start: Callable[[int], Any] | None = None,
) -> tuple[list[Trial], str]:
    """``--measure N``: run the setups that fit in plan order, each ``warmup`` + ``steps`` steps
    (:func:`fttui.core.experiments.planning.trial_run`), until :func:`stop_reason` says stop.
    Returns the trials (plan order) and why it stopped. A stop asked (``stop()`` true; without
    ``stop``, Ctrl-C during the call, :class:`~fttui.core.experiments.ctrl_c_flag.CtrlCFlag`) ends
    the running trial (cancelled, its run over, even one being launched) and the measuring,
    keeping the trials before it. ``on_start(index)`` is called as a trial starts (its place in
    ``options``), ``on_result(trial)`` as it ends (the app's plan screen fills its column live)."""
    if stop is None:
        from fttui.core.experiments.ctrl_c_flag import CtrlCFlag

        with CtrlCFlag() as flag:
            return measure(
                profile,
                options,
                budget,
                steps,
                warmup=warmup,
                budget_s=budget_s,
                trial_timeout_s=trial_timeout_s,
                on_result=on_result,
                noise=noise,
                stop=flag,
                on_start=on_start,
            )
    from fttui.core.experiments.datalens import data_stats
    from fttui.core.experiments.planning import TrialInterrupted, trial_group, trial_run
    from fttui.core.run.files.events import read_events

    if steps < 1:
        raise PlanError(f"--measure {steps}: give the number of timed steps, 1 or more")
    fitting = [(i, o) for i, o in enumerate(options) if o.fits]
    if not fitting:
        raise PlanError(f"--measure {steps}: no setup fits; nothing to measure")
    longest = int(data_stats(profile, 1)[0].tokens["max"])
    group = trial_group(profile)
    started = time.monotonic()
    trials: list[Trial] = []
    reason = ""
    for n, (i, o) in enumerate(fitting):
        if stop():  # between two trials
            reason = "interrupted (Ctrl-C) between two trials"
            break
        left = [f.step_seconds for _, f in fitting[n:]]
        kinds = [f.sharding for _, f in fitting[n:]]
        why = stop_reason(left, trials, time.monotonic() - started, budget_s, noise, left_kinds=kinds)
        if why is not None:
            reason = why
            break
        timeout = trial_timeout_s
        if budget_s is not None:
            rest = max(1.0, budget_s - (time.monotonic() - started))
            timeout = rest if timeout is None else min(timeout, rest)
        if on_start is not None:
            on_start(i)
        t0 = time.monotonic()
        interrupted = False
        try:
            rd, status = trial_run(
                profile, o, budget, warmup + steps, group=group, timeout_s=timeout, longest=longest, stop=stop
            )
        except TrialInterrupted as ended:
            rd, status, interrupted = ended.rundir, "cancelled", True
        step_s = step_seconds(read_events(rd.events_path), warmup) if rd is not None else None
        trial = Trial(
            index=i,
            setup=o.label(),
            settings=o.settings(),
            forecast_s=o.step_seconds,
            step_s=step_s if status == "completed" else None,
            status=status,
            run_id=rd.run_id if rd is not None else "",
            wall_s=time.monotonic() - t0,
        )
        trials.append(trial)
        if on_result is not None:
            on_result(trial)
        if interrupted:
            reason = "interrupted (Ctrl-C): the running trial was ended"
            break
    else:
        reason = "every setup that fits was measured"
    if stop() and not reason.startswith("interrupted"):  # asked as the last trial ended
        reason = f"interrupted (Ctrl-C) after the last trial ({reason})"
    return trials, reason
