"""The executor of an existing run directory, by what started it (``command.json``'s ``kind``,
and Slurm's record): what ``fttui cancel`` and the app use to stop a run and ask whether it still
works, whatever its kind (:mod:`fttui.core.run.processes.executor`)."""

from __future__ import annotations

from fttui.core.run.files.rundir import RunDir
from fttui.core.run.launching.command import KIND as COMMAND_KIND
from fttui.core.run.launching.executors import CommandRun, LocalRun
from fttui.core.run.processes.executor import DirectoryRun
from fttui.core.run.slurm.executor import SlurmJob
from fttui.core.run.supervising.pidwatch import AttachedPid


def executor_for(rd: RunDir) -> DirectoryRun:
    """A Slurm job's run (the job directory or a node's run): :class:`SlurmJob`; a watched pid:
    :class:`AttachedPid`; a user's command: :class:`CommandRun`; any other run (a profile run, a
    probe's or a sweep's): :class:`LocalRun`. A probe's launched trial is its probe's to stop
    (:class:`~fttui.core.experiments.launched.LaunchedTrial`); from outside it is a local run."""
    if rd.slurm() is not None:
        return SlurmJob(rd=rd)
    kind = rd.kind_and_group()[0]
    if kind == "watch":
        return AttachedPid(rd=rd)
    if kind == COMMAND_KIND:
        return CommandRun(rd=rd)
    return LocalRun(rd=rd)


__all__ = ["executor_for"]
