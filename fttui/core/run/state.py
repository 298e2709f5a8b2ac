"""``RunState``: a pure fold of run events and resource samples into a ``RunSnapshot``.

No I/O, stdlib only. See docs/architecture.md, sections "Events" and "Monitor core".

Rates (per rank, then summed over ranks for the global figure):

* steady: from the end of step ``warmup_exclude_steps`` to the latest step,
  ``(samples_now - samples_k) / (train_time_now - train_time_k)``. The reference is the latest
  step event with ``step <= warmup_exclude_steps`` (or the rank's first step event if the first
  one it logged is already past warm-up; with ``warmup_exclude_steps <= 0`` it is the start of
  training). Until a rank has a step beyond its reference, its whole-run average is used.
* average: ``samples / train_time`` (latest cumulative figures, ``end`` included).
* ``seconds_per_step``: steady ``(train_time_now - train_time_k) / (step_now - step_k)`` per
  rank (whole-run ``train_time / step`` as fallback); the global figure is the slowest rank's.
* ``eta_s``: ``(total_steps - step) * seconds_per_step``; 0 once completed, ``None`` when the
  total is unknown or the run failed.
* histories (instantaneous, one entry per optimizer step): loss of the lowest rank that logged
  the step; samples/s and tokens/s = per rank ``delta cumulative / step time`` (``step_time``
  when one step passed since the rank's previous step event, else the ``train_time`` delta),
  summed over the ranks that logged the step. The newest step is left out of the rate
  histories until every rank seen so far has logged it, so the last point never dips.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from fttui.monitor.samplers import GpuSnapshot, HostSnapshot, _num

__all__ = ["RunState", "RunSnapshot", "STATUS_ORDER"]

# Higher wins when several sources disagree; a final status (set_final) always wins.
STATUS_ORDER = {"starting": 0, "running": 1, "completed": 2, "failed": 3, "oom": 4, "cancelled": 5}


def _int(value: Any) -> int | None:
    f = _num(value)
    return None if f is None else int(f)


def _sum(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _rate(num_now: float | None, num_ref: float | None, t_now: float | None, t_ref: float | None) -> float | None:
    if num_now is None or num_ref is None or t_now is None or t_ref is None:
        return None
    dt = t_now - t_ref
    if dt <= 0:
        return None
    return (num_now - num_ref) / dt


@dataclass(frozen=True)
class RunSnapshot:
    # status
    status: str = "starting"
    error: dict[str, Any] | None = None  # {kind, oom_kind, message, step, rank}
    returncode: int | None = None
    signal: int | None = None
    # progress
    step: int | None = None
    total_steps: int | None = None
    epoch: float | None = None
    progress: float | None = None  # 0..1
    samples: float | None = None  # global (summed over ranks)
    tokens: float | None = None
    tokens_padded: float | None = None
    loss: float | None = None  # rank 0 (or lowest rank present)
    lr: float | None = None
    # time
    started_t: float | None = None
    last_t: float | None = None
    last_progress_t: float | None = None  # t of the latest step event (stall detection)
    train_time: float | None = None  # max over ranks
    wall_elapsed: float | None = None
    # rates
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    tokens_padded_per_s: float | None = None
    samples_per_s_avg: float | None = None
    tokens_per_s_avg: float | None = None
    tokens_padded_per_s_avg: float | None = None
    seconds_per_step: float | None = None
    eta_s: float | None = None
    # histories
    loss_history: tuple[float, ...] = ()
    samples_per_s_history: tuple[float, ...] = ()
    tokens_per_s_history: tuple[float, ...] = ()
    # peaks
    gpu_peak_used_mb: dict[int, float] = field(default_factory=dict)
    gpu_peak_proc_mb: dict[int, float] = field(default_factory=dict)
    torch_peak_reserved_mb: dict[int, float] = field(default_factory=dict)
    rank_peak_rss_mb: dict[int, float] = field(default_factory=dict)  # each rank's own peak RSS
    stalled: bool = False  # the supervisor flagged no progress for its stall timeout
    torch_peak_alloc_mb: dict[int, float] = field(default_factory=dict)
    host_peak_tree_rss_mb: float | None = None
    host_peak_ram_used_mb: float | None = None
    # latest resources
    gpu: GpuSnapshot | None = None
    host: HostSnapshot | None = None
    # from the start event
    world_size: int | None = None
    ranks: tuple[int, ...] = ()
    micro_batch: int | None = None
    grad_accum: int | None = None
    max_seq_len: int | None = None
    num_samples: int | None = None
    params_total: int | None = None
    params_trainable: int | None = None
    config: dict[str, Any] | None = None
    env: dict[str, Any] | None = None
    # bookkeeping
    events: int = 0
    samples_seen: int = 0


class _Point:
    __slots__ = ("step", "samples", "tokens", "tokens_padded", "train_time")

    def __init__(self, step: int, samples: float | None, tokens: float | None, tokens_padded: float | None, train_time: float | None) -> None:
        self.step = step
        self.samples = samples
        self.tokens = tokens
        self.tokens_padded = tokens_padded
        self.train_time = train_time


class _Rank:
    __slots__ = ("ref", "cur", "samples", "tokens", "tokens_padded", "train_time", "loss", "lr", "epoch", "total_steps")

    def __init__(self) -> None:
        self.ref: _Point | None = None  # warm-up boundary
        self.cur: _Point | None = None  # latest step event
        self.samples: float | None = None  # latest cumulative figures (step or end)
        self.tokens: float | None = None
        self.tokens_padded: float | None = None
        self.train_time: float | None = None
        self.loss: float | None = None
        self.lr: float | None = None
        self.epoch: float | None = None
        self.total_steps: int | None = None


class RunState:
    """Fold ``events.jsonl`` objects (``apply``) and ``samples.jsonl`` objects
    (``apply_sample``) into a ``RunSnapshot`` (``snapshot()``). Tolerates unknown events,
    missing keys and events from several ranks (``rank``, default 0)."""

    def __init__(self, warmup_exclude_steps: int = 1, history: int = 240) -> None:
        self.warmup_exclude_steps = int(warmup_exclude_steps)
        self.history = max(1, int(history))
        self._ranks: dict[int, _Rank] = {}
        # history entries: [step, loss_rank, loss, samples_rate, tokens_rate, nranks]
        self._hist: deque[list[Any]] = deque(maxlen=self.history)
        self._status = "starting"
        self._final: str | None = None
        self._error: dict[str, Any] | None = None
        self._returncode: int | None = None
        self._signal: int | None = None
        self._start: dict[str, Any] | None = None
        self._start_rank: int | None = None
        self._started_t: float | None = None
        self._last_t: float | None = None
        self._last_progress_t: float | None = None
        self._total_steps: int | None = None
        self._torch_reserved: dict[int, float] = {}
        self._torch_alloc: dict[int, float] = {}
        self._rank_rss: dict[int, float] = {}
        self._stalled = False
        self._gpu_peak_used: dict[int, float] = {}
        self._gpu_peak_proc: dict[int, float] = {}
        self._host_peak_rss: float | None = None
        self._host_peak_ram: float | None = None
        self._gpu_raw: dict[str, Any] | None = None
        self._host_raw: dict[str, Any] | None = None
        self._gpu_obj: GpuSnapshot | None = None
        self._host_obj: HostSnapshot | None = None
        self._events = 0
        self._samples_seen = 0

    # ------------------------------------------------------------------ helpers
    def _touch(self, t: Any) -> float | None:
        tf = _num(t)
        if tf is not None and (self._last_t is None or tf > self._last_t):
            self._last_t = tf
        return tf

    def _set_status(self, status: str) -> None:
        if STATUS_ORDER.get(status, 0) > STATUS_ORDER.get(self._status, 0):
            self._status = status

    def _rank(self, event: dict[str, Any]) -> int:
        r = _int(event.get("rank"))
        return 0 if r is None else r

    # ------------------------------------------------------------------ events
    def apply(self, event: dict[str, Any]) -> None:
        if not isinstance(event, dict):
            return
        name = event.get("event")
        handler = {
            "start": self._on_start,
            "step": self._on_step,
            "end": self._on_end,
            "error": self._on_error,
            "exit": self._on_exit,
            "launch": self._on_launch,
            "stalled": self._on_stalled,
            "resumed": self._on_stalled,
        }.get(name) if isinstance(name, str) else None
        if handler is None:
            return
        self._events += 1
        t = self._touch(event.get("t"))
        handler(event, t)

    def apply_all(self, events: list[dict[str, Any]]) -> None:
        for ev in events:
            self.apply(ev)

    def _on_stalled(self, ev: dict[str, Any], t: float | None) -> None:
        # The supervisor saw no step for its stall timeout while the process lived (or it resumed).
        self._stalled = ev.get("event") == "stalled"

    def _on_launch(self, ev: dict[str, Any], t: float | None) -> None:
        # The supervisor's launch event: elapsed time counts from here (model loading included).
        if t is not None and (self._started_t is None or t < self._started_t):
            self._started_t = t

    def _on_start(self, ev: dict[str, Any], t: float | None) -> None:
        rank = self._rank(ev)
        if self._start is None or (self._start_rank is not None and rank < self._start_rank):
            self._start = ev
            self._start_rank = rank
        if t is not None and (self._started_t is None or t < self._started_t):
            self._started_t = t
        ts = _int(ev.get("total_steps"))
        if ts is not None and ts > 0:
            self._total_steps = ts
        self._set_status("running")

    def _on_step(self, ev: dict[str, Any], t: float | None) -> None:
        step = _int(ev.get("step"))
        if step is None:
            return
        rank = self._rank(ev)
        r = self._ranks.get(rank)
        if r is None:
            r = self._ranks[rank] = _Rank()
        self._set_status("running")
        if t is not None:
            self._last_progress_t = t if self._last_progress_t is None else max(self._last_progress_t, t)
        if r.cur is not None and step <= r.cur.step:
            return  # duplicate or out-of-order line: counters already past it
        point = _Point(step, _num(ev.get("samples")), _num(ev.get("tokens")), _num(ev.get("tokens_padded")), _num(ev.get("train_time")))
        prev = r.cur
        k = self.warmup_exclude_steps
        if k <= 0 and r.ref is None:
            r.ref = _Point(0, 0.0, 0.0, 0.0, 0.0)
        elif step <= k or r.ref is None:
            r.ref = point
        r.cur = point
        for attr in ("samples", "tokens", "tokens_padded", "train_time"):
            v = getattr(point, attr)
            if v is not None:
                setattr(r, attr, v)
        loss = _num(ev.get("loss"))
        if loss is not None:
            r.loss = loss
        lr = _num(ev.get("lr"))
        if lr is not None:
            r.lr = lr
        epoch = _num(ev.get("epoch"))
        if epoch is not None:
            r.epoch = epoch
        ts = _int(ev.get("total_steps"))
        if ts is not None and ts > 0:
            r.total_steps = ts
            self._total_steps = ts
        for key, peaks in (("torch_peak_reserved_mb", self._torch_reserved), ("torch_peak_alloc_mb", self._torch_alloc),
                           ("peak_rss_mb", self._rank_rss)):
            v = _num(ev.get(key))
            if v is not None and v > peaks.get(rank, -math.inf):
                peaks[rank] = v
        self._add_history(rank, step, prev, point, _num(ev.get("step_time")), loss)

    def _add_history(self, rank: int, step: int, prev: _Point | None, cur: _Point, step_time: float | None, loss: float | None) -> None:
        if prev is None:
            base = _Point(0, 0.0, 0.0, 0.0, 0.0)
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

    def _on_end(self, ev: dict[str, Any], t: float | None) -> None:
        rank = self._rank(ev)
        r = self._ranks.get(rank)
        if r is None:
            r = self._ranks[rank] = _Rank()
        for attr in ("samples", "tokens", "tokens_padded", "train_time"):
            v = _num(ev.get(attr))
            if v is not None:
                setattr(r, attr, v)
        step = _int(ev.get("step"))
        if step is not None and (r.cur is None or step > r.cur.step):
            # keep the steady reference untouched; only the position moves
            r.cur = _Point(step, r.samples, r.tokens, r.tokens_padded, r.train_time)
        self._set_status("completed")

    def _on_error(self, ev: dict[str, Any], t: float | None) -> None:
        kind = ev.get("kind") if ev.get("kind") in ("oom", "error") else "error"
        err = {
            "kind": kind,
            "oom_kind": ev.get("oom_kind"),
            "message": ev.get("message"),
            "step": _int(ev.get("step")),
            "rank": self._rank(ev),
        }
        # keep the first error, except that an OOM explains a later/earlier generic error better
        if self._error is None or (self._error.get("kind") != "oom" and kind == "oom"):
            self._error = err
        self._set_status("oom" if kind == "oom" else "failed")

    def _on_exit(self, ev: dict[str, Any], t: float | None) -> None:
        rc = _int(ev.get("returncode"))
        sig = _int(ev.get("signal"))
        self._returncode, self._signal = rc, sig
        if (rc is not None and rc != 0) or sig:
            if self._error is None:
                msg = f"training killed by signal {sig}" if sig else f"training exited with code {rc}"
                self._error = {"kind": "error", "oom_kind": None, "message": msg, "step": self._step(), "rank": None}
            self._set_status("failed")
        elif rc == 0 and self._status in ("starting", "running"):
            self._set_status("completed")

    def set_final(self, status: dict[str, Any]) -> None:
        """Apply the supervisor's ``status.json``: its ``status`` wins over everything folded."""
        if not isinstance(status, dict):
            return
        st = status.get("status")
        if isinstance(st, str) and st:
            self._final = st
        err = status.get("error")
        if isinstance(err, dict) and (self._error is None or (err.get("kind") == "oom" and self._error.get("kind") != "oom")):
            self._error = {
                "kind": err.get("kind", "error"),
                "oom_kind": err.get("oom_kind"),
                "message": err.get("message"),
                "step": _int(err.get("step")),
                "rank": _int(err.get("rank")),
            }
        if self._returncode is None:
            self._returncode = _int(status.get("returncode"))
        if self._signal is None:
            self._signal = _int(status.get("signal"))

    # ------------------------------------------------------------------ samples
    def apply_sample(self, sample: dict[str, Any]) -> None:
        if not isinstance(sample, dict):
            return
        self._samples_seen += 1
        self._touch(sample.get("t"))
        gpu = sample.get("gpu")
        if isinstance(gpu, dict):
            self._gpu_raw, self._gpu_obj = gpu, None
            gpus = gpu.get("gpus")
            if isinstance(gpus, list):
                for i, g in enumerate(gpus):
                    if not isinstance(g, dict):
                        continue
                    idx = _int(g.get("index"))
                    idx = i if idx is None else idx
                    for key, peaks in (("mem_used_mb", self._gpu_peak_used), ("proc_mem_mb", self._gpu_peak_proc)):
                        v = _num(g.get(key))
                        if v is not None and v > peaks.get(idx, -math.inf):
                            peaks[idx] = v
        host = sample.get("host")
        if isinstance(host, dict):
            self._host_raw, self._host_obj = host, None
            v = _num(host.get("tree_rss_mb"))
            if v is not None and (self._host_peak_rss is None or v > self._host_peak_rss):
                self._host_peak_rss = v
            v = _num(host.get("ram_used_mb"))
            if v is not None and (self._host_peak_ram is None or v > self._host_peak_ram):
                self._host_peak_ram = v

    # ------------------------------------------------------------------ snapshot
    def _step(self) -> int | None:
        steps = [r.cur.step for r in self._ranks.values() if r.cur is not None]
        return max(steps) if steps else None

    def _lead(self) -> _Rank | None:
        if not self._ranks:
            return None
        return self._ranks[0] if 0 in self._ranks else self._ranks[min(self._ranks)]

    @property
    def status(self) -> str:
        return self._final or self._status

    def snapshot(self) -> RunSnapshot:
        ranks = self._ranks
        status = self.status
        step = self._step()
        lead = self._lead()
        start = self._start or {}

        steady_s: list[float | None] = []
        steady_t: list[float | None] = []
        steady_tp: list[float | None] = []
        avg_s: list[float | None] = []
        avg_t: list[float | None] = []
        avg_tp: list[float | None] = []
        sps: list[float] = []
        for r in ranks.values():
            a_s = _rate(r.samples, 0.0, r.train_time, 0.0)
            a_t = _rate(r.tokens, 0.0, r.train_time, 0.0)
            a_tp = _rate(r.tokens_padded, 0.0, r.train_time, 0.0)
            avg_s.append(a_s)
            avg_t.append(a_t)
            avg_tp.append(a_tp)
            ref, cur = r.ref, r.cur
            if ref is not None and cur is not None and cur.step > ref.step and _rate(0.0, 0.0, cur.train_time, ref.train_time) is not None:
                steady_s.append(_rate(cur.samples, ref.samples, cur.train_time, ref.train_time))
                steady_t.append(_rate(cur.tokens, ref.tokens, cur.train_time, ref.train_time))
                steady_tp.append(_rate(cur.tokens_padded, ref.tokens_padded, cur.train_time, ref.train_time))
                sps.append((cur.train_time - ref.train_time) / (cur.step - ref.step))  # type: ignore[operator]
            else:
                steady_s.append(a_s)
                steady_t.append(a_t)
                steady_tp.append(a_tp)
                if cur is not None and cur.step > 0 and r.train_time is not None and r.train_time > 0:
                    sps.append(r.train_time / cur.step)
        seconds_per_step = max(sps) if sps else None

        total = self._total_steps
        if status == "completed":
            eta: float | None = 0.0
        elif status in ("starting", "running") and total is not None and seconds_per_step is not None:
            eta = max(0, total - (step or 0)) * seconds_per_step
        else:
            eta = None
        progress = None
        if total:
            progress = min(1.0, max(0.0, (step or 0) / total))
        wall = None
        if self._started_t is not None and self._last_t is not None:
            wall = max(0.0, self._last_t - self._started_t)
        train_times = [r.train_time for r in ranks.values() if r.train_time is not None]
        epochs = [r.epoch for r in ranks.values() if r.epoch is not None]

        hist = list(self._hist)
        rate_hist = hist
        if hist and hist[-1][5] < len(ranks):
            rate_hist = hist[:-1]

        if self._gpu_obj is None and self._gpu_raw is not None:
            self._gpu_obj = GpuSnapshot.from_dict(self._gpu_raw)
        if self._host_obj is None and self._host_raw is not None:
            self._host_obj = HostSnapshot.from_dict(self._host_raw)

        world = _int(start.get("world_size"))
        if world is None and ranks:
            world = len(ranks)
        config = start.get("config")
        env = start.get("env")
        return RunSnapshot(
            status=status,
            error=dict(self._error) if self._error else None,
            returncode=self._returncode,
            signal=self._signal,
            step=step,
            total_steps=total,
            epoch=max(epochs) if epochs else None,
            progress=progress,
            samples=_sum([r.samples for r in ranks.values()]),
            tokens=_sum([r.tokens for r in ranks.values()]),
            tokens_padded=_sum([r.tokens_padded for r in ranks.values()]),
            loss=lead.loss if lead else None,
            lr=lead.lr if lead else None,
            started_t=self._started_t,
            last_t=self._last_t,
            last_progress_t=self._last_progress_t,
            train_time=max(train_times) if train_times else None,
            wall_elapsed=wall,
            samples_per_s=_sum(steady_s),
            tokens_per_s=_sum(steady_t),
            tokens_padded_per_s=_sum(steady_tp),
            samples_per_s_avg=_sum(avg_s),
            tokens_per_s_avg=_sum(avg_t),
            tokens_padded_per_s_avg=_sum(avg_tp),
            seconds_per_step=seconds_per_step,
            eta_s=eta,
            loss_history=tuple(e[2] for e in hist if e[2] is not None),
            samples_per_s_history=tuple(e[3] for e in rate_hist if e[3] is not None),
            tokens_per_s_history=tuple(e[4] for e in rate_hist if e[4] is not None),
            gpu_peak_used_mb=dict(self._gpu_peak_used),
            gpu_peak_proc_mb=dict(self._gpu_peak_proc),
            torch_peak_reserved_mb=dict(self._torch_reserved),
            torch_peak_alloc_mb=dict(self._torch_alloc),
            rank_peak_rss_mb=dict(self._rank_rss),
            stalled=self._stalled,
            host_peak_tree_rss_mb=self._host_peak_rss,
            host_peak_ram_used_mb=self._host_peak_ram,
            gpu=self._gpu_obj,
            host=self._host_obj,
            world_size=world,
            ranks=tuple(sorted(ranks)),
            micro_batch=_int(start.get("micro_batch")),
            grad_accum=_int(start.get("grad_accum")),
            max_seq_len=_int(start.get("max_seq_len")),
            num_samples=_int(start.get("num_samples")),
            params_total=_int(start.get("params_total")),
            params_trainable=_int(start.get("params_trainable")),
            config=dict(config) if isinstance(config, dict) else None,
            env=dict(env) if isinstance(env, dict) else None,
            events=self._events,
            samples_seen=self._samples_seen,
        )
