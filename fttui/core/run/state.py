"""``RunState``: a pure fold of run events, resource samples and the final status into a
``RunSnapshot``.

No I/O, stdlib only. See docs/architecture.md, sections "Events" and "Monitor core". The record
it produces is ``fttui.core.run.snapshot.RunSnapshot``; how the rates and the histories are
computed is ``fttui.core.run.rates``; the per-card figures (headroom, the CUDA caching allocator's
retries, the near-OOM warning, MFU) are ``fttui.core.run.perf``'s. Besides those, ``eta_s`` is
``(total_steps - step) * seconds_per_step``; 0 once completed, ``None`` when the total is unknown
or the run failed.
"""

from __future__ import annotations

import math
from typing import Any

from fttui.core.run.perf import model_shape, with_perf
from fttui.core.run.phases import PhaseFold
from fttui.core.run.ranks import RankSlots
from fttui.core.run.rates import Point, RankProgress, StepHistory, rank_token_rates, rates
from fttui.core.run.snapshot import RunSnapshot, sum_known, to_int
from fttui.core.run.status import FinalStatus
from fttui.monitor import GpuSnapshot, HostSnapshot, num

__all__ = ["RunState", "RunSnapshot", "STATUS_ORDER"]

# Higher wins when several sources disagree; a final status (set_final) always wins.
STATUS_ORDER = {"starting": 0, "running": 1, "completed": 2, "failed": 3, "oom": 4, "cancelled": 5}


