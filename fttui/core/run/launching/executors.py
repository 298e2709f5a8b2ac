"""The executors of runs started on this machine (:class:`~fttui.core.run.processes.executor.Executor`):
a profile run (:class:`LocalRun`) and a user's command supervised as one (:class:`CommandRun`).
Both start a supervisor in a session of its own (:func:`fttui.core.run.launching.launch.launch`);
the supervisor owns the process tree, so cancelling is the ``cancel`` file it polls for (SIGTERM
to the training's group when it is gone), and the verdict is the ``status.json`` it writes."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from fttui.core.profiles.typed import Profile
from fttui.core.run.files.rundir import RunDir
from fttui.core.run.launching import launch as _launch
from fttui.core.run.launching.command import command_of, command_profile
from fttui.core.run.launching.resume import Resume
from fttui.core.run.processes.executor import DirectoryRun


class LocalRun(DirectoryRun):
    """A profile run on this machine: its supervisor, the launcher (python, torchrun, DeepSpeed's,
    accelerate's) and the training under it. ``kind`` and ``group``: a probe's or a sweep's run;
    ``resume``: what it continues; ``forecast``: the time forecast recorded as its first event;
    ``rd`` (no profile): the executor of a run already started."""

    def __init__(
        self,
        profile: Profile | None = None,
        *,
        kind: str = "run",
        group: str | None = None,
        resume: Resume | None = None,
        forecast: Callable[[], dict[str, Any] | None] | None = None,
        run_id: str | None = None,
        rd: RunDir | None = None,
    ) -> None:
        super().__init__(rd)
        self.profile, self.kind, self.group = profile, kind, group
        self.resume, self.forecast, self.run_id = resume, forecast, run_id

    def start(self) -> RunDir:
        if self.profile is None:
            raise ValueError(f"{type(self).__name__}: no profile to start")
        self.rd = _launch.launch(
            self.profile, self.run_id, kind=self.kind, group=self.group, resume=self.resume, forecast=self.forecast
        )
        return self.rd


class CommandRun(LocalRun):
    """A user's command (``fttui run -- CMD ARGS...``, or a profile's ``[command]``): the
    supervisor runs ``argv`` as the training, with fttui's Trainer callback injected and its
    printed log read (docs/commands.md)."""

    def __init__(
        self,
        argv: list[str] | None = None,
        *,
        profile: Profile | None = None,
        name: str | None = None,
        cwd: str | None = None,
        host_memory: str = "",
        forecast: Callable[[], dict[str, Any] | None] | None = None,
        rd: RunDir | None = None,
    ) -> None:
        if profile is None and argv:
            profile = command_profile(argv, name=name, cwd=cwd or os.getcwd(), host_memory=host_memory)
        elif profile is not None and command_of(profile) is None:
            raise ValueError(f"CommandRun: profile {profile.name!r} holds no [command]")
        super().__init__(profile, forecast=forecast, rd=rd)


__all__ = ["LocalRun", "CommandRun"]
