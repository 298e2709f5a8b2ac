"""`fttui ls`, `fttui cancel`, `fttui attach`: the run directories."""

from __future__ import annotations

import json
import os
import sys

from fttui.cli.common import is_tty
from fttui.core.base.errors import FttuiError


def cmd_ls(args) -> int:
    from fttui.core.results.tables import to_text
    from fttui.core.run.control.brief import run_brief
    from fttui.core.run.files import rundir
    from fttui.core.run.supervising.recover import recover_all

    runs = rundir.list_runs()
    recover_all(runs)  # runs whose supervisor died get their row now that their training ended
    body, briefs = [], []
    for rd in runs:
        b = run_brief(rd)  # step of total, ETA (live runs) and start time, from both ends of events.jsonl
        briefs.append(
            {
                "run_id": b.run_id,
                "profile": b.profile,
                "kind": b.kind,
                "status": b.state,
                "live": b.live,
                "step": b.step,
                "total_steps": b.total_steps,
                "eta_s": b.eta_s,
                "eta_source": b.eta_source,
                "started": b.started,
                "memory_warning": b.memory_warning,
                "run_dir": str(rd.path),
                "note": b.note or None,
            }
        )
        body.append(
            [
                ("* " if b.live else "  ") + rd.run_id,
                b.state_text(),
                b.step_text(),
                b.eta_text(),
                b.started_text(),
                str(rd.path),
            ]
        )
    if getattr(args, "json", False):
        print(json.dumps(briefs, indent=1))
        return 0
    if not body:
        print("no runs yet")
        return 0
    sys.stdout.write(to_text(["run", "status", "step", "ETA", "started", "directory"], body))
    return 0


def _find_run(run: str | None, live_only: bool = False):
    from fttui.core.run.processes import liveness

    rd = liveness.find(run)
    if rd is None:
        raise FttuiError(f"no run matches {run!r}" if run else "no runs yet")
    if live_only and not liveness.is_live(rd):
        from fttui.core.run.control.watch import attempts

        last = attempts(rd)[-1]  # a run that ran out of memory and is continued: its live attempt
        if liveness.is_live(last):
            return last
        raise FttuiError(f"run {rd.run_id} is not live ({liveness.state_label(rd)})")
    return rd


def cmd_cancel(args) -> int:
    import signal
    import time

    from fttui.core.run.control.executors import executor_for
    from fttui.core.run.processes import liveness, proctree
    from fttui.core.run.processes.cancel import signal_training
    from fttui.core.run.slurm.executor import SlurmJob
    from fttui.core.run.supervising.recover import recover

    rd = _find_run(args.run, live_only=True)
    ex = executor_for(rd)
    if isinstance(ex, SlurmJob):  # a Slurm job, or a node's run of one: scancel, then Slurm's end
        from fttui.cli.job_cmd import cancel_job

        return cancel_job(rd, bool(getattr(args, "json", False)))
    ex.cancel()
    print(f"cancelling {rd.run_id} ...", file=sys.stderr)
    start = time.monotonic()
    killed = False
    while time.monotonic() - start < 60:
        if ex.final_state() is not None or not ex.alive():
            break
        if not killed and time.monotonic() - start > proctree.GRACE_S and not liveness.supervisor_alive(rd):
            from fttui.core.run.processes.cgroup import end_run

            killed = signal_training(rd, signal.SIGKILL)  # no supervisor to escalate: do it here
            killed = bool(end_run(rd)) or killed  # and all of the run's cgroup, where it has one
        time.sleep(0.2)
    recover(rd)  # no-op unless the supervisor was gone: then the row is written here
    st = ex.final_state()
    if getattr(args, "json", False):
        from fttui.cli.conventions import run_json

        print(run_json(rd))
    else:
        print(f"{rd.run_id}: {st.status if st is not None else 'still stopping'}")
    return 0 if st else 1


def cmd_attach(args, is_tty=is_tty) -> int:
    rd = _find_run(args.run)
    as_json = bool(getattr(args, "json", False))
    if rd.is_slurm_job():
        from fttui.core.run.slurm.slurmjob import node0

        zero = node0(rd)
        if (
            zero is not None
            and not as_json
            and not args.headless
            and is_tty()
            and os.environ.get("FTTUI_NO_APP") != "1"
        ):
            rd = zero  # the app's run screen: node 0's panels
        else:
            from fttui.cli.job_cmd import attach_job

            return attach_job(rd, as_json)
    if not args.headless and not as_json and is_tty() and os.environ.get("FTTUI_NO_APP") != "1":
        from fttui.tui.app import run_app

        return run_app(attach=str(rd.path))
    from fttui.cli.live import watch_run

    if as_json:
        from fttui.cli.conventions import follow_as_json

        return follow_as_json(rd, lambda: watch_run(rd, rich_live=False, cancel_on_interrupt=False))
    return watch_run(rd, rich_live=False, cancel_on_interrupt=False)


def add_parser(sub) -> None:
    """The subcommands ``ls``, ``cancel``, ``attach``: their arguments and handler."""
    p = sub.add_parser("ls", help="list run directories (live ones marked *) with step, ETA and start time")
    p.add_argument("--json", action="store_true", help="the runs as JSON (step, total, ETA in s, start time)")
    p.set_defaults(handler=cmd_ls)
    p = sub.add_parser("cancel", help="stop a live run and everything it started")
    p.add_argument("run", nargs="?", help="run id or prefix (default: the latest live run)")
    p.add_argument("--json", action="store_true", help="print the stopped run (status and row) as JSON")
    p.set_defaults(handler=cmd_cancel)
    p = sub.add_parser("attach", help="open the run screen of a live or finished run")
    p.add_argument("run", nargs="?", help="run id, prefix or run directory (default: latest live run)")
    p.add_argument("--headless", action="store_true", help="plain progress lines, no app")
    p.add_argument(
        "--json",
        action="store_true",
        help="no app; progress on stderr, then the run (status and row) as JSON on stdout",
    )
    p.set_defaults(handler=cmd_attach)