class RunState:
    """Fold ``events.jsonl`` objects (``apply``) and ``samples.jsonl`` objects
    (``apply_sample``) into a ``RunSnapshot`` (``snapshot()``); ``set_final`` folds the
    supervisor's ``status.json``. Tolerates unknown events, missing keys and events from several
    ranks (``rank``, default 0)."""

    def __init__(self, warmup_exclude_steps: int = 1, history: int = 240) -> None:
        self.warmup_exclude_steps = int(warmup_exclude_steps)
        self.history = max(1, int(history))
        self._ranks: dict[int, RankProgress] = {}  # by slot: the rank, or a second process's own
        self._slots = RankSlots()
        self._hist = StepHistory(self.history)
        self._status = "starting"
        self._final: FinalStatus | None = None
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
        self._retries: dict[int, float] = {}  # CUDA caching allocator, cumulative per rank
        self._ooms: dict[int, float] = {}
        self._shape = None  # fttui.core.models.flops.ModelShape of the start event
        self._stalled = False
        self._phases = PhaseFold()
        self._gpu_peak_used: dict[int, float] = {}
        self._gpu_peak_proc: dict[int, float] = {}
        self._host_peaks: dict[str, float] = {}  # host sample key -> its largest value
        self._gpu_raw: dict[str, Any] | None = None
        self._host_raw: dict[str, Any] | None = None
        self._gpu_obj: GpuSnapshot | None = None
        self._host_obj: HostSnapshot | None = None
        self._events = 0
        self._samples_seen = 0
        self._eval: tuple[int, float] | None = None  # (step, loss) of the latest evaluation
        self._checkpoint_step: int | None = None

    # ------------------------------------------------------------------ helpers
    def _touch(self, t: Any) -> float | None:
        tf = num(t)
        if tf is not None and (self._last_t is None or tf > self._last_t):
            self._last_t = tf
        return tf

    def _set_status(self, status: str) -> None:
        if STATUS_ORDER.get(status, 0) > STATUS_ORDER.get(self._status, 0):
            self._status = status

    def _rank(self, event: dict[str, Any]) -> int:
        return self._slots.slot(event)  # fttui.core.run.ranks: two processes of one rank stay two

    def _progress(self, rank: int) -> RankProgress:
        r = self._ranks.get(rank)
        if r is None:
            r = self._ranks[rank] = RankProgress()
        return r

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
            "phase": self._on_phase,
            "eval": self._on_kept,
            "save": self._on_kept,
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

    def _on_kept(self, ev: dict[str, Any], t: float | None) -> None:
        # rank 0's evaluation on the held-out split (the latest step wins) or a saved checkpoint
        step, loss = to_int(ev.get("step")), num(ev.get("eval_loss"))
        if step is None:
            return
        if ev["event"] == "eval" and loss is not None and (self._eval is None or step >= self._eval[0]):
            self._eval = (step, loss)
        elif ev["event"] == "save" and ev.get("kind") == "checkpoint":
            self._checkpoint_step = max(step, self._checkpoint_step or 0)

    def _on_phase(self, ev: dict[str, Any], t: float | None) -> None:
        # A startup phase began (fttui.core.run.phases); the first step ends them.
        self._phases.on_event(ev, t)

    def _on_launch(self, ev: dict[str, Any], t: float | None) -> None:
        # The supervisor's launch event: elapsed time counts from here (model loading included).
        if t is not None and (self._started_t is None or t < self._started_t):
            self._started_t = t

    def _on_start(self, ev: dict[str, Any], t: float | None) -> None:
        rank = self._rank(ev)
        if self._start is None or (self._start_rank is not None and rank < self._start_rank):
            self._start = ev
            self._start_rank = rank
            self._shape = model_shape(ev)
        if t is not None and (self._started_t is None or t < self._started_t):
            self._started_t = t
        ts = to_int(ev.get("total_steps"))
        if ts is not None and ts > 0:
            self._total_steps = ts
        self._set_status("running")

    def _on_step(self, ev: dict[str, Any], t: float | None) -> None:
        step = to_int(ev.get("step"))
        if step is None:
            return
        rank = self._rank(ev)
        r = self._progress(rank)
        self._set_status("running")
        self._phases.end(t)
        if t is not None:
            self._last_progress_t = t if self._last_progress_t is None else max(self._last_progress_t, t)
        if r.cur is not None and step <= r.cur.step:
            return  # duplicate or out-of-order line: counters already past it
        point = Point(step, num(ev.get("samples")), num(ev.get("tokens")), num(ev.get("tokens_padded")), num(ev.get("train_time")))
        prev = r.cur
        r.advance(point, self.warmup_exclude_steps)
        loss = num(ev.get("loss"))
        if loss is not None:
            r.loss = loss
        lr = num(ev.get("lr"))
        if lr is not None:
            r.lr = lr
        epoch = num(ev.get("epoch"))
        if epoch is not None:
            r.epoch = epoch
        ts = to_int(ev.get("total_steps"))
        if ts is not None and ts > 0:
            r.total_steps = ts
            self._total_steps = ts
        for key, peaks in (("torch_peak_reserved_mb", self._torch_reserved), ("torch_peak_alloc_mb", self._torch_alloc),
                           ("peak_rss_mb", self._rank_rss), ("torch_alloc_retries", self._retries),
                           ("torch_ooms", self._ooms)):
            v = num(ev.get(key))
            if v is not None and v > peaks.get(rank, -math.inf):
                peaks[rank] = v
        self._hist.add(rank, step, prev, point, num(ev.get("step_time")), loss)

    def _on_end(self, ev: dict[str, Any], t: float | None) -> None:
        self._phases.end(t)
        r = self._progress(self._rank(ev))
        for attr in ("samples", "tokens", "tokens_padded", "train_time"):
            v = num(ev.get(attr))
            if v is not None:
                setattr(r, attr, v)
        step = to_int(ev.get("step"))
        if step is not None and (r.cur is None or step > r.cur.step):
            # keep the steady reference untouched; only the position moves
            r.cur = Point(step, r.samples, r.tokens, r.tokens_padded, r.train_time)
        self._set_status("completed")

    def _on_error(self, ev: dict[str, Any], t: float | None) -> None:
        kind = ev.get("kind") if ev.get("kind") in ("oom", "error") else "error"
        err = {
            "kind": kind,
            "oom_kind": ev.get("oom_kind"),
            "message": ev.get("message"),
            "step": to_int(ev.get("step")),
            "rank": to_int(ev.get("rank")) or 0,
        }
        # keep the first error, except that an OOM explains a later/earlier generic error better
        if self._error is None or (self._error.get("kind") != "oom" and kind == "oom"):
            self._error = err
        self._set_status("oom" if kind == "oom" else "failed")

    def _on_exit(self, ev: dict[str, Any], t: float | None) -> None:
        rc = to_int(ev.get("returncode"))
        sig = to_int(ev.get("signal"))
        self._returncode, self._signal = rc, sig
        if (rc is not None and rc != 0) or sig:
            if self._error is None:
                msg = f"training killed by signal {sig}" if sig else f"training exited with code {rc}"
                self._error = {"kind": "error", "oom_kind": None, "message": msg, "step": self._step(), "rank": None}
            self._set_status("failed")
        elif rc == 0 and self._status in ("starting", "running"):
            self._set_status("completed")

    def set_final(self, status: FinalStatus | dict[str, Any] | None) -> None:
        """Fold the supervisor's final status (``status.json``, as a ``FinalStatus`` or its
        object): its status wins over everything folded, its error message and OOM kind over the
        events'; the return code fills in when no exit event gave one."""
        final = status if isinstance(status, FinalStatus) else FinalStatus.from_dict(status)
        if final is None:
            return
        self._final = final
        if self._returncode is None:
            self._returncode = final.returncode

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
                    idx = to_int(g.get("index"))
                    idx = i if idx is None else idx
                    for key, peaks in (("mem_used_mb", self._gpu_peak_used), ("proc_mem_mb", self._gpu_peak_proc)):
                        v = num(g.get(key))
                        if v is not None and v > peaks.get(idx, -math.inf):
                            peaks[idx] = v
        host = sample.get("host")
        if isinstance(host, dict):
            self._host_raw, self._host_obj = host, None
            self._phases.on_sample(host, num(sample.get("t")))
            for key in ("tree_rss_mb", "ram_used_mb", "build_rss_mb", "tree_hwm_mb", "hwm_unread"):
                v = num(host.get(key))
                if v is not None and v > self._host_peaks.get(key, -math.inf):
                    self._host_peaks[key] = v

    # ------------------------------------------------------------------ snapshot
    def _step(self) -> int | None:
        steps = [r.cur.step for r in self._ranks.values() if r.cur is not None]
        return max(steps) if steps else None

    def _lead(self) -> RankProgress | None:
        if not self._ranks:
            return None
        return self._ranks[0] if 0 in self._ranks else self._ranks[min(self._ranks)]

    @property
    def status(self) -> str:
        return (self._final.status if self._final else None) or self._status

    def snapshot(self) -> RunSnapshot:
        ranks = self._ranks
        status = self.status
        step = self._step()
        lead = self._lead()
        start = self._start or {}
        rt = rates(ranks.values())

        total = self._total_steps
        if status == "completed":
            eta: float | None = 0.0
        elif status in ("starting", "running") and total is not None and rt.seconds_per_step is not None:
            eta = max(0, total - (step or 0)) * rt.seconds_per_step
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
        loss_hist, sps_hist, tps_hist = self._hist.series(len(ranks))

        if self._gpu_obj is None and self._gpu_raw is not None:
            self._gpu_obj = GpuSnapshot.from_dict(self._gpu_raw)
        if self._host_obj is None and self._host_raw is not None:
            self._host_obj = HostSnapshot.from_dict(self._host_raw)

        world = to_int(start.get("world_size"))
        clash = self._slots.clashes()
        if world is None and ranks or clash:  # processes of one claimed rank each count
            world = max(world or 0, self._slots.processes(), len(ranks))
        config = start.get("config")
        env = start.get("env")
        err = self._error or {}
        final = self._final
        phase, phase_since = self._phases.current()
        return with_perf(RunSnapshot(  # per-card headroom, retries, MFU: fttui.core.run.perf
            status=status,
            error=dict(self._error) if self._error else None,
            returncode=self._returncode,
            signal=self._signal,
            final=final is not None,
            message=(final.error if final else None) or err.get("message"),
            oom_kind=(final.oom_kind if final else None) or err.get("oom_kind"),
            step=step,
            total_steps=total,
            epoch=max(epochs) if epochs else None,
            progress=progress,
            samples=sum_known([r.samples for r in ranks.values()]),
            tokens=sum_known([r.tokens for r in ranks.values()]),
            tokens_padded=sum_known([r.tokens_padded for r in ranks.values()]),
            loss=lead.loss if lead else None,
            lr=lead.lr if lead else None,
            eval_loss=self._eval[1] if self._eval else None,
            eval_step=self._eval[0] if self._eval else None,
            checkpoint_step=self._checkpoint_step,
            started_t=self._started_t,
            last_t=self._last_t,
            last_progress_t=self._last_progress_t,
            train_time=max(train_times) if train_times else None,
            wall_elapsed=wall,
            samples_per_s=rt.samples_per_s,
            tokens_per_s=rt.tokens_per_s,
            tokens_padded_per_s=rt.tokens_padded_per_s,
            samples_per_s_avg=rt.samples_per_s_avg,
            tokens_per_s_avg=rt.tokens_per_s_avg,
            tokens_padded_per_s_avg=rt.tokens_padded_per_s_avg,
            seconds_per_step=rt.seconds_per_step,
            eta_s=eta,
            loss_history=loss_hist,
            samples_per_s_history=sps_hist,
            tokens_per_s_history=tps_hist,
            gpu_peak_used_mb=dict(self._gpu_peak_used),
            gpu_peak_proc_mb=dict(self._gpu_peak_proc),
            torch_peak_reserved_mb=dict(self._torch_reserved),
            torch_peak_alloc_mb=dict(self._torch_alloc),
            rank_peak_rss_mb=dict(self._rank_rss),
            stalled=self._stalled,
            phase=phase,
            phase_since=phase_since,
            startup_ended_t=self._phases.ended_t,
            phase_history=tuple(self._phases.history),
            host_peak_tree_rss_mb=self._host_peaks.get("tree_rss_mb"),
            host_peak_ram_used_mb=self._host_peaks.get("ram_used_mb"),
            host_peak_build_rss_mb=self._host_peaks.get("build_rss_mb"),
            host_tree_hwm_mb=self._host_peaks.get("tree_hwm_mb"),
            host_hwm_unread=to_int(self._host_peaks.get("hwm_unread")),
            gpu=self._gpu_obj,
            host=self._host_obj,
            world_size=world,
            ranks=tuple(sorted(ranks)),
            rank_clash=clash,
            micro_batch=to_int(start.get("micro_batch")),
            grad_accum=to_int(start.get("grad_accum")),
            max_seq_len=to_int(start.get("max_seq_len")),
            num_samples=to_int(start.get("num_samples")),
            params_total=to_int(start.get("params_total")),
            params_trainable=to_int(start.get("params_trainable")),
            config=dict(config) if isinstance(config, dict) else None,
            env=dict(env) if isinstance(env, dict) else None,
            rank_tokens_per_s=rank_token_rates(ranks),
            rank_tokens={k: r.tokens for k, r in ranks.items() if r.tokens is not None},
            rank_train_time={k: r.train_time for k, r in ranks.items() if r.train_time is not None},
            rank_alloc_retries=dict(self._retries),
            rank_ooms=dict(self._ooms),
            model_shape=self._shape,
            events=self._events,
            samples_seen=self._samples_seen,
        ))
