"""Finishing a run: its exit event, summary row and ``status.json``, written once.

The supervisor finishes its run when the training ends (:func:`finish`). When the supervisor
died first, the training goes on (its log writer, :mod:`fttui.core.run.supervising.logtee`, holds its output
and records its exit in ``exit.json``), and the next fttui command that looks at the run (``ls``,
``results``, ``attach``, the app off its first frame) finishes it with :func:`recover`:

- the training exited and ``exit.json`` says how: the same verdict as the supervisor's
  (completed, failed, oom, cancelled), from the same events;
- nothing recorded the exit (the log writer was killed too, or the machine went down): ``completed``
  when the worker's end event is there, else ``lost`` with the figures up to the last step.

A lock file in the run directory and the check for ``status.json`` under it make sure two
commands looking at once write one row. What the run left in its cgroup (a ``setsid`` daemon:
:mod:`fttui.core.run.processes.cgroup`) is ended first. Rows written this way say ``recorded_by = "recovered"``:
their GPU samples stop where the supervisor died.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import replace

from fttui.core.base.constants import WATCHED
from fttui.core.run.files import rundir, runlock
from fttui.core.run.files.events import ExitEvent, StalledEvent, read_events, write_event
from fttui.core.run.files.statusfile import FinalStatus
from fttui.core.run.fold.state import RunState
from fttui.core.run.processes import liveness
from fttui.core.run.processes.oomkill import KillEvidence
from fttui.core.run.row.summary import build_row, final_status, launch_time, replay, settled_row
from fttui.core.run.supervising.kept_rows import store_kept_rows

log = logging.getLogger(__name__)


def save_row(row: dict, rd: rundir.RunDir, store: bool = True) -> bool:
    """Write the summary row; keep a copy in the run dir whatever happens to the store (and the
    store's row when the run directory cannot take the copy: a full disk).
    ``store=False``: ``row.json`` only (a Slurm node's supervisor: the store may be on a shared
    filesystem where SQLite's locks do not hold; :func:`settle_slurm` stores it later)."""
    try:
        rundir.write_json_atomic(rd.row_path, row)
    except OSError as e:
        print(
            f"fttui: row.json of {rd.run_id} not written ({e.strerror or e}); the store keeps the row",
            file=sys.stderr,
            flush=True,
        )
    if not store:
        return False
    from fttui.core.base.errors import StoreError
    from fttui.core.results.store import Store

    for attempt in range(5):
        try:
            with Store() as db:
                db.put(row)
            return True
        except Exception as e:  # any failure (sqlite, disk, a bad value): retry, then go on to status.json
            print(
                f"fttui: saving the row of {rd.run_id} failed ({e!r}), attempt {attempt + 1}",
                file=sys.stderr,
                flush=True,
            )
            if isinstance(e, StoreError) and e.lasting:  # corrupt, read-only: a retry cannot help
                break
            time.sleep(0.5 * (attempt + 1))
    return False


def finish(
    rd: rundir.RunDir,
    state: RunState,
    status: FinalStatus,
    *,
    t_launch: float | None,
    t_end: float,
    stalled: bool,
    recorded_by: str,
    source: str,
    slurm_job=None,
) -> FinalStatus:
    """Append the exit event, save the summary row, then write ``status.json`` (last: its
    presence means the run is finished). A Slurm node's row goes to ``row.json`` only, until
    the job is over (``slurm_job``, its final state, whose verdict ``status`` already is: then
    to the store too, see :func:`settle_slurm`)."""
    ev = ExitEvent(
        t=time.time(),
        rank=-1,
        source=source,
        returncode=status.returncode,
        signal=status.signal,
        status=status.status,
    )
    try:
        write_event(rd.events_path, ev)
    except OSError:  # a full disk: status.json and the row say how it ended
        pass
    state.apply(ev)
    row = build_row(
        rd,
        state.snapshot(),
        status,
        t_launch=t_launch,
        t_end=t_end,
        stalled=stalled,
        recorded_by=recorded_by,
        slurm_job=slurm_job,
    )
    slurm = rd.slurm()
    status = replace(
        status, row_saved=save_row(row, rd, store=slurm is None or slurm_job is not None), ended=time.time()
    )
    rundir.write_json_atomic(rd.status_path, status.to_dict())
    log.debug(
        "run %s finished by the %s: %s, row %s",
        rd.run_id,
        recorded_by,
        status.status,
        "saved" if status.row_saved else "NOT saved (row.json kept)",
    )
    return status


def end_watch(rd: rundir.RunDir, state: RunState, why: str, t_launch: float | None, source: str) -> FinalStatus:
    """Finish a watch (``fttui watch --pid``): status ``watched`` and, only when ``--record`` asked
    for it, the summary row (kind ``watch``)."""
    status = FinalStatus(WATCHED, error=why)
    if rd.watch_spec().get("record"):
        return finish(
            rd, state, status, t_launch=t_launch, t_end=time.time(), stalled=False, recorded_by=source, source=source
        )
    ev = ExitEvent(t=time.time(), rank=-1, source=source, status=WATCHED)
    write_event(rd.events_path, ev)
    state.apply(ev)
    status = replace(status, ended=time.time())
    rundir.write_json_atomic(rd.status_path, status.to_dict())
    return status


def needs_recovery(rd: rundir.RunDir) -> bool:
    """The run has no final status, its supervisor started and is gone, and nothing of the
    training is running any more."""
    return (
        not rd.has_status()
        and rd.supervisor() is not None
        and not liveness.supervisor_alive(rd)
        and not liveness.training_alive(rd)
    )


def _stored_final(rd: rundir.RunDir) -> FinalStatus | None:
    """The run's final status from its stored row, when the store has one (a finished row is never
    overwritten from a partial run directory: status.json deleted, say)."""
    from fttui.core.results.store import Store

    try:
        with Store() as store:
            row = store.get(rd.run_id)
    except Exception:  # an unreadable store: nothing to keep, recover as usual
        return None
    if not row or row.get("status") in (None, "", "running", "starting"):
        return None
    return FinalStatus(
        str(row["status"]),
        row.get("exit_code"),
        row.get("signal"),
        oom_kind=row.get("oom_kind"),
        error=row.get("error"),
        error_step=row.get("error_step"),
        error_rank=row.get("error_rank"),
        row_saved=True,
    )


def recover(rd: rundir.RunDir) -> FinalStatus | None:
    """Finish a run whose supervisor died, once its training has ended; ``None`` when there is
    nothing to do (finished already, still live, or another command is finishing it now)."""
    if rd.slurm() is not None:
        return settle_slurm(rd)
    if not needs_recovery(rd) or not runlock.take(rd):
        return None
    try:
        if rd.has_status():  # finished while we waited for the lock
            return None
        from fttui.core.run.processes.cgroup import end_run, oom_kills, recorded

        kill = KillEvidence(run_cgroup=oom_kills(recorded(rd.supervisor(), rd.run_id)))  # before the cgroup goes
        ended = end_run(rd)  # the training ended: what is left in the run's cgroup (a daemon) ends too
        if ended:
            log.debug("run %s: ended %d process(es) left in its cgroup: %s", rd.run_id, len(ended), ended)
        stored = _stored_final(rd)
        if stored is not None:  # finished before, its status.json lost: the stored row is the record
            rundir.write_json_atomic(rd.status_path, stored.to_dict())
            return None
        return _finish_recovered(rd, kill=kill)
    finally:
        runlock.release(rd)


def _finish_recovered(rd: rundir.RunDir, slurm_job=None, *, kill: KillEvidence | None = None) -> FinalStatus:
    """Write the row and status of a run nothing finished, from what it left on disk;
    ``slurm_job``: the Slurm job's final state, whose cause is the verdict's."""
    events = read_events(rd.events_path)
    state = replay(rd)
    snap = state.snapshot()
    times = [e.t for e in events if isinstance(e.t, (int, float))]
    t_launch = launch_time(events)
    if t_launch is None:
        sup = rd.supervisor()
        t_launch = sup.started if sup is not None else None
    if rd.kind_and_group()[0] == "watch":  # its watcher died: no row unless one was asked for
        return end_watch(rd, state, "the watcher ended without a status", t_launch, "recovered")
    ex = rd.exit_info()
    cancel = "cancel requested" if rd.cancel_path.exists() else None
    if ex is not None and ex.returncode is not None:
        status = final_status(rd, snap, ex.returncode, cancel, kill=kill)
        t_end = float(ex.t or (times[-1] if times else time.time()))
    else:
        t_end = times[-1] if times else time.time()
        if snap.status == "completed":
            status = FinalStatus("completed")
        elif cancel:
            status = FinalStatus("cancelled", error=cancel, error_step=snap.step)
        else:
            status = FinalStatus(
                "lost",
                error=f"supervisor and training ended without recording the exit; figures up to step {snap.step or 0}",
                error_step=snap.step,
            )
    if slurm_job is not None:
        from fttui.core.run.slurm.slurmend import node_verdict

        status = node_verdict(status if status.status in ("completed", "failed", "oom") else None, slurm_job, snap.step)
    stalled = any(isinstance(e, StalledEvent) for e in events)
    return finish(
        rd,
        state,
        status,
        t_launch=t_launch,
        t_end=t_end,
        stalled=stalled,
        recorded_by="recovered",
        source="recovery",
        slurm_job=slurm_job,
    )


def settle_slurm(rd: rundir.RunDir) -> FinalStatus | None:
    """A Slurm node's run (or a submitted job's directory) once Slurm says the job is over: a
    node that finished gets Slurm's cause in its status and row, and the row goes to the store
    (its supervisor left it in ``row.json`` only); a node that never finished (its machine failed,
    it was killed first) is finished here from its files; a job directory gets the job's status
    (:func:`fttui.core.run.slurm.slurmend.job_verdict`). ``None`` while the job runs or waits, and
    when Slurm cannot be asked here (then a finished node's row is stored as it is)."""
    from fttui.monitor.slurm import have_slurm

    own = rd.final_status()
    if own is not None and (own.row_saved or rd.is_slurm_job()):
        return None
    job = liveness.slurm_state(rd)
    if job is None:  # no Slurm client here (a finished node's row is stored as it is), or Slurm forgot the job
        if own is not None and not have_slurm() and not rd.is_slurm_job():
            return _store_settled(rd, own, None)
        return None
    if job.live and own is not None and not rd.is_slurm_job():
        from fttui.core.run.slurm.slurmend import requeued  # an earlier attempt of a requeued job is over

        node = rd.slurm_node()
        job = requeued(str(job.job_id), (node.restart if node is not None else None) or 0) or job
    if job.live or not runlock.take(rd):
        return None
    try:
        own = rd.final_status()
        if rd.is_slurm_job():
            return None if own is not None else _settle_job(rd, job)
        if own is None:
            return _finish_recovered(rd, job)
        if own.row_saved:
            return None
        return _store_settled(rd, own, job)
    finally:
        runlock.release(rd)


def _store_settled(rd: rundir.RunDir, own: FinalStatus, job) -> FinalStatus:
    """Store a node's row that its supervisor left in ``row.json``: as it is when Slurm cannot be
    asked here (``job`` None), else folded again with Slurm's verdict (:func:`settled_row`)."""
    from fttui.core.run.slurm.slurmend import node_verdict

    status = own if job is None else node_verdict(own, job)
    row = rd.row()
    saved = False
    if row is not None:
        if job is not None:
            row = settled_row(rd, row, status, job)
        saved = save_row(row, rd)
    status = replace(status, row_saved=saved, ended=own.ended or time.time())
    rundir.write_json_atomic(rd.status_path, status.to_dict())
    return status


def _settle_job(rd: rundir.RunDir, job) -> FinalStatus | None:
    """The job directory's status, once every node's run of it has one."""
    from fttui.core.run.slurm.slurmend import job_verdict
    from fttui.core.run.slurm.slurmjob import job_nodes, restart_of

    nodes = job_nodes(rd)
    if not all(r.has_status() for r in nodes):
        return None
    last = max((restart_of(r) for r in nodes), default=0)  # a requeued job's verdict is its last attempt's
    finals = [r.final_status() for r in nodes if restart_of(r) == last]
    statuses = [str(f.status if f is not None else None) for f in finals]
    status = replace(job_verdict(job, statuses), ended=time.time())
    rundir.write_json_atomic(
        rd.status_path, {**status.to_dict(), "slurm_state": job.state, "nodes": [r.run_id for r in nodes]}
    )
    return status


def recover_all(runs: list[rundir.RunDir] | None = None) -> list[tuple[rundir.RunDir, FinalStatus]]:
    """Finish every run that needs it (see :func:`recover`); returns those it finished."""
    done = []
    runs = rundir.list_runs() if runs is None else runs
    log.debug("checking %d run director%s for runs to finish", len(runs), "y" if len(runs) == 1 else "ies")
    # a Slurm job's directory after its nodes' runs (its status is theirs, with Slurm's cause)
    for rd in sorted(runs, key=lambda r: r.is_slurm_job()):
        try:
            st = recover(rd)
        except OSError as e:  # an unreadable run directory must not stop the others
            print(f"fttui: cannot finish run {rd.run_id}: {e}", file=sys.stderr)
            continue
        if st is not None:
            done.append((rd, st))
    store_kept_rows(runs)  # rows kept in row.json while the store could not take them
    return done
