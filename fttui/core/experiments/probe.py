"""The OOM-boundary probe: the largest value of a setting that fits and the smallest that fails.

Both ends are observed, each as a fresh run would see it, every trial runs real training steps
at worst-case length, and few models are loaded. What counts as observed:

  * a fit or an OOM, only as the *first* trial of a process (``fresh``). Later trials in a
    process are biased, and the bias changes sign between machines: the first trial pays one-time
    costs at its peak (later ones fit more easily), but under an address-space budget a trial
    also leaves mapped memory behind (later ones fail sooner: measured, tiny-lora at 48 MiB, a
    later trial ran out of memory at batch 3 where fresh processes fit 6). Later trials only
    *guide* the next fresh process.

  load 1   climbs x2 from the start value (1, 2, 4, ...) reusing the loaded model until its first
           OOM, then bisects in the same process to guess the boundary;
  load 2   a fresh process checks the lowest in-process OOM (or the guess);
  load 3.. without a fresh OOM yet, a fresh process starts at twice the largest fresh fit; with
           one, at the middle of the interval between the fresh ends, until they are adjacent.
           These processes run one trial each: only load 1's later trials guide.

Five to nine model loads on the tiny profiles under a 48MiB budget (docs/bench-probe.md; bench/probe_vs_accelerate.py
compares it with accelerate's find_executable_batch_size); at most MAX_LOADS.

Several processes (ranks) or a sharding: every trial is a fresh launch of all ranks with the
command ``fttui run`` would start (fttui.core.experiments.launched), so every trial is fresh and
the same search runs with one trial per launch: x2 from the start value until the first OOM,
then the interval between the largest fit and the smallest OOM is halved until they are
adjacent. An OOM on any rank is the trial's OOM. At most ``launched.max_launches(lo, hi)``.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable

from fttui.core.base import paths
from fttui.core.base.constants import PROBE_PARAMS
from fttui.core.base.errors import EstimateError, FttuiError
from fttui.core.base.units import parse_size
from fttui.core.experiments import launched
from fttui.core.experiments.trials import ProbeResult, Trial, parse_range, trial_cells, trial_row
from fttui.core.profiles.stored import as_profile
from fttui.core.run import launch, rundir
from fttui.core.run.events import JsonlTail
from fttui.core.run.sampling import fold_card_peaks, take_sample

MAX_LOADS = 12


class Prober:
    def __init__(self, resolved: dict, param: str = "batch_size", lo: int = 1, hi: int = 1024,
                 steps: int = 2, start: int | None = None,
                 on_trial: Callable[[Trial], None] | None = None,
                 on_log: Callable[[str], None] | None = None):
        if param not in PROBE_PARAMS:
            raise FttuiError(f"--param {param!r}: use one of {', '.join(PROBE_PARAMS)}")
        if steps < 1:
            raise FttuiError("--steps must be >= 1")
        # Several ranks or a sharding: each trial a fresh launch of the real command.
        self.launched = launched.needs_launch(resolved)
        if self.launched:
            launched.check_probe(resolved)
        self.max_loads = launched.max_launches(lo, hi) if self.launched else MAX_LOADS
        self.resolved = resolved
        self.param, self.lo, self.hi, self.steps = param, lo, hi, steps
        self.start = max(lo, min(hi, start)) if start else lo
        self.on_trial = on_trial or (lambda t: None)
        self.on_log = on_log or (lambda s: None)
        self.probe_id = rundir.new_run_id(f"probe-{resolved.get('name', 'profile')}")
        self.trials: list[Trial] = []
        self.loads = 0
        self.proc: subprocess.Popen | None = None
        self.trial: launched.LaunchedTrial | None = None  # the launched trial running now
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
        clean_fit: int | None = None  # largest fresh fit
        clean_oom: int | None = None  # smallest fresh OOM
        guess: int | None = None
        note = ""
        try:
            while self.loads < self.max_loads:
                if self.stopped:
                    note = "stopped"
                    break
                if clean_fit is not None and clean_oom is not None and clean_oom == clean_fit + 1:
                    break
                if clean_oom == self.lo or clean_fit == self.hi:
                    break
                if self.loads == 0:
                    start, growth = self.start, "mul"
                else:
                    start, growth = self._next_start(clean_fit, clean_oom, guess), "add"
                # Only the first load's later trials guide (see _next_start): later loads run the
                # one trial that counts, their first.
                res = self._load(start, growth, clean_fit, clean_oom, hi=self.hi if self.loads == 0 else start)
                for t in res["trials"]:
                    if t.fresh and t.status == "fit":
                        clean_fit = max(clean_fit or 0, t.value)
                    elif t.fresh and t.status == "oom":
                        clean_oom = t.value if clean_oom is None else min(clean_oom, t.value)
                if res.get("model_oom"):
                    note = "the model itself does not fit in the memory budget (OOM while loading it)"
                    break
                if not res["trials"]:
                    note = "stopped" if self.stopped else "the probe process ran no trial"
                    break
                guess = res.get("guess")
            else:
                note = f"stopped after {self.max_loads} model loads without closing the boundary"
        finally:
            self._kill()
        exact = (clean_fit is not None and clean_oom is not None and clean_oom == clean_fit + 1) or \
            (clean_oom == self.lo) or (clean_fit == self.hi)
        if clean_fit == self.hi and clean_oom is None:
            note = note or f"everything up to {self.hi} fits: raise --range"
        if clean_oom == self.lo:
            note = note or f"{self.lo} already fails: nothing in the range fits"
        return ProbeResult(self.probe_id, self.param, self.lo, self.hi, clean_fit, clean_oom, exact,
                           self.loads, self.trials, round(time.time() - t0, 2), note)

    def _next_start(self, clean_fit: int | None, clean_oom: int | None, guess: int | None) -> int:
        """The value a fresh process tries first, inside the open interval between the fresh ends.

        In-process trials only point: their bias may be large (seen: OOM at 42 tokens in-process
        where a fresh process fits 108), so they pick the first check and nothing after it. The
        first check is the lowest in-process OOM above the floor (in-process trials that fit more
        easily make it a ceiling at once), or the highest in-process fit when none ran out. Without a fresh OOM the fresh start then doubles; with
        one, the interval is halved."""
        low = (clean_fit or self.lo - 1) + 1
        high = (clean_oom or self.hi + 1) - 1
        if self.loads == 1:
            inside = [t for t in self.trials if low <= t.value <= high]
            ooms = [t.value for t in inside if t.status == "oom" and t.clean]
            fits = [t.value for t in inside if t.status == "fit"]
            for v in (min(ooms) if ooms else None, None if ooms else max(fits, default=None), guess):
                if v is not None and low <= v <= high:
                    return v
        if clean_oom is None:
            return min(high, max(low, 2 * (clean_fit or 0)))
        return (low + high + 1) // 2

    # ------------------------------------------------------------------------------------------
    def _load(self, start: int, growth: str, clean_fit: int | None, clean_oom: int | None,
              hi: int | None = None) -> dict:
        if self.launched:
            return self._launch(start)
        self.loads += 1
        k = self.loads
        prof = self.resolved
        rid = f"{self.probe_id}-load{k}"
        argv = [sys.executable, "-m", "fttui.worker.probe", "--run-dir", str(paths.runs_dir() / rid),
                "--param", self.param, "--start", str(start), "--hi", str(hi or self.hi), "--growth", growth,
                "--steps", str(self.steps), "--lo-fit", str(clean_fit or self.lo - 1), "--oom-bound", str(clean_oom or 0)]
        env_add = launch.child_env(prof)
        env_add["FTTUI_PARENT_PID"] = str(os.getpid())
        rd = rundir.create(prof, argv, env_add, run_id=rid, kind="probe", group=self.probe_id)
        self.on_log(f"load {k}: {self.param} from {start} ({'x2' if growth == 'mul' else '+1 steps'})")
        env = dict(os.environ)
        env.update(env_add)
        log = open(rd.log_path, "ab")
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True, close_fds=True)
        finally:
            log.close()
        if self.stopped:
            self._kill()
        from fttui.monitor import HostSampler, make_gpu_sampler

        host = HostSampler(self.proc.pid)
        gpu = make_gpu_sampler()
        n_cards = as_profile(prof).devices.gpus  # the probe's process uses the first visible card(s)
        tail = JsonlTail(rd.events_path)
        out: dict = {"trials": [], "guess": None, "model_oom": False}
        window_start: float | None = None
        window_peak: dict[int, float] = {}
        while True:
            done = self.proc.poll() is not None
            _, g = take_sample(host, gpu, rd.samples_path)
            fold_card_peaks(window_peak, g, n_cards)
            for ev in tail.read_new():
                name = ev.get("event")
                if name == "trial_start":
                    window_start, window_peak = ev.get("t"), {}
                elif name == "trial":
                    t = self._trial(ev, k, window_peak)
                    out["trials"].append(t)
                    self.trials.append(t)
                    self.on_trial(t)
                    window_start = None
                elif name == "probe_cap":  # max_seq_len above the model's positions
                    self.hi = min(self.hi, int(ev["hi"]))
                    self.on_log(f"the model has {self.hi} positions: the range ends there")
                elif name == "probe_guess":
                    out["guess"] = ev.get("largest_fit")
                elif name == "error":
                    if ev.get("kind") == "oom" and not out["trials"]:
                        out["model_oom"] = True
                    elif ev.get("kind") != "oom":
                        self._kill()
                        raise FttuiError(f"probe load {k} failed: {ev.get('message')} (see {rd.log_path})")
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

    def _trial(self, ev: dict, load: int, nvml_peak: dict[int, float]) -> Trial:
        t = Trial(
            value=int(ev["value"]), status=ev.get("status", "oom"), load=load, clean=bool(ev.get("clean")),
            fresh=bool(ev.get("fresh")),
            oom_kind=ev.get("oom_kind"), message=ev.get("message"), steps=int(ev.get("steps") or 0),
            step_time_s=_r(ev.get("step_time"), 4), samples_per_s=_r(ev.get("samples_per_s"), 3),
            tokens_per_s=_r(ev.get("tokens_per_s"), 1),
            peak_gpu_mem_mb=[round(nvml_peak[i], 1) for i in sorted(nvml_peak)],
            peak_torch_reserved_mb=list(ev.get("peak_torch_reserved_mb") or []),
            peak_host_rss_mb=_r(ev.get("peak_host_rss_mb"), 1),
        )
        self._save(t)
        return t

    def _save(self, t: Trial) -> None:
        from fttui.core.results.store import Store

        with Store() as store:
            store.put(trial_row(t, self.resolved, self.probe_id, self.param, len(self.trials) + 1))

    def _launch(self, value: int) -> dict:
        """One trial as a fresh launch of all ranks (fttui.core.experiments.launched)."""
        self.loads += 1
        k = self.loads
        trial = launched.LaunchedTrial(self.resolved, self.param, value, self.steps, load=k,
                                       run_id=f"{self.probe_id}-load{k}", group=self.probe_id)
        self.trial = trial
        if self.stopped:
            trial.stop()
        procs = as_profile(self.resolved).world_size()
        self.on_log(f"trial {k}: {self.param}={value}, a fresh launch of {procs} "
                    f"process{'es' if procs != 1 else ''} ({as_profile(trial.resolved).launcher()})")
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
            trial.stop(wait=wait)
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                return
            try:
                proc.wait(timeout=5)
                return
            except subprocess.TimeoutExpired:
                continue

    def stop(self) -> None:
        """Stop the probe: no further trial starts and the running one is stopped (a launched
        trial is only asked to stop here: the thread that runs the probe waits for its end)."""
        self.stopped = True
        self._kill(wait=False)


def _r(x, nd):
    return None if x is None else round(float(x), nd)


# What the estimator raises on a profile it cannot express: EstimateError, or an arch_config
# whose numbers are missing (KeyError), not numbers (TypeError, ValueError) or zero.
_NOT_ESTIMABLE = (EstimateError, KeyError, TypeError, ValueError, ZeroDivisionError)


def predicted_start(resolved: dict, param: str, lo: int, hi: int) -> tuple[int | None, str]:
    """Where the probe starts: the estimator's largest fitting value on the GPU budget
    (``limits.gpu_memory`` or the first visible card), calibrated from the store when it can be;
    None on a CPU profile (a host budget is address space, which the estimator does not model)."""
    prof = as_profile(resolved)
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


__all__ = ["Prober", "ProbeResult", "Trial", "MAX_LOADS", "parse_range", "predicted_start", "trial_cells"]
