"""How a Slurm job ended, in a run's verdict: what Slurm's final state (``squeue``, ``sacct``,
``sacct -c``) changes in a node's status and row, and the job's own status.

A node's supervisor sees only a SIGTERM when Slurm ends the job (scancel, the time limit,
preemption: Slurm signals the step's processes alike), and nothing at all when its node fails.
Once Slurm says the job is over, the cause is Slurm's: a node that had not finished is
``cancelled`` (``CANCELLED``, ``TIMEOUT``, ``PREEMPTED``, ``DEADLINE``), ``lost`` (``NODE_FAIL``,
``BOOT_FAIL``) or ``oom`` (``OUT_OF_MEMORY``, Slurm's memory limit), and its error says Slurm's
cause in words (``Slurm: TIMEOUT: the job reached its time limit (1:00)``). A node that finished
before (completed, failed, out of memory) keeps its own verdict. The verdict is the status a
node's row is folded with, and Slurm's facts (``env.slurm``,
:class:`fttui.core.results.row_inputs.SlurmFacts`) are among its figures: the supervisor's row
when it knows them, else the row folded again once the job is over
(:func:`fttui.core.run.row.summary.settled_row`).
"""

from __future__ import annotations

from dataclasses import replace

from fttui.core.run.files.statusfile import FinalStatus
from fttui.monitor.slurm import JobState

CANCELLED_STATES = frozenset({"CANCELLED", "TIMEOUT", "PREEMPTED", "DEADLINE", "REQUEUED"})
LOST_STATES = frozenset({"NODE_FAIL", "BOOT_FAIL"})
#: a node's own verdicts that stand whatever ended the job afterwards
OWN = frozenset({"completed", "failed", "oom"})
#: the job's status from its nodes' (COMPLETED / FAILED jobs): the first found in this order
WORST_FIRST = ("oom", "failed", "lost", "cancelled", "completed")


def requeued(job_id: str, restart: int) -> JobState | None:
    """A ``REQUEUED`` state for a node's run of an attempt before the job's current one
    (``scontrol``'s ``Restarts``), else ``None`` (this attempt is the job's, or unknown)."""
    from fttui.monitor.slurm import SlurmUnavailable, scontrol_job

    try:
        restarts = int(scontrol_job(job_id).get("Restarts", "0"))
    except (SlurmUnavailable, ValueError):
        return None
    return JobState(str(job_id), "REQUEUED", source="scontrol", attempt_over=True) if restart < restarts else None


def slurm_error(job: JobState) -> str:
    return f"Slurm: {job.cause()}"


def node_verdict(own: FinalStatus | None, job: JobState, step: int | None = None) -> FinalStatus:
    """A node's status once the job ended: its own when it finished by itself, else Slurm's
    cause (``own`` is ``None`` when the node wrote no status at all)."""
    if own is not None and (own.status in OWN or job.state not in CANCELLED_STATES | LOST_STATES | {"OUT_OF_MEMORY"}):
        return own
    step = own.error_step if own is not None and own.error_step is not None else step
    if job.state in CANCELLED_STATES:
        status = "cancelled"
    elif job.state in LOST_STATES:
        status = "lost"
    elif job.state == "OUT_OF_MEMORY":
        return FinalStatus(
            "oom",
            oom_kind="host-kill",
            error=slurm_error(job),
            error_step=step,
            returncode=own.returncode if own else None,
            signal=own.signal if own else None,
        )
    else:  # COMPLETED / FAILED and the node said nothing: its end was not recorded
        status = "lost"
    base = own if own is not None else FinalStatus(status)
    return replace(base, status=status, error=slurm_error(job), error_step=step, row_saved=None, ended=None)


def job_verdict(job: JobState, node_statuses: list[str]) -> FinalStatus:
    """The job directory's status: Slurm's cause for a job Slurm ended, else the worst of its
    nodes' (a job whose nodes never started is ``failed``)."""
    if job.state in CANCELLED_STATES:
        return FinalStatus("cancelled", error=slurm_error(job))
    if job.state in LOST_STATES:
        return FinalStatus("lost", error=slurm_error(job))
    if job.state == "OUT_OF_MEMORY":
        return FinalStatus("oom", oom_kind="host-kill", error=slurm_error(job))
    for status in WORST_FIRST:
        if status in node_statuses:
            return FinalStatus(status, error=None if status == "completed" else slurm_error(job))
    return FinalStatus("failed", error=f"Slurm: {job.state}: no node started fttui (see the job's slurm-*.out)")


__all__ = ["node_verdict", "job_verdict", "slurm_error", "CANCELLED_STATES", "LOST_STATES"]
