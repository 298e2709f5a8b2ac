"""The executor of a Slurm job (:class:`~fttui.core.run.processes.executor.Executor`): a profile
submitted as one batch job over its nodes (``fttui submit``). Slurm owns the processes: the job's
liveness is Slurm's word (``squeue`` / ``sacct``), cancelling is ``scancel`` (Slurm signals every
node's step; each node's supervisor stops its tree and writes its status), and the job's verdict
is the ``status.json`` its job directory gets once the nodes have ended."""

from __future__ import annotations

from fttui.core.profiles.typed import Profile
from fttui.core.run.files.rundir import RunDir
from fttui.core.run.processes.executor import DirectoryRun
from fttui.core.run.slurm import slurmjob


class SlurmJob(DirectoryRun):
    """``profile`` as one batch job (``opts``: nodes, GPUs per node, partition, time, account,
    sbatch's own arguments); or, with ``rd``, the job of an existing job directory or node run."""

    def __init__(
        self, profile: Profile | None = None, opts: slurmjob.SubmitOptions | None = None, rd: RunDir | None = None
    ) -> None:
        super().__init__(rd)
        self.profile, self.opts = profile, opts

    def start(self) -> RunDir:
        if self.profile is None or self.opts is None:
            raise ValueError("SlurmJob: a profile and submit options to start")
        self.rd = slurmjob.submit(self.profile, self.opts)
        return self.rd

    def cancel(self) -> None:
        """``scancel`` the job (FttuiError in one line when Slurm refuses or has no id yet)."""
        slurmjob.cancel(self._dir())


__all__ = ["SlurmJob"]
