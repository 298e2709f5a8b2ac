"""Cancelling a run: the ``cancel`` file its supervisor polls for and, when the supervisor is gone
and the training runs on, a signal to the training's process group
(:mod:`fttui.core.run.processes.proctree`). Only a group whose leader is the process supervisor.json
recorded (``train_id``: its start and boot, :func:`fttui.core.run.processes.liveness.training_alive`) is
ever signalled: after a reboot or a reused pid, another group is not it.

A Slurm job's run is cancelled through Slurm (``scancel``: :func:`fttui.core.run.slurm.slurmjob.cancel`).
"""

from __future__ import annotations

import signal

from fttui.core.run.files.rundir import RunDir
from fttui.core.run.processes import liveness, proctree


def signal_training(rd: RunDir, sig: int) -> bool:
    """Send ``sig`` to run ``rd``'s training's process group (supervisor.json's ``train_pgid``)
    while it runs; ``True`` when it was sent."""
    sup = rd.supervisor()
    pgid = sup.train_pgid if sup is not None else None
    if pgid is None or pgid <= 1 or not liveness.training_alive(rd):
        return False
    return proctree.signal_group(pgid, sig)


def request_cancel(rd: RunDir) -> None:
    """Ask the supervisor to stop run ``rd`` (the ``cancel`` file, which it polls for); when the
    supervisor is gone and the training runs on, send SIGTERM to the training's process group."""
    rd.write_cancel()
    if not liveness.supervisor_alive(rd):
        signal_training(rd, signal.SIGTERM)


__all__ = ["request_cancel", "signal_training"]
