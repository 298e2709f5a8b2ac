"""One node's part of a Slurm job: ``fttui run`` inside ``srun`` (one task per node).

Each node prepares its own run directory (the same checks, launcher and argv as any
``fttui run``, :func:`fttui.core.run.launching.launch.prepare`) with the allocation's ``devices``
settings (:mod:`fttui.core.run.slurm.allocation`), under the ``FTTUI_HOME`` every node shares. Its id
is the job's run id (``fttui submit``) and the node's rank, ``<job run>-n<rank>`` (a requeued
job's next attempt ``<job run>-r<restart>-n<rank>``), so nodes writing at once never pick the same
id and nothing needs a lock; a job started by hand (``srun fttui run --profile NAME``) names its
nodes ``<job start>-<profile>-slurm<job id>-n<rank>``. ``command.json`` gets ``slurm`` (job id,
job run, node rank and name, nodes, restart): what ``fttui ls`` / ``cancel`` ask Slurm about
instead of checking pids (a node's processes are on another machine), and what keeps the node's
supervisor off the SQLite store (:func:`fttui.core.run.supervising.recover.save_row`).

A requeued job (``SLURM_RESTART_COUNT`` > 0) continues from the last checkpoint the earlier
attempts saved (``train.save = "steps"``; the output folder is the job's, shared by every node),
as ``fttui run --resume`` does.
"""

from __future__ import annotations

import time
from dataclasses import replace

from fttui.core.base.errors import FttuiError
from fttui.core.profiles.typed import Profile
from fttui.core.run.files import rundir
from fttui.core.run.files.runfiles import CommandFile, SlurmNodeJob
from fttui.core.run.launching import launch
from fttui.core.run.launching.oomretry import check_slurm
from fttui.core.run.launching.resume import Resume, last_checkpoint
from fttui.core.run.slurm.allocation import Allocation, rendezvous_addr, with_allocation


def node_run_id(job_run: str, alloc: Allocation) -> str:
    return f"{job_run}-r{alloc.restart}-n{alloc.node_rank}" if alloc.restart else f"{job_run}-n{alloc.node_rank}"


def earlier_checkpoint(job_run: str, alloc: Allocation, resolved: Profile) -> Resume | None:
    """The latest checkpoint an earlier attempt of this job saved (node 0 holds the lowest rank,
    which reports saves), or ``None``."""
    for restart in range(alloc.restart - 1, -1, -1):
        rid = f"{job_run}-r{restart}-n0" if restart else f"{job_run}-n0"
        rd = rundir.RunDir(rundir.paths.runs_dir() / rid)
        found = last_checkpoint(rd) if rd.exists() else None
        if found is not None:
            return Resume(rid, resolved, found[0], found[1])
    return None


def hand_started_prefix(alloc: Allocation, profile_name: str) -> str:
    """``<job start YYYYmmdd-HHMMSS>-<profile>-slurm<job id>``: the same on every node of a job
    that ``fttui submit`` did not prepare (the start time is Slurm's, not each node's clock)."""
    stamp = None
    try:
        from fttui.monitor.slurm import scontrol_job

        start = scontrol_job(alloc.job_id).get("StartTime", "")
        stamp = time.strftime("%Y%m%d-%H%M%S", time.strptime(start, "%Y-%m-%dT%H:%M:%S"))
    except Exception:  # no scontrol, or a time it does not print: the job id alone still agrees
        stamp = "slurm"
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in profile_name)[:48]
    return f"{stamp}-{safe}-slurm{alloc.job_id}"


def start_node(resolved: Profile, alloc: Allocation, job_run: str | None = None) -> rundir.RunDir:
    """Prepare this node's run directory; the caller starts its supervisor (in the foreground:
    the task Slurm tracks, signals and ends)."""
    check_slurm(resolved)
    addr = rendezvous_addr(alloc)
    prof = with_allocation(resolved, alloc, addr)
    if job_run is None:
        job_run = hand_started_prefix(alloc, str(resolved.name or "run"))
        group = f"slurm-{alloc.job_id}"
    else:
        group = job_run
    resume = earlier_checkpoint(job_run, alloc, prof) if alloc.restart else None
    rid = node_run_id(job_run, alloc)
    if (rundir.paths.runs_dir() / rid).exists():
        raise FttuiError(
            f"run {rid} exists already: node {alloc.node_rank} of Slurm job {alloc.job_id} "
            f"(restart {alloc.restart}) was started twice"
        )
    rd = launch.prepare(prof, rid, kind="run", group=group, resume=resume)
    slurm = SlurmNodeJob(
        job_id=alloc.job_id,
        job_run=job_run,
        node_rank=alloc.node_rank,
        node=alloc.node_name,
        nodes=alloc.nodes,
        nodelist=alloc.nodelist,
        restart=alloc.restart,
        main_addr=addr,
        main_port=alloc.port,
    )
    rd.write_command(replace(rd.command() or CommandFile(), slurm=slurm))
    return rd


__all__ = ["start_node", "node_run_id", "earlier_checkpoint", "hand_started_prefix"]
