"""The steps-and-throughput part of :class:`fttui.core.run.fold.state.RunState`: each rank's progress
(steps, samples, tokens, training time; two processes of one rank kept apart,
:mod:`fttui.core.run.fold.ranks`), the rates and the ETA (:mod:`fttui.core.run.fold.rates`), the loss and
learning rate, the histories, and what runs as the ``start`` event says (world size, batch,
sequence length, parameters, configuration, environment, the model's shape). Pure."""

from __future__ import annotations

from typing import Any

from fttui.core.base.event_records import EndEvent, Event, ForecastEvent, StartEvent, StepEvent
from fttui.core.models.flops import ModelShape
from fttui.core.run.fold.perf import model_shape
from fttui.core.run.fold.ranks import RankSlots
from fttui.core.run.fold.rates import Point, RankProgress, StepHistory, rank_token_rates, rates
from fttui.core.run.fold.snapshot import sum_known, to_int
from fttui.monitor import num

__all__ = ["ProgressFold"]


class ProgressFold:
    """``slot(event)`` keys an event's figures; ``on_start`` / ``on_step`` / ``on_end`` fold the
    training's events; ``fields(status)`` gives the snapshot's progress fields."""

    def __init__(self, warmup_exclude_steps: int, history: int) -> None:
        self.warmup_exclude_steps = warmup_exclude_steps
        self.ranks: dict[int, RankProgress] = {}  # by slot: the rank, or a second process's own
        self.slots = RankSlots()
        self.hist = StepHistory(history)
        self.total_steps: int | None = None
        self.last_progress_t: float | None = None
        self.start: StartEvent | None = None
        self.start_rank: int | None = None
        self.shape: ModelShape | None = None  # the model's shape, from the start event
        self.forecast: ForecastEvent | None = None  # the launch's time forecast (a ``forecast`` event)

    def slot(self, event: Event) -> int:
        return self.slots.slot(event)  # fttui.core.run.fold.ranks: two processes of one rank stay two

    def progress(self, rank: int) -> RankProgress:
        r = self.ranks.get(rank)
        if r is None:
            r = self.ranks[rank] = RankProgress()
        return r

    def _total(self, ev: StartEvent | StepEvent) -> int | None:
        ts = to_int(ev.total_steps)
        if ts is not None and ts > 0:
            self.total_steps = ts
            return ts
        return None

    def on_start(self, ev: StartEvent, rank: int) -> None:
        if self.start is None or (self.start_rank is not None and rank < self.start_rank):
            self.start = ev
            self.start_rank = rank
            self.shape = model_shape(ev)
        self._total(ev)

    def on_forecast(self, ev: ForecastEvent) -> None:
        self.forecast = ev

    def _forecast_eta(self, step: int | None, total: int | None) -> float | None:
        """The ETA from the launch's forecast, before the measured rate is steady: the forecast's
        step time for the steps left (and its warm-up before the first step)."""
        fc = self.forecast
        if fc is None:
            return None
        step_s, warm = num(fc.step_seconds), num(fc.warmup_seconds) or 0.0
        total = total or to_int(fc.steps)
        if step_s is None or total is None:
            return None
        left = max(0, total - (step or 0)) * step_s
        return left + (warm if not step else 0.0)

    def on_step(self, ev: StepEvent, rank: int, step: int, t: float | None) -> bool:
        """Fold one step line; False for a duplicate or out-of-order line (counters already past it)."""
        r = self.progress(rank)
        if t is not None:
            self.last_progress_t = t if self.last_progress_t is None else max(self.last_progress_t, t)
        if r.cur is not None and step <= r.cur.step:
            return False
        point = Point(step, num(ev.samples), num(ev.tokens), num(ev.tokens_padded), num(ev.train_time))
        prev = r.cur
        r.advance(point, self.warmup_exclude_steps)
        loss = num(ev.loss)
        if loss is not None:
            r.loss = loss
        lr = num(ev.lr)
        if lr is not None:
            r.lr = lr
        epoch = num(ev.epoch)
        if epoch is not None:
            r.epoch = epoch
        ts = self._total(ev)
        if ts is not None:
            r.total_steps = ts
        self.hist.add(rank, step, prev, point, num(ev.step_time), loss)
        return True

    def on_end(self, ev: EndEvent, rank: int) -> None:
        r = self.progress(rank)
        for attr, value in (
            ("samples", ev.samples),
            ("tokens", ev.tokens),
            ("tokens_padded", ev.tokens_padded),
            ("train_time", ev.train_time),
        ):
            v = num(value)
            if v is not None:
                setattr(r, attr, v)
        step = to_int(ev.step)
        if step is not None and (r.cur is None or step > r.cur.step):
            # keep the steady reference untouched; only the position moves
            r.cur = Point(step, r.samples, r.tokens, r.tokens_padded, r.train_time)

    def step(self) -> int | None:
        steps = [r.cur.step for r in self.ranks.values() if r.cur is not None]
        return max(steps) if steps else None

    def _lead(self) -> RankProgress | None:
        if not self.ranks:
            return None
        return self.ranks[0] if 0 in self.ranks else self.ranks[min(self.ranks)]

    def fields(self, status: str) -> dict[str, Any]:
        ranks = self.ranks
        step = self.step()
        lead = self._lead()
        start = self.start or StartEvent()
        rt = rates(ranks.values())
        total = self.total_steps
        eta_source = None
        if status == "completed":
            eta: float | None = 0.0
        elif status in ("starting", "running") and self.forecast is not None and not rt.steady:
            eta = self._forecast_eta(step, total)  # the launch's forecast until the rate is steady
            eta_source = "forecast" if eta is not None else None
        elif status in ("starting", "running") and total is not None and rt.seconds_per_step is not None:
            eta, eta_source = max(0, total - (step or 0)) * rt.seconds_per_step, "measured"
        else:
            eta = None
        train_times = [r.train_time for r in ranks.values() if r.train_time is not None]
        epochs = [r.epoch for r in ranks.values() if r.epoch is not None]
        loss_hist, sps_hist, tps_hist = self.hist.series(len(ranks))
        world = to_int(start.world_size)
        clash = self.slots.clashes()
        if (world is None and ranks) or clash:  # processes of one claimed rank each count
            world = max(world or 0, self.slots.processes(), len(ranks))
        config, env = start.config, start.env
        return dict(
            step=step,
            total_steps=total,
            epoch=max(epochs) if epochs else None,
            progress=min(1.0, max(0.0, (step or 0) / total)) if total else None,
            samples=sum_known([r.samples for r in ranks.values()]),
            tokens=sum_known([r.tokens for r in ranks.values()]),
            tokens_padded=sum_known([r.tokens_padded for r in ranks.values()]),
            loss=lead.loss if lead else None,
            lr=lead.lr if lead else None,
            last_progress_t=self.last_progress_t,
            train_time=max(train_times) if train_times else None,
            samples_per_s=rt.samples_per_s,
            tokens_per_s=rt.tokens_per_s,
            tokens_padded_per_s=rt.tokens_padded_per_s,
            samples_per_s_avg=rt.samples_per_s_avg,
            tokens_per_s_avg=rt.tokens_per_s_avg,
            tokens_padded_per_s_avg=rt.tokens_padded_per_s_avg,
            seconds_per_step=rt.seconds_per_step,
            eta_s=eta,
            eta_source=eta_source,
            loss_history=loss_hist,
            samples_per_s_history=sps_hist,
            tokens_per_s_history=tps_hist,
            world_size=world,
            ranks=tuple(sorted(ranks)),
            rank_clash=clash,
            micro_batch=to_int(start.micro_batch),
            grad_accum=to_int(start.grad_accum),
            max_seq_len=to_int(start.max_seq_len),
            num_samples=to_int(start.num_samples),
            params_total=to_int(start.params_total),
            params_trainable=to_int(start.params_trainable),
            config=dict(config) if isinstance(config, dict) else None,
            env=dict(env) if isinstance(env, dict) else None,
            rank_tokens_per_s=rank_token_rates(ranks),
            rank_tokens={k: r.tokens for k, r in ranks.items() if r.tokens is not None},
            rank_train_time={k: r.train_time for k, r in ranks.items() if r.train_time is not None},
            model_shape=self.shape,
        )
