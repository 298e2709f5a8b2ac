"""The supervisor: owns one run from launch to summary row.

Started by ``fttui run`` (or the app) in a session of its own, so it outlives the process that launched it, a closed
terminal and a dropped SSH connection. It starts the training command in its own process group, under its log writer
(:mod:`.logtee`, which masks secrets into ``train.log`` and records the exit in ``exit.json``),
samples GPU and host memory at about 2 Hz into ``samples.jsonl``, folds the worker's events (a memory trend that
reaches its limit within the horizon is a ``memory_warning`` event, once per rank and limit:
:mod:`fttui.core.run.fold.memtrend`), and when training ends in any way writes the summary row to the store and then
``status.json``. Cancel (the ``cancel`` file, SIGTERM or SIGINT) stops the whole process tree: SIGTERM, then SIGKILL
after a grace period; so does the deletion of the run directory (then nothing is recorded, and nothing waits to be).
Where the cgroup v2 hierarchy is writable the training runs in a cgroup of its own (:mod:`~.processes.cgroup`),
ended (``cgroup.kill``) and removed with the run; elsewhere the run's log says so once.

The training does not depend on the supervisor: if the supervisor dies, the training runs on and the next
fttui command that looks writes its row (:mod:`fttui.core.run.supervising.recover`). ``supervisor.json`` keeps what that
needs: the supervisor's pid and start time (a reused pid is not it), and the training's process group
(``train_pgid``, also what ``fttui cancel`` signals when no supervisor is there).

    python -m fttui.core.run.supervising.supervisor RUN_DIR
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil

from fttui.core.base import rank_timing
from fttui.core.base.envnumbers import env_float
from fttui.core.profiles.stored import stored_profile
from fttui.core.run.files import rundir
from fttui.core.run.files.events import (
    CancelEvent,
    Event,
    EventTail,
    FaultEvent,
    LaunchEvent,
    MemoryWarningEvent,
    ResumedEvent,
    StalledEvent,
    StepEvent,
    write_event,
)
from fttui.core.run.files.runfiles import CommandFile, ExitFile, SupervisorFile
from fttui.core.run.files.sampling import take_sample
from fttui.core.run.files.statusfile import FinalStatus
from fttui.core.run.fold.state import RunState
from fttui.core.run.launching import oomretry
from fttui.core.run.processes import cgroup, guard, hang, oomkill, proctree, shmleft
from fttui.core.run.row.summary import final_status
from fttui.core.run.supervising.peers import NodePeers
from fttui.core.run.supervising.recover import finish
from fttui.monitor import HostSampler, make_gpu_sampler
from fttui.monitor.snapshots import HostSnapshot

TICK_S = env_float("FTTUI_SAMPLE_INTERVAL", 0.5)


class Supervisor:
    def __init__(self, run_dir: Path):
        self.rd = rundir.RunDir(run_dir)
        self.profile = self.rd.profile() or stored_profile({})
        self.command = self.rd.command() or CommandFile()
        self.cancel_reason: str | None = None
        self.child: subprocess.Popen | None = None
        # the training's group (its leader once started), every process seen in it, its cgroup
        self.tree = proctree.Tree(extra=self._cgroup_members)
        self.cgroup: Path | None = None  # the run's own cgroup, where one can be made
        self.oom_kills: int | None = None  # its processes the kernel's OOM killer ended (memory.events)
        self.container_oom_kills: int | None = None  # the count of fttui's own memory cgroup at the launch
        self.t_launch: float | None = None
        self.live_host: HostSnapshot | None = None  # the last host sample taken while the training lived
        # 0 (the default): stalled after no step for max(floor, 10 usual steps) (guard.stall_limit)
        self.stall_fixed = env_float("FTTUI_STALL_TIMEOUT", float(self.profile.monitor.stall_timeout_s or 0))
        self.stall_floor = env_float("FTTUI_STALL_FLOOR", float(guard.STALL_FLOOR_S))
        self.step_times: list[tuple[int, float]] = []
        self.stalled = False
        self.ever_stalled: str | None = None  # the stall's message
        self.hang: str | None = None  # where the stall's ranks were (fttui.core.run.processes.hang)
        self.fault: str | None = None  # a write that failed (disk full): the run ends failed with it
        self.fault_t: float | None = None  # when that write failed
        self.report_r: int | None = None
        self.final: FinalStatus | None = None
        self.state = RunState.for_profile(self.profile)
        self.peers = NodePeers(self.rd, self.command)  # a Slurm job's other nodes, for the ranks' skew
        self.next_run: rundir.RunDir | None = None  # the attempt that continues this run (oomretry)

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
        """Every descendant of the supervisor is the run's: as the child subreaper it also gets
        the processes that left the training's tree (a double-fork), and reaps them."""
        if not self.child:
            return
        try:
            procs = psutil.Process().children(recursive=True)
        except psutil.Error:
            return
        self.tree.remember(procs)
        for p in procs:
            try:
                if p.pid != self.child.pid and p.ppid() == os.getpid() and p.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(p.pid, os.WNOHANG)  # an orphan of the run re-parented here
            except (psutil.Error, ChildProcessError, OSError):
                pass

    def _cgroup_members(self) -> list[int]:
        return cgroup.members(self.cgroup) if self.cgroup else []

    def stop_tree(self) -> None:
        """SIGTERM the whole tree (the training's group, every process seen in it, the run's
        cgroup), SIGKILL what is left after the grace period (:data:`proctree.GRACE_S`)."""
        self._remember_tree()
        self.tree.stop(after_kill=self._end_cgroup)

    def reap_leftovers(self) -> None:
        """After the main training process ended, nothing it started may stay behind."""
        self._remember_tree()
        if self.tree.any_alive() or self.tree.group_alive():
            self.tree.signal(signal.SIGTERM)
            # the training has ended: what it left gets the grace period, at most 5 s
            deadline = time.monotonic() + min(proctree.GRACE_S, 5)
            while time.monotonic() < deadline and self.tree.any_alive():
                time.sleep(proctree.POLL_S)
            self.tree.signal(signal.SIGKILL)
        self._end_cgroup()
        # DeepSpeed's CPU collectives leave each rank's shared-memory workspace behind
        shmleft.remove_unheld()

    def _end_cgroup(self) -> None:
        """Nothing is left in the run's cgroup (cgroup.kill), and the empty cgroup is removed."""
        if self.cgroup is not None:
            n = cgroup.oom_kills(self.cgroup)  # read before it goes
            if n is not None:
                self.oom_kills = max(self.oom_kills or 0, n)
            cgroup.kill(self.cgroup)

    def logtee_options(self) -> list[str]:
        """A command run's log writer reads the Trainer's printed progress and caps the command's
        address space (``host_limit_bytes``); a profile run's worker does both itself."""
        cg = ["--cgroup", str(self.cgroup)] if self.cgroup else []
        if self.command.kind != "command":
            return cg
        limit = self.command.host_limit_bytes
        return ["--parse", *(["--as-limit", str(int(limit))] if limit is not None and limit > 0 else []), *cg]

    # main loop ------------------------------------------------------------------------------
    def run(self) -> int:
        rd = self.rd
        argv = self.command.argv
        self.cgroup, no_cgroup = cgroup.create(rd.run_id) if argv else (None, "")
        me = SupervisorFile(
            pid=os.getpid(),
            pgid=os.getpgid(0),
            started=time.time(),
            create_time=psutil.Process().create_time(),
            id=guard.identity(os.getpid()),
            cgroup=str(self.cgroup) if self.cgroup else None,
        )
        reserve = guard.Reserve(rd.path)  # room for the verdict when the disk fills up
        self._write("supervisor.json", rd.write_supervisor, me)
        first_event = oomretry.attempt_event(rd)  # a run started to recover from an OOM says so first
        if first_event is not None:
            self._write("events.jsonl", write_event, rd.events_path, first_event)
        if not argv:
            self._finish(None, None, error="command.json has no argv")
            return 1
        env = dict(os.environ)
        env.update(self.command.env)
        host = None
        gpu = make_gpu_sampler()
        tail = EventTail(rd.events_path)
        t_launch = self.t_launch = time.time()
        self.container_oom_kills = oomkill.memory_cgroup_oom_count()
        with open_private(rd.log_path) as log:  # the log exists (0600) before anything writes to it
            if no_cgroup:  # said once, in the run's log: not an error
                self._write(
                    "train.log",
                    log.write,
                    f"fttui: {no_cgroup}; they are tracked through the supervisor "
                    f"(a daemon that outlives the supervisor is not ended)\n".encode(),
                )
        report_r, report_w = os.pipe()  # the log writer reports a failed write here
        os.set_blocking(report_r, False)
        self.report_r = report_r
        try:
            # The log writer leads the training's process group; output never passes through
            # this process, so the training outlives it.
            self.child = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "fttui.core.run.supervising.logtee",
                    str(rd.path),
                    *self.logtee_options(),
                    "--report-fd",
                    str(report_w),
                    "--",
                    *argv,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                cwd=self.command.cwd or None,  # a command run: the folder it was started from
                start_new_session=True,
                close_fds=True,
                pass_fds=(report_w,),
            )
            self.tree.leader = self.child
        except OSError as e:
            self._end_cgroup()
            self._finish(None, t_launch, error=f"could not start {argv[0]}: {e}", reserve=reserve)
            return 1
        finally:
            os.close(report_w)
        # the training's group and its leader's start time: cancel signals only that process's group
        self._write(
            "supervisor.json",
            rd.write_supervisor,
            replace(me, train_pgid=self.child.pid, train_id=guard.identity(self.child.pid)),
        )
        self._event(LaunchEvent(pid=self.child.pid))
        host = HostSampler(self.child.pid)
        last_progress = time.time()
        last_step = 0
        while True:
            tick = time.monotonic()
            self._remember_tree()
            self._sample(host, gpu)
            for ev in tail.read_new():
                self.state.apply(ev)
                if (
                    isinstance(ev, StepEvent)
                    and isinstance(ev.step, int)
                    and isinstance(ev.t, (int, float))
                    and (not self.step_times or ev.step > self.step_times[-1][0])
                ):
                    self.step_times = [*self.step_times[-60:], (ev.step, float(ev.t))]
            self._fold_peers()
            snap = self.state.snapshot()
            for fields in self.state.memory.announce(snap.memory_warnings):  # once per rank and limit
                self._event(MemoryWarningEvent(**fields))
            if (snap.step or 0) != last_step:
                last_step, last_progress = snap.step or 0, time.time()
                if self.stalled:
                    self.stalled = False
                    self._event(ResumedEvent())
            idle = time.time() - last_progress
            if (
                last_step > 0
                and not self.stalled
                and idle > guard.stall_limit(self.step_times, self.stall_fixed, self.stall_floor)
            ):
                self.stalled = True
                self.ever_stalled = guard.stall_message(idle, guard.usual_step_s(self.step_times))
                self.hang = self._where()
                self._event(StalledEvent(seconds=round(idle, 1), message=self.ever_stalled, where=self.hang))
            self._read_report()
            if self.cancel_reason is None and rd.cancel_path.exists():
                self.cancel_reason = "cancel requested"
            if self.cancel_reason is None and not rd.path.is_dir():  # nothing could record or cancel it
                self.cancel_reason = "its run directory was deleted"
            if self.fault is not None:  # a full disk: the run cannot record itself any more
                reserve.release()
                self._event(FaultEvent(message=self.fault, failed_t=self.fault_t))
                self.stop_tree()
                break
            if self.cancel_reason is not None:
                self._event(CancelEvent(reason=self.cancel_reason))
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
        self._read_report()
        ex = rd.exit_info() or ExitFile()
        rc = ex.returncode if ex.returncode is not None else self.child.returncode
        if self.fault or ex.error:
            self._finish(rc, t_launch, error=str(self.fault or ex.error), reserve=reserve)
        else:
            self._finish(rc, t_launch, reserve=reserve)
        gpu.close()  # never raises: NVML's errors are swallowed by the sampler
        if self.command.slurm and self.final is not None:
            # a Slurm node's supervisor is the job step's task: its exit code is the run's, so a
            # node that failed ends the step (srun --kill-on-bad-exit) and the job says FAILED
            from fttui.core.base.constants import EXIT_CODES, EXIT_ERROR

            return EXIT_CODES.get(self.final.status, EXIT_ERROR)
        return 0

    # faults ---------------------------------------------------------------------------------
    def _write(self, what: str, fn, *args) -> None:
        """One of the supervisor's own writes; a failure is the run's fault (disk full), never
        this process's death."""
        try:
            fn(*args)
        except OSError as e:
            if self.fault is None:
                self.fault, self.fault_t = guard.write_error(what, e), time.time()

    def _read_report(self) -> None:
        """What the log writer reported (a write that failed), from its pipe."""
        if self.report_r is None:
            return
        try:
            data = os.read(self.report_r, 65536)
        except (BlockingIOError, OSError):
            return
        for line in data.splitlines():
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict) and msg.get("error") and self.fault is None:
                t = msg.get("t")
                self.fault, self.fault_t = str(msg["error"]), float(t) if isinstance(t, (int, float)) else time.time()

    def _sample(self, host, gpu) -> None:
        if host is None:
            return
        try:
            sample, _ = take_sample(host, gpu, self.rd.samples_path)
            self.state.apply_sample(sample)
            if sample.host is not None and self.child is not None and self.child.poll() is None:
                self.live_host = sample.host  # the host while the training lived: its memory at a kill
        except OSError as e:
            if self.fault is None:
                self.fault, self.fault_t = guard.write_error("samples.jsonl", e), time.time()
        except Exception as e:  # sampling must never take a run down
            print(f"supervisor: sampling failed: {e!r}", file=sys.stderr, flush=True)

    def _event(self, ev: Event) -> None:
        """One of the supervisor's own events (rank -1, now), written and folded."""
        ev = replace(ev, t=time.time(), rank=-1, source="supervisor")
        self._write("events.jsonl", write_event, self.rd.events_path, ev)
        self.state.apply(ev)

    def _fold_peers(self) -> None:
        """A Slurm job's other nodes' steps, for the ranks' skew (supervising/peers.py); a failure
        is said once and ends the peers' reading, never the run."""
        if not self.peers.active:
            return
        try:
            for ev in self.peers.read_new():
                self.state.apply_peer(ev)
            told = self.peers.tell(self.state)
        except Exception as e:
            self.peers.prefix = None
            print(f"supervisor: reading the other nodes' steps failed ({type(e).__name__}: {e})", file=sys.stderr)
            return
        if told is not None:
            self._event(told)

    def _where(self) -> str | None:
        """Where the hang is: every rank asked at the stall (fttui.core.run.processes.hang, a few
        seconds); ``None`` when the rank timing is off, no rank reported a start, or asking failed."""
        if rank_timing.timing_off(os.environ):
            return None
        try:
            found = hang.ask(self.rd.path)
            return found.sentence if found.ranks else None  # no rank reported a start: nothing to say
        except Exception as e:  # the stall is said without it
            print(f"supervisor: asking the ranks where the hang is failed ({type(e).__name__}: {e})", file=sys.stderr)
            return None

    def _kill_evidence(self) -> oomkill.KillEvidence:
        """What can be read of a SIGKILL of the training (:mod:`fttui.core.run.processes.oomkill`):
        the OOM kills its cgroup and fttui's memory cgroup counted, the kernel log's record."""
        before, now = self.container_oom_kills, oomkill.memory_cgroup_oom_count()
        pids = {*self.tree.seen, *([self.child.pid] if self.child else [])}
        read, record = oomkill.kernel_log_oom_kill(pids, since=self.t_launch)
        return oomkill.KillEvidence(
            run_cgroup=self.oom_kills,
            container=None if before is None or now is None else max(0, now - before),
            kernel_log=record,
            kernel_log_read=read,
            ram_used_mb=getattr(self.live_host, "ram_used_mb", None),
            ram_total_mb=getattr(self.live_host, "ram_total_mb", None),
        )

    def _finish(
        self, rc: int | None, t_launch: float | None, error: str | None = None, reserve: guard.Reserve | None = None
    ) -> None:
        """The verdict, kept in memory until it can be written: a write that fails (a full disk)
        gives back the reserve and is tried again, every few seconds, until it is written."""
        kill = self._kill_evidence() if rc == -signal.SIGKILL else None
        status = final_status(self.rd, self.state.snapshot(), rc, self.cancel_reason, error, kill=kill)
        if self.ever_stalled:
            stalled = f"stalled: {self.ever_stalled}" + (f"; where: {self.hang}" if self.hang else "")
            status = replace(status, error=f"{status.error}; " * bool(status.error) + stalled)
        if self.cancel_reason is None and self.fault is None and error is None:  # train.on_oom = "shrink":
            status, self.next_run, retry = oomretry.after_oom(self.rd, self.profile, status, self.state.snapshot())
            if retry is not None:  # the next attempt, supervised next by this process (main)
                self._write("events.jsonl", write_event, self.rd.events_path, retry)
        t_end, wait = time.time(), 1.0
        while True:
            if not self.rd.path.is_dir():  # deleted: the verdict has nowhere to go, never wait for it
                print(
                    f"supervisor: run {self.rd.run_id} ended ({status.status}) with its run directory deleted; "
                    "nothing recorded",
                    file=sys.stderr,
                    flush=True,
                )
                break
            try:
                self.final = finish(
                    self.rd,
                    self.state,
                    status,
                    t_launch=t_launch,
                    t_end=t_end,
                    stalled=bool(self.ever_stalled),
                    recorded_by="supervisor",
                    source="supervisor",
                )
                break
            except OSError as e:
                if reserve is not None:
                    reserve.release()
                print(
                    f"supervisor: {guard.write_error('the run verdict', e)}; trying again in {wait:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
                time.sleep(wait)
                wait = min(wait * 2, 30.0)
        if reserve is not None:
            reserve.release()


def open_private(path: Path):
    """Append-only binary file readable by the user only."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab", buffering=0)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m fttui.core.run.supervising.supervisor RUN_DIR", file=sys.stderr)
        return 2
    os.umask(0o077)  # everything the run writes is readable by the user only
    guard.become_subreaper()  # a process that leaves the run's tree (double-fork) comes back here
    sup = Supervisor(Path(args[0]))
    while True:
        sup.install_signals()
        rc = sup.run()
        if sup.next_run is None:  # else an attempt that recovers from an OOM: supervised here too
            return rc
        sup = Supervisor(sup.next_run.path)


if __name__ == "__main__":
    sys.exit(main())
