"""`fttui run`: launch a profile (or resume an earlier run from its last checkpoint, or run any
command given after ``--``) and watch it.

``fttui run [--headless] [--name NAME] -- CMD ARGS...`` supervises the command as a profile run
(:mod:`fttui.core.run.launching.command`): it takes no profile, ``--set``, ``--from`` or ``--resume``; the
command and its program are checked before anything is written.

``--resume RUN`` (a run id or unique prefix) launches a new run with the profile RUN ran with,
continuing from RUN's last checkpoint (:mod:`fttui.core.run.launching.resume`); it takes no ``--profile``,
``--from``, ``--set`` or memory limit, since the resumed run's profile is the one that ran."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from fttui.cli.common import add_profile_args, is_tty
from fttui.cli.common import resolve as resolve_profile
from fttui.core.base.errors import FttuiError

if TYPE_CHECKING:
    from fttui.core.profiles.typed import Profile


def resume_of(args):
    """The :class:`~fttui.core.run.launching.resume.Resume` of ``--resume RUN``, or None without it."""
    if getattr(args, "resume", None) is None:
        return None
    given = [
        flag
        for flag, attr in (
            ("--profile", "profile"),
            ("--from", "from_config"),
            ("--set", "overrides"),
            ("--gpu-memory-limit", "gpu_memory_limit"),
            ("--host-memory-limit", "host_memory_limit"),
            ("--on-oom", "on_oom"),
        )
        if getattr(args, attr, None)
    ]
    if given:
        raise FttuiError(f"--resume runs the profile the run ran with; leave out {', '.join(given)}")
    from fttui.core.run.launching.resume import plan_resume

    return plan_resume(args.resume)


def command_of(args) -> list[str] | None:
    """The command after ``--`` (None when none was given); FttuiError (one line) for an empty
    one, or for profile options given with it."""
    cmd = list(getattr(args, "command", None) or [])
    if not cmd:
        if getattr(args, "name", None):
            raise FttuiError(
                "--name names a command run: give the command after --, e.g. fttui run --name x -- python train.py"
            )
        return None
    if cmd[0] == "--":
        cmd = cmd[1:]
    given = [
        flag
        for flag, attr in (
            ("--profile", "profile"),
            ("--from", "from_config"),
            ("--set", "overrides"),
            ("--resume", "resume"),
            ("--on-oom", "on_oom"),
        )
        if getattr(args, attr, None)
    ]
    if given:
        raise FttuiError(f"a command run takes no {', '.join(given)}: give a profile or a command after --")
    if getattr(args, "gpu_memory_limit", None):
        raise FttuiError(
            "a command's GPU memory cannot be capped from outside it: leave out --gpu-memory-limit "
            "(torch.cuda.set_per_process_memory_fraction in the script does it)"
        )
    from fttui.core.run.launching.command import check_command

    return check_command(cmd, os.getcwd())


def run_node(args, resolve: Callable[..., Profile]) -> int | None:
    """Inside a Slurm job step (``srun``, one task per node): prepare this node's run from the
    allocation (:mod:`fttui.core.run.slurm.slurmnode`) and become its supervisor, the task Slurm
    signals and waits for. ``None`` outside any job step."""
    import sys

    from fttui.core.run.slurm.allocation import read_allocation

    alloc = read_allocation(os.environ)
    job = getattr(args, "job", None)
    if alloc is None:
        if job:
            raise FttuiError(
                "--job runs one node's part of a Slurm job: it is started by the job's script "
                "(srun ... fttui run --job RUN), inside the job step"
            )
        return None
    if command_of(args) is not None or getattr(args, "resume", None):
        raise FttuiError(
            "inside a Slurm job step fttui runs a profile (--profile, or --job from fttui submit); "
            "a command or --resume is run outside Slurm"
        )
    from fttui.core.run.files import rundir
    from fttui.core.run.slurm.slurmnode import start_node

    if job:
        job_rd = rundir.RunDir(rundir.paths.runs_dir() / job)
        resolved = job_rd.profile()
        if resolved is None:
            raise FttuiError(
                f"--job {job}: no job directory with a profile.json under {job_rd.path.parent} "
                "(is FTTUI_HOME the same shared folder on every node?)"
            )
    else:
        resolved = resolve(args)
    rd = start_node(resolved, alloc, job)
    prof = rd.profile()
    where = f"{prof.devices.main_addr}:{prof.devices.main_port}" if prof is not None else "None:None"
    print(
        f"fttui: Slurm job {alloc.job_id} node {alloc.node_rank} of {alloc.nodes} ({alloc.node_name}): run "
        f"{rd.run_id}, rendezvous {where}",
        flush=True,
    )
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "fttui.core.run.supervising.supervisor", str(rd.path)])
    return 1  # not reached


def cmd_run(args, resolve: Callable[..., Profile] | None = None, is_tty: Callable[[], bool] = is_tty) -> int:
    node = run_node(args, resolve or resolve_profile)
    if node is not None:
        return node
    command = command_of(args)
    resume = resume_of(args)
    if command is not None:
        from fttui.core.run.launching.command import command_profile

        resume = None
        resolved = command_profile(
            command, name=args.name, cwd=os.getcwd(), host_memory=getattr(args, "host_memory_limit", None) or ""
        )
    else:
        resolved = resume.profile if resume else (resolve or resolve_profile)(args)
    as_json = bool(getattr(args, "json", False))
    app = not args.headless and not args.detach and not as_json and is_tty() and os.environ.get("FTTUI_NO_APP") != "1"
    if app and resume is None and command is None:
        from fttui.tui.app import run_app

        return run_app(launch_profile=resolved)
    if command is None:
        from fttui.core.models.positions import position_warning

        warning = position_warning(resolved)  # said before launch, in the app too (its picker)
        if warning:
            print(f"fttui: warning: {warning}", file=sys.stderr, flush=True)
        check_host(resolved)
    from fttui.core.experiments.quick_forecast import launch_forecast
    from fttui.core.run.launching.executors import CommandRun, LocalRun

    forecast = lambda: launch_forecast(resolved)  # noqa: E731
    ex = (
        CommandRun(profile=resolved, forecast=forecast)
        if command is not None
        else LocalRun(resolved, resume=resume, forecast=forecast)
    )
    rd = ex.start()
    if app:  # a resumed run or a command: launched here, followed in the app
        from fttui.tui.app import run_app

        return run_app(attach=str(rd.path))
    if args.detach:
        if as_json:
            from fttui.cli.conventions import run_json

            print(run_json(rd))
        else:
            print(rd.run_id)
        return 0
    from fttui.cli.live import watch_run

    if as_json:
        from fttui.cli.conventions import follow_as_json

        return follow_as_json(rd, lambda: watch_run(rd, rich_live=False))
    return watch_run(rd, rich_live=False if args.headless else is_tty())


def check_host(resolved) -> None:
    """Under a sharding that offloads to the host: a host peak (the model load's included) over the
    memory available here is refused in one line, a close fit or pinned memory over the
    locked-memory limit is warned (fttui.core.memory.hostfit); the app's picker says the same."""
    from fttui.core.base.errors import ConfigError
    from fttui.core.memory.hostfit import host_check

    fit = host_check(resolved)
    if fit is not None and not fit.fits:
        raise ConfigError(f"host memory: {fit.message}")
    if fit is not None and fit.warning:
        print(f"fttui: warning: host memory: {fit.warning}", file=sys.stderr, flush=True)


def add_parser(sub) -> None:
    """The subcommand ``run``: its arguments and handler."""
    p = sub.add_parser(
        "run",
        help="launch a profile, or any command (fttui run -- CMD ARGS...), and watch it",
        description="Launch a profile (--profile, --from) or any training command given after "
        "`--` (plain python, torchrun, accelerate launch, deepspeed), supervise it "
        "and record its summary row. A command runs in the current folder; a "
        "Hugging Face Trainer in it reports its steps through fttui's callback "
        "(docs/commands.md).",
    )
    add_profile_args(p)
    p.add_argument(
        "--resume",
        metavar="RUN",
        help="continue RUN (a run id or unique prefix) from its last checkpoint, as a new run with the same profile",
    )
    p.add_argument(
        "--on-oom",
        choices=("fail", "shrink"),
        help="out of memory in a training step: fail (the default, train.on_oom), or shrink: continue "
        "from the last checkpoint with half the micro batch and twice the accumulation, as a new "
        "attempt, at most train.max_oom_retries times (docs/reliability.md)",
    )
    p.add_argument("--headless", action="store_true", help="plain progress lines, no app or live view")
    p.add_argument("--detach", action="store_true", help="launch and return at once, printing the run id")
    p.add_argument("--name", help="with a command: the run's name (default: the script's name)")
    p.add_argument("--job", metavar="RUN", help="inside srun: this node's part of the Slurm job RUN (fttui submit)")
    p.add_argument(
        "--json",
        action="store_true",
        help="no app; progress on stderr, then the run (status and summary row) as JSON on stdout",
    )
    p.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- CMD ARGS",
        help="the command to run and supervise instead of a profile",
    )
    p.set_defaults(handler=cmd_run)
