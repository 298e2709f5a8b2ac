"""Whether a run is live, and who is at work on it: its supervisor (pid and start), the training's
process group (:mod:`fttui.core.run.processes.proctree`), or Slurm for a job's run (``squeue`` / ``sacct``
through :mod:`fttui.monitor.slurm`). What a run directory holds is read by
:class:`~fttui.core.run.files.rundir.RunDir`, which neither asks processes nor Slurm; this module does
(docs/architecture.md, "Liveness").
"""

from __future__ import annotations

import time

from fttui.core.run.files import rundir
from fttui.core.run.files.rundir import RunDir
from fttui.core.run.files.runfiles import ProcessId
from fttui.core.run.processes.proctree import group_alive, pid_alive

#: How far two readings of one process's start time (psutil's ``create_time``) may differ: it is
#: the boot time of ``/proc/stat``, whole seconds that the kernel derives anew at each read and
#: that step by one now and then, plus the start in clock ticks; a run's CLI once took its live
#: supervisor for a dead one across such a step (and reported it gone without a status).
CREATE_TIME_SLACK_S = 2.0

#: A run directory without ``supervisor.json`` yet is live this long after it was made.
STARTING_S = 30


def process_matches(pid: int | None, create_time: float | None, ident: ProcessId | None = None) -> bool:
    """``pid`` is alive and is the process started then: its start in clock ticks on this boot
    (``ident``, :func:`fttui.core.run.processes.guard.identity`) where recorded, else (older run
    directories) its ``create_time`` within :data:`CREATE_TIME_SLACK_S`."""
    if not isinstance(pid, int) or not pid_alive(pid):
        return False
    if ident is not None and ident.start_ticks is not None:
        from fttui.core.run.processes.guard import same_process

        return same_process(pid, ident) is not False
    if not isinstance(create_time, (int, float)):
        return False  # nothing says which process it was: a live pid may be anyone's (pid 1, a reused one)
    import psutil

    try:
        return abs(psutil.Process(pid).create_time() - create_time) < CREATE_TIME_SLACK_S
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def slurm_state(rd: RunDir):
    """Slurm's :class:`~fttui.monitor.slurm.JobState` of the job ``rd`` belongs to; ``None`` when
    it is no Slurm job's, not submitted yet, unknown to Slurm, or there is no Slurm client here."""
    job = rd.slurm()
    if job is None or not job.job_id:
        return None
    from fttui.monitor.slurm import SlurmUnavailable, job_state

    try:
        return job_state(job.job_id)
    except SlurmUnavailable:
        return None


def slurm_live(rd: RunDir) -> bool | None:
    """Whether ``rd``'s job still runs or waits, as Slurm says (a node's processes may be on
    another machine: their pids mean nothing here); ``None`` when this is no Slurm job's or
    there is no Slurm client to ask."""
    sl = rd.slurm()
    if sl is None:
        return None
    if not sl.job_id:  # fttui submit has not had sbatch's answer yet
        return None
    from fttui.monitor.slurm import SlurmUnavailable, job_state

    try:
        st = job_state(sl.job_id)
    except SlurmUnavailable:
        return None
    return bool(st is not None and st.live)


def supervisor_alive(rd: RunDir) -> bool:
    """The supervisor of supervisor.json is running: its pid is alive and was started when the
    supervisor was (a pid reused by another process does not count)."""
    sup = rd.supervisor()
    return sup is not None and process_matches(sup.pid, sup.create_time, sup.id)


def training_alive(rd: RunDir) -> bool:
    """The training's process group (supervisor.json's ``train_pgid``) still has a process and
    its log writer has not recorded an exit. The group's leader is checked against its start
    time and boot (``train_id``): after a reboot or a reused pid, another group is not it."""
    sup = rd.supervisor()
    pgid = sup.train_pgid if sup is not None else None
    if sup is None or pgid is None or pgid <= 1 or rd.exit_path.exists():
        return False
    if sup.train_id is None:  # nothing says which group it was: it may be anyone's now (issue 36:
        return False  # `fttui cancel` of a copied run directory signalled an unrelated group)
    from fttui.core.run.processes.guard import same_process

    # None: the leader is gone (its group's other processes keep the id: never reused while
    # they live)
    if same_process(pgid, sup.train_id) is False:
        return False
    return group_alive(pgid)


def is_live(rd: RunDir) -> bool:
    """No final status yet and someone is at work: the supervisor, or (when it died) the
    training it started; Slurm for a job's run."""
    if rd.has_status():
        return False
    live = slurm_live(rd)
    if live is not None:
        return live
    sup = rd.supervisor()
    if sup is None:
        # Created but the supervisor has not written its pid yet: live for a short while.
        try:
            return time.time() - rd.path.stat().st_mtime < STARTING_S
        except OSError:
            return False
    return supervisor_alive(rd) or training_alive(rd)


def state_label(rd: RunDir) -> str:
    """The run's state in a word or three: its final status, Slurm's state of a job, ``lost``,
    ``running``, ``running (unsupervised)``."""
    st = rd.final_status()
    if st is not None:
        return st.status
    if rd.is_slurm_job():
        job = slurm_state(rd)
        if job is not None:
            return job.label() if job.live else f"ended ({job.state})"
    if not is_live(rd):
        return "lost"
    if rd.slurm() is not None:  # a Slurm node's supervisor may be on another machine: Slurm said it runs
        return "running"
    return "running" if rd.supervisor() is None or supervisor_alive(rd) else "running (unsupervised)"


def find(run: str | None) -> RunDir | None:
    """A run by id, id prefix or path (:func:`fttui.core.run.files.rundir.find`); None = the latest
    live run, else the latest run."""
    return rundir.find(run, live=is_live)


__all__ = [
    "find",
    "CREATE_TIME_SLACK_S",
    "process_matches",
    "slurm_state",
    "slurm_live",
    "supervisor_alive",
    "training_alive",
    "is_live",
    "state_label",
]
