"""The executor: one kind of run as fttui starts it, asks whether it still works, cancels it and
reads how it ended. Every kind of run fttui starts is one implementation:

==========================  =============================================================
``LocalRun``                a profile run on this machine: the supervisor and its launcher
                            (:mod:`fttui.core.run.launching.executors`)
``CommandRun``              a user's command (``fttui run -- CMD``) supervised as a profile
                            run is (same module)
``SlurmJob``                a profile as one Slurm batch job (:mod:`fttui.core.run.slurm.executor`)
``AttachedPid``             a process fttui did not start, watched (``fttui watch --pid``:
                            :mod:`fttui.core.run.supervising.pidwatch`)
``LaunchedTrial``           one trial of a probe, bound to the probe's life
                            (:mod:`fttui.core.experiments.launched`)
==========================  =============================================================

:func:`fttui.core.run.control.executors.executor_for` gives the executor of an existing run
directory (what ``fttui cancel`` and the app use). Every implementation stops processes through
:mod:`fttui.core.run.processes.proctree` (one grace period) or asks the process that owns them
(a supervisor, Slurm, a trial's guard) to. A new backend (Ray, Kubernetes) is one more class with
these four methods and one line in ``executor_for`` (docs/architecture.md, "Adding an executor").
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from fttui.core.run.files.rundir import RunDir
from fttui.core.run.files.statusfile import FinalStatus
from fttui.core.run.processes import liveness
from fttui.core.run.processes.cancel import request_cancel


@runtime_checkable
class Executor(Protocol):
    """How one kind of run is started, watched and stopped.

    ``start`` makes the run directory and starts the run's processes (or submits it), and returns
    the directory; ``alive`` says whether anything still works on the run (its processes, or the
    scheduler's job); ``cancel`` asks the run to stop and returns at once (the run records its
    status as it ends); ``final_state`` is how it ended (``status.json``'s record), ``None`` while
    it runs."""

    def start(self) -> RunDir: ...

    def alive(self) -> bool: ...

    def cancel(self) -> None: ...

    def final_state(self) -> FinalStatus | None: ...


class DirectoryRun:
    """What the executors of a run with a supervisor share: liveness, the cancel and the verdict
    read from its run directory (:mod:`fttui.core.run.processes.liveness`, ``cancel``,
    ``status.json``). ``rd`` is ``None`` until :meth:`start`."""

    def __init__(self, rd: RunDir | None = None) -> None:
        self.rd = rd

    def _dir(self) -> RunDir:
        if self.rd is None:
            raise RuntimeError(f"{type(self).__name__}: not started")
        return self.rd

    def start(self) -> RunDir:  # pragma: no cover - every implementation starts its own way
        raise NotImplementedError

    def alive(self) -> bool:
        return self.rd is not None and liveness.is_live(self.rd)

    def cancel(self) -> None:
        """The ``cancel`` file its supervisor polls for; SIGTERM to the training's group when the
        supervisor is gone (:func:`fttui.core.run.processes.cancel.request_cancel`)."""
        request_cancel(self._dir())

    def final_state(self) -> FinalStatus | None:
        return self.rd.final_status() if self.rd is not None else None


__all__ = ["Executor", "DirectoryRun"]
