"""`fttui run`: launch a profile (or resume an earlier run from its last checkpoint) and watch it.

``--resume RUN`` (a run id or unique prefix) launches a new run with the profile RUN ran with,
continuing from RUN's last checkpoint (:mod:`fttui.core.run.resume`); it takes no ``--profile``,
``--from``, ``--set`` or memory limit, since the resumed run's profile is the one that ran."""

from __future__ import annotations

import os
from typing import Callable

from fttui.core.base.errors import FttuiError


def resume_of(args):
    """The :class:`~fttui.core.run.resume.Resume` of ``--resume RUN``, or None without it."""
    if getattr(args, "resume", None) is None:
        return None
    given = [flag for flag, attr in (("--profile", "profile"), ("--from", "from_config"), ("--set", "overrides"),
                                     ("--gpu-memory-limit", "gpu_memory_limit"),
                                     ("--host-memory-limit", "host_memory_limit")) if getattr(args, attr, None)]
    if given:
        raise FttuiError(f"--resume runs the profile the run ran with; leave out {', '.join(given)}")
    from fttui.core.run.resume import plan_resume

    return plan_resume(args.resume)


def cmd_run(args, resolve: Callable, is_tty: Callable[[], bool]) -> int:
    from fttui.core.run import launch

    resume = resume_of(args)
    resolved = resume.profile if resume else resolve(args)
    app = not args.headless and not args.detach and is_tty() and os.environ.get("FTTUI_NO_APP") != "1"
    if app and resume is None:
        from fttui.tui.app import run_app

        return run_app(launch_profile=resolved)
    rd = launch.launch(resolved, resume=resume)
    if app:  # a resumed run: launched here, followed in the app
        from fttui.tui.app import run_app

        return run_app(attach=str(rd.path))
    if args.detach:
        print(rd.run_id)
        return 0
    from fttui.cli.live import watch_run

    return watch_run(rd, rich_live=False if args.headless else is_tty())
