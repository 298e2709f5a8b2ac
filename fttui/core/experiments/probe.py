"""The OOM-boundary probe: the largest value of a setting that fits and the smallest that fails.

Both ends are observed, each as a fresh run would see it, every trial runs real training steps
at worst-case length, and few models are loaded. What counts as observed:

  * a fit or an OOM, only as the *first* trial of a process (``fresh``). Later trials in a
    process are biased, and the bias changes sign between machines: the first trial pays one-time
    costs at its peak (later ones fit more easily), but under an address-space budget a trial
    also leaves mapped memory behind (later ones fail sooner: measured, tiny-lora at 48 MiB, a
    later trial ran out of memory at batch 3 where fresh processes fit 6). Later trials only
    *guide*.
  * under a host limit every worker runs with the same address-space layout
    (fttui.worker.limits.fixed_address_layout), so a value gives the same verdict in every fresh
    process (docs/bench-probe.md: 10 of 10).

  load 1   climbs x2 from the start value (1, 2, 4, ...) reusing the loaded model until its first
           OOM, then bisects in the same process (a guide only: after an OOM the address space is
           fragmented, its boundary was a fifth low for max_seq_len); its first trial reports its
           headroom;
  load 2.. one fresh trial each, a launch of the command ``fttui run`` starts (the run's own
           worker, fttui.core.experiments.launched: the verdict is a run's; the probe worker,
           which imports less before its limit and trains outside the Trainer's loop, had about a
           MiB less room than a run, which at 233-token samples moved the answer by one), at the
           value predicted from the largest fresh fit's headroom and
           the growth of the peaks per value (fttui.core.experiments.boundary.next_check: a
           prediction that overshot an OOM is followed by an interpolation between the fit and
           that OOM, not a step of one value), until the largest fresh fit and the smallest fresh
           OOM are neighbours; without a prediction (no headroom reported), the first load's
           trials guide, then doubling, then halving;
  repeats  with ``repeats = K``, each value next to the boundary is checked K more times; a value
           that goes both ways makes the answer a band (``mixed``).

At most MAX_LOADS + 2K model loads (MAX_LOADS + SEQ_EXTRA_LOADS + 2K for max_seq_len), said up
front (``max_loads``).

Several processes (ranks) or a sharding: every trial is a fresh launch of all ranks with the
command ``fttui run`` would start (fttui.core.experiments.launched), so every trial is fresh, one
trial per launch. A fit reports its headroom, the smallest over its ranks (each rank's end event:
fttui.core.experiments.headroom), and the next value is predicted from it as above: after the
first fit from what its batches added per value (an upper bound of a linear growth: the
prediction lies at or below a batch-size boundary), after two fits from the difference of their
headrooms. Without
a prediction (no fit yet, no budget: no limit and no GPU): x2 from the start value until the
first OOM, then the interval between the largest fit and the smallest OOM is halved until they
are adjacent. An OOM on any rank is the trial's OOM. At most ``launched.max_launches(lo, hi)``:
a prediction is made only while the launches left can still close the band by doubling and
halving (docs/bench-probe.md: tiny-lora over two FSDP ranks, 4 launches where the blind search
took 5).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable

from fttui.core.base import paths
from fttui.core.base.constants import PROBE_PARAMS, PROBE_STEPS
from fttui.core.base.errors import FttuiError
from fttui.core.experiments import launched
from fttui.core.experiments.boundary import band, next_check
from fttui.core.experiments.probe_start import predicted_start
from fttui.core.experiments.trials import ProbeResult, Trial, parse_range, trial_cells, trial_row
from fttui.core.profiles.schema import SYNTHETIC
from fttui.core.profiles.typed import Profile
from fttui.core.run.files import rundir
from fttui.core.run.files.events import (
    ErrorEvent,
    EventTail,
    ProbeCapEvent,
    ProbeGuessEvent,
    TrialEvent,
    TrialStartEvent,
)
from fttui.core.run.files.sampling import fold_card_peaks, take_sample
from fttui.core.run.launching import launch
from fttui.core.run.processes import proctree

MAX_LOADS = 4  # model loads of a one-process batch-size probe without repeats
#: growth in sequence length is not linear (attention): its prediction may need two more checks
SEQ_EXTRA_LOADS = 3


class Prober:
    def __init__(
        self,
        resolved: Profile,
        param: str = "batch_size",
        lo: int = 1,
        hi: int = 1024,
        steps: int = PROBE_STEPS,
        start: int | None = None,
        repeats: int = 0,
        data: bool = False,
        on_trial: Callable[[Trial], None] | None = None,
        on_log: Callable[[str], None] | None = None,
    ):
        if param not in PROBE_PARAMS:
            raise FttuiError(f"--param {param!r}: use one of {', '.join(PROBE_PARAMS)}")
        if steps < 1:
            raise FttuiError("--steps must be >= 1")
        if repeats < 0:
            raise FttuiError("--repeats must be >= 0")
        self.repeats = repeats
        self.data = data
        if data and (resolved.data.source or SYNTHETIC) == SYNTHETIC:
            raise FttuiError(
                "--data: the profile's data.source is synthetic; name a data file (data.source) or probe without --data"
            )
        self.order: list[list[int]] | None = None  # with data: every record's length, longest first
        # Several ranks or a sharding: each trial a fresh launch of the real command.
        self.launched = launched.needs_launch(resolved)
        if self.launched:
            launched.check_probe(resolved)
        # Said up front: the search, then two values next to the boundary checked again.
        search = MAX_LOADS + (SEQ_EXTRA_LOADS if param == "max_seq_len" else 0)
        self.max_loads = (launched.max_launches(lo, hi) if self.launched else search) + 2 * repeats
        self.resolved = resolved
        self.param, self.lo, self.hi, self.steps = param, lo, hi, steps
        self.start = max(lo, min(hi, start)) if start else lo
        self.on_trial = on_trial or (lambda t: None)
        self.on_log = on_log or (lambda s: None)
        self.probe_id = rundir.new_run_id(f"probe-{self.resolved.name or 'profile'}")
        self.trials: list[Trial] = []
        self.loads = 0
        self.proc: subprocess.Popen | None = None
        self.trial: launched.LaunchedTrial | None = None  # the launched trial running now
        self.samples_note = ""
        self.stopped = False

    # ------------------------------------------------------------------------------------------
    def run(self) -> ProbeResult:
        launch.validate_before_launch(self.resolved)
        cap = launched.positions(self.resolved) if self.launched and self.param == "max_seq_len" else None
        if cap and self.hi > cap:
            self.hi = max(self.lo, cap)
            self.start = min(self.start, self.hi)
            self.on_log(f"the model has {cap} positions: the range ends there")
        t0 = time.time()
        self.samples_note = self._samples()
        self.on_log(self.samples_note)
        guess: int | None = None
        note = ""
        budget_out = False
        try:
            while self.loads < self.max_loads:
                if self.stopped:
                    note = "stopped"
                    break
                if self.loads == 0:
                    res = self._load(self.start, "mul", None, None, hi=self.hi)
                else:
                    value = self._next_value(guess)
                    if value is None:
                        break
                    # Later loads run the one trial that counts: a launch of the run's own
                    # command (a run and a probe worker differ by about a MiB of address space).
                    res = self._launch(value)
                if res.get("model_oom"):
                    note = "the model itself does not fit in the memory budget (OOM while loading it)"
                    break
                if not res["trials"]:
                    note = "stopped" if self.stopped else "the probe process ran no trial"
                    break
                guess = res.get("guess") if guess is None else guess
            else:
                budget_out = self._next_value(guess) is not None
        finally:
            self._kill()
        b = band(self.trials)
        lf, so = b.largest_fit, b.smallest_oom
        exact = not b.mixed and ((lf is not None and so == lf + 1) or so == self.lo or lf == self.hi)
        if budget_out and not (exact or b.adjacent):
            note = f"stopped after {self.max_loads} {self.unit} without closing the boundary"
        if lf == self.hi and so is None and not b.mixed:
            note = note or f"everything up to {self.hi} fits: raise --range"
        if so == self.lo and lf is None and not b.mixed:
            note = note or f"{self.lo} already fails: nothing in the range fits"
        if b.mixed:
            note = note or (
                "values that went both ways: "
                + ", ".join(f"{m['value']} (fit {m['fit']}, OOM {m['oom']})" for m in b.mixed)
                + f"; use {lf}"
                + ("; the load budget ended the repeats" if budget_out else "")
            )
        return ProbeResult(
            self.probe_id,
            self.param,
            self.lo,
            self.hi,
            lf,
            so,
            exact,
            self.loads,
            self.trials,
            round(time.time() - t0, 2),
            note,
            mixed=b.mixed,
            repeats=self.repeats,
            max_loads=self.max_loads,
            samples="data" if self.data else "synthetic",
            samples_note=self.samples_note,
        )

    def _samples(self) -> str:
        """What the trials train on, in words; with ``data``, reads the data's lengths (tokenised
        once and cached, as ``fttui data`` does) into ``self.order``."""
        prof = self.resolved
        seq = prof.data.max_seq_len
        if not self.data:
            return f"samples: synthetic, every one {seq} tokens (the worst case)"
        from fttui.core.experiments import datalens

        samples, _hit = datalens.lengths(self.resolved)
        ordered = sorted(samples, key=lambda s: (-s.raw, s.index))
        self.order = [[s.index, s.raw, s.first_label] for s in ordered]
        kept = [s for s in ordered if s.kept(seq)]
        if not kept:
            raise FttuiError(f"--data: no sample of {prof.data.source} has a response token within max_seq_len={seq}")
        return (
            f"samples: the longest of {len(kept)} in {prof.data.name or 'the data'} "
            f"(longest {kept[0].length(seq)} tokens at max_seq_len {seq}; median "
            f"{sorted(s.length(seq) for s in kept)[len(kept) // 2]}), the longest in the first step"
        )

    def launches(self, load: int) -> bool:
        """Whether model load ``load`` (from 1) is a launch of the run's command: every load of
        several ranks or a sharding; of one process, every load after the first (the verdicts)."""
        return self.launched or load > 1

    @property
    def unit(self) -> str:
        return "launches" if self.launched else "model loads"

    def _next_value(self, guess: int | None) -> int | None:
        """The value the next fresh process checks; None when the band is closed and every value
        next to it has been checked ``1 + repeats`` times.

        Inside the open interval between the ends: the prediction from a fresh fit's headroom
        (fttui.core.experiments.boundary.predicted), else the first load's in-process trials as a
        guide (their bias may be large: seen, OOM at 42 tokens in-process where a fresh process fit
        108), else doubling without a fresh OOM, else halving."""
        b = band(self.trials)
        low = self.lo - 1 if b.largest_fit is None else b.largest_fit
        ceil = min(
            [m["value"] for m in b.mixed if m["value"] > low]
            + [self.hi + 1 if b.smallest_oom is None else b.smallest_oom]
        )
        if ceil - low > 1 and not b.adjacent and not (low == self.hi or ceil == self.lo):
            p = next_check(self.trials, low, ceil) if self._may_predict(b, low, ceil) else None
            if p is not None:
                return p
            if self.loads == 1 and not self.launched:
                inside = [t for t in self.trials if low < t.value < ceil]
                ooms = [t.value for t in inside if t.status == "oom" and t.clean]
                fits = [t.value for t in inside if t.status == "fit"]
                for v in (min(ooms) if ooms else None, None if ooms else max(fits, default=None), guess):
                    if v is not None and low < v < ceil:
                        return v
            if b.smallest_oom is None and not b.mixed:
                return min(ceil - 1, max(low + 1, 2 * max(low, 0)))
            return (low + ceil + 1) // 2
        seen = Counter(t.value for t in self.trials if t.fresh)
        for v in (b.largest_fit, b.smallest_oom, *(m["value"] for m in b.mixed)):
            if v is not None and seen[v] < 1 + self.repeats:
                return v
        return None

    def _may_predict(self, b, low: int, ceil: int) -> bool:
        """A launched probe predicts only while the launches left close the band by doubling and
        halving after one more check (a prediction narrows the interval, so ``max_launches``,
        said up front, stays true however many predictions miss)."""
        if not self.launched:
            return True
        left = launched.max_launches(self.lo, self.hi) - self.loads
        if b.smallest_oom is None:
            climb = max(0, self.hi.bit_length() - max(low, 1).bit_length() + 1)
            need = climb + (self.hi - max(low, 0)).bit_length()
        else:
            need = (ceil - low - 1).bit_length()
        return left - 1 >= need

    # ------------------------------------------------------------------------------------------
    def _load(
        self, start: int, growth: str, clean_fit: int | None, clean_oom: int | None, hi: int | None = None
    ) -> dict:
        if self.launched:
            return self._launch(start)
        self.loads += 1
        k = self.loads
        prof = self.resolved
        rid = f"{self.probe_id}-load{k}"
        argv = [
            sys.executable,
            "-m",
            "fttui.worker.probe",
            "--run-dir",
            str(paths.runs_dir() / rid),
            "--param",
            self.param,
            "--start",
            str(start),
            "--hi",
            str(hi or self.hi),
            "--growth",
            growth,
            "--steps",
            str(self.steps),
            "--lo-fit",
            str(clean_fit or self.lo - 1),
            "--oom-bound",
            str(clean_oom or 0),
        ]
        env_add = launch.child_env(prof, probe=True)
        env_add["FTTUI_PARENT_PID"] = str(os.getpid())
        if self.order is not None:
            argv += ["--data-order", str(paths.runs_dir() / rid / "data-order.json")]
        rd = rundir.create(prof.to_dict(), argv, env_add, run_id=rid, kind="probe", group=self.probe_id)
        if self.order is not None:
            (rd.path / "data-order.json").write_text(json.dumps(self.order, separators=(",", ":")))
        self.on_log(f"load {k}: {self.param} from {start} ({'x2' if growth == 'mul' else '+1 steps'})")
        env = dict(os.environ)
        env.update(env_add)
        with open(rd.log_path, "ab") as log:  # the process has its own copy once started
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        if self.stopped:
            self._kill()
        from fttui.monitor import HostSampler, make_gpu_sampler

        host = HostSampler(self.proc.pid)
        gpu = make_gpu_sampler()
        n_cards = prof.devices.gpus  # the probe's process uses the first visible card(s)
        tail = EventTail(rd.events_path)
        out: dict = {"trials": [], "guess": None, "model_oom": False}
        window_start: float | None = None
        window_peak: dict[int, float] = {}
        while True:
            done = self.proc.poll() is not None
            _, g = take_sample(host, gpu, rd.samples_path)
            fold_card_peaks(window_peak, g, n_cards)
            for ev in tail.read_new():
                match ev:
                    case TrialStartEvent():
                        window_start, window_peak = ev.t, {}
                    case TrialEvent():
                        t = self._trial(ev, k, window_peak)
                        out["trials"].append(t)
                        self.trials.append(t)
                        self.on_trial(t)
                        window_start = None
                    case ProbeCapEvent():  # max_seq_len above the model's positions
                        self.hi = min(self.hi, int(ev.hi or self.hi))
                        self.on_log(f"the model has {self.hi} positions: the range ends there")
                    case ProbeGuessEvent():
                        out["guess"] = ev.largest_fit
                    case ErrorEvent(kind="oom") if not out["trials"]:
                        out["model_oom"] = True
                    case ErrorEvent(kind=kind) if kind != "oom":
                        self._kill()
                        raise FttuiError(f"probe load {k} failed: {ev.message} (see {rd.log_path})")
            if done:
                break
            time.sleep(0.25)
        gpu.close()
        rc = self.proc.returncode
        self.proc = None
        if rc not in (0, 3) and not out["trials"]:
            raise FttuiError(f"probe load {k} exited with code {rc} (see {rd.log_path})")
        _ = window_start
        return out

    def _trial(self, ev: TrialEvent, load: int, nvml_peak: dict[int, float]) -> Trial:
        t = Trial(
            value=int(ev.value or 0),
            status=ev.status if ev.status is not None else "oom",
            load=load,
            clean=bool(ev.clean),
            fresh=bool(ev.fresh),
            oom_kind=ev.oom_kind,
            message=ev.message,
            steps=int(ev.steps or 0),
            step_time_s=_r(ev.step_time, 4),
            samples_per_s=_r(ev.samples_per_s, 3),
            tokens_per_s=_r(ev.tokens_per_s, 1),
            peak_gpu_mem_mb=[round(nvml_peak[i], 1) for i in sorted(nvml_peak)],
            peak_torch_reserved_mb=list(ev.peak_torch_reserved_mb or []),
            peak_host_rss_mb=_r(ev.peak_host_rss_mb, 1),
            headroom_mb=_r(ev.headroom_mb, 2),
            longest_seq=ev.longest_seq,
        )
        self._save(t)
        return t

    def _save(self, t: Trial) -> None:
        from fttui.core.results.store import Store

        with Store() as store:
            store.put(trial_row(t, self.resolved, self.probe_id, self.param, len(self.trials) + 1, data=self.data))

    def _launch(self, value: int) -> dict:
        """One trial as a fresh launch of all ranks (fttui.core.experiments.launched)."""
        self.loads += 1
        k = self.loads
        trial = launched.LaunchedTrial(
            self.resolved,
            self.param,
            value,
            self.steps,
            load=k,
            data=self.data,
            run_id=f"{self.probe_id}-load{k}",
            group=self.probe_id,
        )
        self.trial = trial
        if self.stopped:
            trial.stop()
        procs = self.resolved.world_size()
        self.on_log(
            f"trial {k}: {self.param}={value}, a fresh launch of {procs} "
            f"process{'es' if procs != 1 else ''} ({trial.resolved.launcher()})"
        )
        try:
            t, model_oom = trial.run(self.on_log)
        finally:
            trial.stop()
            self.trial = None
        if t is None:
            return {"trials": [], "guess": None, "model_oom": False}
        self._save(t)
        self.trials.append(t)
        self.on_trial(t)
        return {"trials": [t], "guess": None, "model_oom": model_oom}

    def _kill(self, wait: bool = True) -> None:
        trial = self.trial
        if trial is not None:
            if wait:
                trial.stop()
            else:
                trial.cancel()  # the thread that runs the probe waits for its end
        proc = self.proc
        if proc is not None:
            proctree.stop_group(proc)  # SIGTERM, SIGKILL after the grace period

    def stop(self) -> None:
        """Stop the probe: no further trial starts and the running one is stopped (a launched
        trial is only asked to stop here: the thread that runs the probe waits for its end)."""
        self.stopped = True
        self._kill(wait=False)


def _r(x, nd):
    return None if x is None else round(float(x), nd)


__all__ = ["Prober", "ProbeResult", "Trial", "MAX_LOADS", "parse_range", "predicted_start", "trial_cells"]
