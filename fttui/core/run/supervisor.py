"""The supervisor: owns one run from launch to summary row.

Started by ``fttui run`` (or the app) in a session of its own, so it outlives the process that
launched it, a closed terminal and a dropped SSH connection. It starts the training command in
its own process group, under its log writer (:mod:`fttui.core.run.logtee`, which masks secrets
into ``train.log`` and records the exit in ``exit.json``), samples GPU and host memory at about
2 Hz into ``samples.jsonl``, folds the worker's events, and when training ends in any way writes
the summary row to the store and then ``status.json``. Cancel (the ``cancel`` file, SIGTERM or
SIGINT) stops the whole process tree: SIGTERM, then SIGKILL after a grace period.

The training does not depend on the supervisor: if the supervisor dies, the training runs on and
the next fttui command that looks writes its row (:mod:`fttui.core.run.recover`).
``supervisor.json`` keeps what that needs: the supervisor's pid and start time (a reused pid is
not it), and the training's process group (``train_pgid``, also what ``fttui cancel`` signals
when no supervisor is there).

    python -m fttui.core.run.supervisor RUN_DIR
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from fttui.core.run import rundir
from fttui.core.run.events import JsonlTail, append_jsonl
from fttui.core.run.recover import finish
from fttui.core.run.sampling import take_sample
from fttui.core.run.state import RunState
from fttui.core.run.summary import final_status
from fttui.monitor import HostSampler, make_gpu_sampler

TICK_S = float(os.environ.get("FTTUI_SAMPLE_INTERVAL", "0.5"))
GRACE_S = float(os.environ.get("FTTUI_KILL_GRACE", "10"))


class Supervisor:
    def __init__(self, run_dir: Path):
        self.rd = rundir.RunDir(run_dir)
        self.profile = self.rd.profile() or {}
        self.command = self.rd.command() or {}
        self.cancel_reason: str | None = None
        self.child: subprocess.Popen | None = None
        self.seen: dict[int, psutil.Process] = {}
        self.stall_after = float(
            os.environ.get("FTTUI_STALL_TIMEOUT", self.profile.get("monitor", {}).get("stall_timeout_s", 0) or 0)
        )
        self.stalled = False
        self.ever_stalled = False
        self.final = None
        self.state = RunState.for_profile(self.profile)

    # signals --------------------------------------------------------------------------------
    def _on_signal(self, signum, _frame) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = f"supervisor received {signal.Signals(signum).name}"

    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    # process tree ---------------------------------------------------------------------------
    def _remember_tree(self) -> None:
        if not self.child:
            return
        try:
            root = psutil.Process(self.child.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        for p in procs:
            self.seen.setdefault(p.pid, p)

    def _alive_tracked(self) -> list[psutil.Process]:
        alive = []
        for p in self.seen.values():
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.Error:
                pass
        return alive

    def _signal_all(self, sig: int) -> None:
        if self.child:
            try:
                os.killpg(self.child.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for p in self._alive_tracked():
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass

    def stop_tree(self) -> None:
        """SIGTERM the whole tree, SIGKILL what is left after the grace period."""
        self._remember_tree()
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            if self.child and self.child.poll() is None:
                time.sleep(0.1)
                continue
            if not self._alive_tracked():
                break
            time.sleep(0.1)
        self._signal_all(signal.SIGKILL)
        if self.child:
            try:
                self.child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def reap_leftovers(self) -> None:
        """After the main training process ended, nothing it started may stay behind."""
        left = self._alive_tracked()
        if self.child:
            try:
                os.killpg(self.child.pid, 0)
                group_alive = True
            except (ProcessLookupError, PermissionError):
                group_alive = False
        else:
            group_alive = False
        if left or group_alive:
            self._signal_all(signal.SIGTERM)
            deadline = time.monotonic() + min(GRACE_S, 5)
            while time.monotonic() < deadline and self._alive_tracked():
                time.sleep(0.1)
            self._signal_all(signal.SIGKILL)

    def logtee_options(self) -> list[str]:
        """A command run's log writer reads the Trainer's printed progress and caps the command's
        address space (``host_limit_bytes``); a profile run's worker does both itself."""
        if self.command.get("kind") != "command":
            return []
        limit = self.command.get("host_limit_bytes")
        return ["--parse", *(["--as-limit", str(int(limit))] if isinstance(limit, int) and limit > 0 else [])]

    # main loop ------------------------------------------------------------------------------
    def run(self) -> int:
        rd = self.rd
        me = {"pid": os.getpid(), "pgid": os.getpgid(0), "started": time.time(),
              "create_time": psutil.Process().create_time()}
        rundir.write_json_atomic(rd.supervisor_path, me)
        argv = self.command.get("argv")
        if not argv:
            self._finish(None, None, error="command.json has no argv")
            return 1
        env = dict(os.environ)
        env.update(self.command.get("env", {}))
        host = None
        gpu = make_gpu_sampler()
        tail = JsonlTail(rd.events_path)
        t_launch = time.time()
        with open_private(rd.log_path):  # the log exists (0600) before anything writes to it
            pass
        try:
            # The log writer leads the training's process group; output never passes through
            # this process, so the training outlives it.
            self.child = subprocess.Popen(
                [sys.executable, "-m", "fttui.core.run.logtee", str(rd.path), *self.logtee_options(), "--", *argv],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                cwd=self.command.get("cwd") or None,  # a command run: the folder it was started from
                start_new_session=True,
                close_fds=True,
            )
        except OSError as e:
            self._finish(None, t_launch, error=f"could not start {argv[0]}: {e}")
            return 1
        rundir.write_json_atomic(rd.supervisor_path, me | {"train_pgid": self.child.pid})
        append_jsonl(rd.events_path, {"event": "launch", "t": time.time(), "rank": -1,
                                      "source": "supervisor", "pid": self.child.pid})
        host = HostSampler(self.child.pid)
        last_progress = time.time()
        last_step = 0
        while True:
            tick = time.monotonic()
            self._remember_tree()
            self._sample(host, gpu)
            for ev in tail.read_new():
                self.state.apply(ev)
            snap_step = self.state.snapshot().step or 0
            if snap_step != last_step:
                last_step, last_progress = snap_step, time.time()
                if self.stalled:
                    self.stalled = False
                    self._event("resumed")
            if (self.stall_after > 0 and not self.stalled
                    and time.time() - last_progress > self.stall_after):
                self.stalled = self.ever_stalled = True
                self._event("stalled", seconds=round(time.time() - last_progress, 1))
            if self.cancel_reason is None and rd.cancel_path.exists():
                self.cancel_reason = "cancel requested"
            if self.cancel_reason is not None:
                self._event("cancel", reason=self.cancel_reason)
                self.stop_tree()
                break
            if self.child.poll() is not None:
                break
            try:
                self.child.wait(timeout=max(0.0, TICK_S - (time.monotonic() - tick)))
            except subprocess.TimeoutExpired:
                pass
        self.reap_leftovers()
        self._sample(host, gpu)
        for ev in tail.read_new():
            self.state.apply(ev)
        ex = rd.exit_info() or {}
        rc = ex.get("returncode") if isinstance(ex.get("returncode"), int) else self.child.returncode
        if ex.get("error"):
            self._finish(rc, t_launch, error=str(ex["error"]))
        else:
            self._finish(rc, t_launch)
        gpu.close()  # never raises: NVML's errors are swallowed by the sampler
        if self.command.get("slurm") and self.final is not None:
            # a Slurm node's supervisor is the job step's task: its exit code is the run's, so a
            # node that failed ends the step (srun --kill-on-bad-exit) and the job says FAILED
            from fttui.core.base.constants import EXIT_CODES, EXIT_ERROR

            return EXIT_CODES.get(self.final.status, EXIT_ERROR)
        return 0

    def _sample(self, host, gpu) -> None:
        if host is None:
            return
        try:
            sample, _ = take_sample(host, gpu, self.rd.samples_path)
            self.state.apply_sample(sample)
        except Exception as e:  # sampling must never take a run down
            print(f"supervisor: sampling failed: {e!r}", file=sys.stderr, flush=True)

    def _event(self, name: str, **kw) -> None:
        ev = {"event": name, "t": time.time(), "rank": -1, "source": "supervisor", **kw}
        append_jsonl(self.rd.events_path, ev)
        self.state.apply(ev)

    def _finish(self, rc: int | None, t_launch: float | None, error: str | None = None) -> None:
        status = final_status(self.rd, self.state.snapshot(), rc, self.cancel_reason, error)
        self.final = finish(self.rd, self.state, status, t_launch=t_launch, t_end=time.time(), stalled=self.ever_stalled,
               recorded_by="supervisor", source="supervisor")


def open_private(path: Path):
    """Append-only binary file readable by the user only."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab", buffering=0)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m fttui.core.run.supervisor RUN_DIR", file=sys.stderr)
        return 2
    os.umask(0o077)  # everything the run writes is readable by the user only
    sup = Supervisor(Path(args[0]))
    sup.install_signals()
    return sup.run()


if __name__ == "__main__":
    sys.exit(main())
