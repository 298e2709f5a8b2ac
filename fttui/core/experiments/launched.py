"""Probe trials as fresh launches of the training command, for setups of several processes.

A profile with several ranks (``devices.gpus`` or ``devices.cpu_processes`` > 1) or a sharding
other than ``none`` cannot be probed inside one process: each trial is a fresh launch of all
ranks, with the command ``fttui run`` would start (:func:`fttui.core.run.launching.launch.prepare`: the
same checks, the same launcher, argv and environment), the probed setting set for the trial, a
few steps of worst-case synthetic samples (every sample ``max_seq_len`` tokens; ``probe --data``:
the profile's data, its longest samples in the first step). The trial is
the run's own verdict (:func:`fttui.core.run.row.summary.final_status`, the classification every
run gets): ``completed`` is a fit, ``oom`` on any rank is the trial's OOM, anything else stops
the probe with the trial's log.

A fit's headroom is the smallest over its ranks (:func:`fttui.core.experiments.headroom.trial_headroom`
from each rank's ``start`` and ``end`` events: the rank that runs out first decides); the probe
predicts the boundary from it (fttui.core.experiments.boundary.next_check) instead of doubling
and halving blindly.

The command runs under :mod:`fttui.core.experiments.trial_guard` (the training's log writer,
own process group), which stops the whole tree when the probe stops or dies. Every trial is the
first (and only) trial of its processes: ``fresh`` and ``clean``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from fttui.core.base.constants import PROBE_PARAMS
from fttui.core.base.errors import FttuiError
from fttui.core.experiments.headroom import Headroom, trial_headroom
from fttui.core.experiments.trials import Trial
from fttui.core.profiles import apply_overrides
from fttui.core.profiles.schema import SYNTHETIC
from fttui.core.profiles.typed import Profile
from fttui.core.run.files.events import ErrorEvent, EventTail, StepEvent, read_events
from fttui.core.run.files.rundir import RunDir
from fttui.core.run.files.runfiles import CommandFile, ExitFile
from fttui.core.run.files.sampling import fold_card_peaks, take_sample
from fttui.core.run.files.statusfile import FinalStatus
from fttui.core.run.fold.state import RunState
from fttui.core.run.launching import launch
from fttui.core.run.processes import oomkill, proctree
from fttui.core.run.row.row_figures import host_figures, sharding_read_back
from fttui.core.run.row.summary import final_status

#: How long a stopped trial's guard gets to stop its tree (its own grace is
#: :data:`fttui.core.run.processes.proctree.GRACE_S`, 10 s) before it is killed, and the training's group
#: with it.
STOP_WAIT_S = 30.0


def needs_launch(resolved: Profile) -> bool:
    """Whether the probe must launch each trial: several processes, or a sharding."""
    return resolved.world_size() > 1 or resolved.sharding_kind().sharded


def check_probe(resolved: Profile) -> None:
    """One line when a launched probe cannot run this profile."""
    nodes = resolved.devices.nodes
    if nodes > 1:
        raise FttuiError(
            f"the probe runs on one machine, the profile has devices.nodes = {nodes}: every node "
            "would have to launch each trial together; probe one node's setup (nodes = 1)"
        )


def max_launches(lo: int, hi: int) -> int:
    """The most trials a launched probe needs: a x2 climb over lo..hi, then a bisection."""
    return hi.bit_length() + (hi - lo + 1).bit_length() + 2


def positions(resolved: Profile) -> int | None:
    """The model's ``max_position_embeddings`` when the profile states it (the longest
    ``max_seq_len`` a trial can ask for)."""
    cfg = resolved.model.arch_config
    try:
        n = int(cfg.get("max_position_embeddings") or 0)
    except (TypeError, ValueError):
        return None
    return n or None


def trial_overrides(resolved: Profile, param: str, value: int, steps: int, data: bool = False) -> dict:
    """The settings of one trial on top of the profile: the probed value, ``steps`` optimizer
    steps, synthetic samples (each ``max_seq_len`` tokens), exactly enough of them for the steps
    on every rank; with ``data``, the profile's own data with its longest samples in the first
    step (``train.longest_first``)."""
    if data:
        return {PROBE_PARAMS[param]: int(value), "train.max_steps": int(steps), "train.longest_first": True}
    prof = resolved
    micro = int(value) if param == "batch_size" else prof.train.batch_size
    accum = prof.train.grad_accum
    return {
        PROBE_PARAMS[param]: int(value),
        "train.max_steps": int(steps),
        "data.source": SYNTHETIC,
        "data.num_samples": micro * accum * prof.world_size() * int(steps),
    }


def _r(x, nd):
    return None if x is None else round(float(x), nd)


class LaunchedTrial:
    """One trial: prepare its run directory (``kind = "probe"``, ``group`` = the probe), launch,
    sample and fold its events until it ends, then judge it (:meth:`run`). :meth:`stop` may be
    called from any thread.

    It is the probe trial's executor (:class:`~fttui.core.run.processes.executor.Executor`):
    :meth:`start` starts its guard (:mod:`fttui.core.experiments.trial_guard`, which owns the
    tree and stops it through :mod:`fttui.core.run.processes.proctree`), :meth:`alive` is the
    guard's life, :meth:`cancel` closes the guard's pipe (the guard stops the tree), and
    :meth:`final_state` is the run's own verdict once :meth:`run` has judged it (the trial writes
    no ``status.json``: the probe records it)."""

    def __init__(
        self,
        resolved: Profile,
        param: str,
        value: int,
        steps: int,
        *,
        run_id: str,
        group: str,
        load: int,
        data: bool = False,
    ):
        self.param, self.value, self.load = param, int(value), load
        self.resolved = apply_overrides(resolved, trial_overrides(resolved, param, value, steps, data))
        self.prof = self.resolved
        self.rd = launch.prepare(self.resolved, run_id=run_id, kind="probe", group=group)
        self.guard: subprocess.Popen | None = None
        self.leader: int | None = None  # the log writer: leader of the training's process group
        self.stopped = False
        self._final: FinalStatus | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------------
    def start(self) -> RunDir:
        cmd = self.rd.command() or CommandFile()
        env = dict(os.environ)
        env.update(cmd.env)
        log = os.fdopen(os.open(self.rd.path / "guard.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")
        with self._lock:
            if self.stopped:
                log.close()
                return self.rd
            try:
                self.guard = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "fttui.core.experiments.trial_guard",
                        str(self.rd.path),
                        "--",
                        *(cmd.argv or []),
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                )
            finally:
                log.close()
        line = self.guard.stdout.readline() if self.guard.stdout else b""
        try:
            self.leader = int(line.strip())
        except ValueError:
            self.leader = None
        return self.rd

    def alive(self) -> bool:
        """The trial's guard still runs (it outlives the training only to stop what is left)."""
        guard = self.guard
        return guard is not None and guard.poll() is None

    def cancel(self) -> None:
        """Ask the guard to stop the trial's tree and return at once (:meth:`stop` without the
        wait)."""
        self.stop(wait=False)

    def final_state(self) -> FinalStatus | None:
        """The run's verdict as :meth:`run` judged it; ``None`` before (or when it was stopped)."""
        return self._final

    def stop(self, wait: bool = True) -> None:
        """Stop the trial's processes: the guard stops the tree. ``wait``: until it has (if it
        does not end in time, it and the training's group are killed); else only ask (an app's
        thread must not block: the probe's own thread waits)."""
        with self._lock:
            self.stopped = True
            guard = self.guard
        if guard is None:
            return
        try:
            if guard.stdin:
                guard.stdin.close()
        except OSError:
            pass
        if not wait:
            return
        try:
            guard.wait(timeout=STOP_WAIT_S)
            return
        except subprocess.TimeoutExpired:
            pass
        for pgid in (guard.pid, self.leader):
            proctree.signal_group(pgid, signal.SIGKILL)
        try:
            guard.wait(timeout=proctree.KILLED_WAIT_S)
        except subprocess.TimeoutExpired:
            pass

    # ------------------------------------------------------------------------------------------
    def run(self, on_log=lambda s: None) -> tuple[Trial | None, bool]:
        """Launch and follow the trial. ``(trial, model_oom)``: ``trial`` None when the probe was
        stopped; ``model_oom`` when it ran out of memory before its first step while loading the
        model. FttuiError when it ended any other way."""
        t_start, oom_count = time.time(), oomkill.memory_cgroup_oom_count()
        self.start()
        if self.guard is None:
            return None, False
        from fttui.monitor import HostSampler, make_gpu_sampler

        rd = self.rd
        prof = self.prof
        state = RunState(warmup_exclude_steps=1)
        host = HostSampler(self.leader or self.guard.pid)
        gpu = make_gpu_sampler()
        n_cards = prof.devices.processes_per_node() if prof.devices.gpus > 0 else 0
        tail = EventTail(rd.events_path)
        peak: dict[int, float] = {}
        live_host = None
        try:
            while True:
                done = self.guard.poll() is not None
                sample, g = take_sample(host, gpu, rd.samples_path)
                state.apply_sample(sample)
                if not done and sample.host is not None:
                    live_host = sample.host  # the host while the trial lived: its memory at a kill
                fold_card_peaks(peak, g, n_cards)
                for ev in tail.read_new():
                    state.apply(ev)
                if done:
                    break
                time.sleep(0.25)
        finally:
            gpu.close()
        if self.stopped:
            return None, False
        ex = rd.exit_info() or ExitFile()
        snap = state.snapshot()
        kill = None
        if ex.returncode == -signal.SIGKILL:  # the OOM killer's, when the kernel says so (oomkill)
            now = oomkill.memory_cgroup_oom_count()
            read, record = oomkill.kernel_log_oom_kill({p for p in (self.leader,) if p}, since=t_start)
            kill = oomkill.KillEvidence(
                container=None if oom_count is None or now is None else max(0, now - oom_count),
                kernel_log=record,
                kernel_log_read=read,
                ram_used_mb=getattr(live_host, "ram_used_mb", None),
                ram_total_mb=getattr(live_host, "ram_total_mb", None),
            )
        fs = final_status(rd, snap, ex.returncode, None, ex.error or None, kill=kill)
        self._final = fs
        if fs.status not in ("completed", "oom"):
            raise FttuiError(
                f"probe trial {self.load} ({self.param}={self.value}) {fs.status}: "
                f"{fs.error or 'no message'} (see {rd.log_path})"
            )
        return self._trial(fs, snap, peak), fs.status == "oom" and not snap.step and snap.phase in (
            None,
            "loading-model",
        )

    def _trial(self, fs, snap, peak: dict[int, float]) -> Trial:
        fit = fs.status == "completed"
        batch = self.prof.effective_batch().effective
        seq = self.prof.data.max_seq_len
        sps = (snap.samples_per_s or snap.samples_per_s_avg) if fit else None
        tps = (snap.tokens_per_s or snap.tokens_per_s_avg) if fit else None
        step_time = snap.seconds_per_step or (batch / sps if sps else None)
        host = host_figures(snap)
        events = read_events(self.rd.events_path)
        ran = (sharding_read_back(events) or {}).get("ran")
        longest = max((e.longest_seq or 0 for e in events if isinstance(e, (StepEvent, ErrorEvent))), default=0)
        # the rank that runs out first decides; only a fit has headroom
        head = trial_headroom(events, self.prof.world_size()) if fit else Headroom(None)
        return Trial(
            value=self.value,
            status="fit" if fit else "oom",
            load=self.load,
            clean=True,
            fresh=True,
            oom_kind=None if fit else fs.oom_kind,
            message=None if fit else fs.error,
            steps=int(snap.step or 0),
            step_time_s=_r(step_time, 4),
            samples_per_s=_r(sps, 3),
            tokens_per_s=_r(tps if tps else (sps * seq if sps else None), 1),
            peak_gpu_mem_mb=[round(peak[i], 1) for i in sorted(peak)],
            peak_torch_reserved_mb=[
                round(float(snap.torch_peak_reserved_mb[r]), 1) for r in sorted(snap.torch_peak_reserved_mb)
            ],
            peak_host_rss_mb=host.peak_host_rss_mb,
            host_measure=host.host_measure or "",
            sharding=ran if isinstance(ran, str) else None,
            longest_seq=longest or None,
            headroom_mb=head.headroom_mb,
            steps_mb=head.steps_mb,
        )


__all__ = ["LaunchedTrial", "needs_launch", "check_probe", "max_launches", "positions", "trial_overrides"]
