"""One executor interface (issue 38 item 2): the five kinds of run fttui starts implement
``start / alive / cancel / final_state`` (:mod:`fttui.core.run.processes.executor`), an existing
run directory gets the executor of its kind (:func:`fttui.core.run.control.executors.executor_for`),
and the views cancel through it. The end-to-end tests exercise each implementation for real:
`fttui cancel` of a run and of a command (tests/e2e/test_cli_signals.py, test_command_run.py), of
a Slurm job (test_slurm.py), of a watch (test_watch_pid.py), the probe's Ctrl-C
(test_oom_probe.py), and a sweep's cells (test_sweep.py)."""

from __future__ import annotations

import ast
import json
import subprocess
import time
from pathlib import Path

import pytest

from fttui.core.experiments.launched import LaunchedTrial
from fttui.core.profiles import load_profile
from fttui.core.run.control.executors import executor_for
from fttui.core.run.files import rundir
from fttui.core.run.files.runfiles import SlurmNodeJob
from fttui.core.run.launching.executors import CommandRun, LocalRun
from fttui.core.run.processes.executor import Executor
from fttui.core.run.slurm.executor import SlurmJob
from fttui.core.run.supervising.pidwatch import AttachedPid

ROOT = Path(__file__).resolve().parents[2]


def _dir(kind: str, **command) -> rundir.RunDir:
    rd = rundir.create({"name": "x", "method": "lora"}, ["python", "-c", "pass"], {}, kind=kind)
    if command:
        obj = json.loads(rd.command_path.read_text())
        obj.update(command)
        rd.command_path.write_text(json.dumps(obj))
    return rd


def test_the_five_kinds_of_run_are_executors():
    for cls in (LocalRun, CommandRun, SlurmJob, AttachedPid, LaunchedTrial):
        assert all(callable(getattr(cls, m, None)) for m in ("start", "alive", "cancel", "final_state")), cls
    assert isinstance(LocalRun(), Executor) and isinstance(AttachedPid(), Executor)
    assert isinstance(SlurmJob(), Executor) and isinstance(CommandRun(["python", "-c", "pass"]), Executor)


def test_a_run_directory_gets_the_executor_of_its_kind(fttui_home):
    assert type(executor_for(_dir("run"))) is LocalRun
    assert type(executor_for(_dir("sweep"))) is LocalRun
    assert type(executor_for(_dir("probe"))) is LocalRun  # a trial seen from outside
    assert type(executor_for(_dir("command"))) is CommandRun
    assert type(executor_for(_dir("watch"))) is AttachedPid
    node = _dir("run", slurm=SlurmNodeJob(job_id="42", node_rank=0, nodes=2).to_dict())
    assert type(executor_for(node)) is SlurmJob
    ex = executor_for(node)
    assert ex.rd is node and ex.final_state() is None


def test_an_executor_that_was_not_started_says_so(fttui_home):
    assert LocalRun().alive() is False and LocalRun().final_state() is None
    with pytest.raises(RuntimeError, match="not started"):
        LocalRun().cancel()
    with pytest.raises(ValueError, match="no profile"):
        LocalRun().start()
    with pytest.raises(ValueError, match="holds no"):
        CommandRun(profile=load_profile("tiny-lora"))


def test_cancelling_a_watch_never_signals_the_watched_process(fttui_home):
    """AttachedPid.cancel asks the watcher (the cancel file) and nothing else, even when no watcher
    is alive and supervisor.json names a process group (a run's cancel would signal it)."""
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        rd = _dir("watch")
        from fttui.core.run.files.runfiles import SupervisorFile
        from fttui.core.run.processes.guard import identity

        rd.write_supervisor(SupervisorFile(pid=victim.pid, train_pgid=victim.pid, train_id=identity(victim.pid)))
        executor_for(rd).cancel()
        assert rd.cancel_path.exists()
        time.sleep(0.3)
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_a_local_run_starts_runs_and_reports_its_verdict(fttui_home):
    """The executor's whole life on the tiny CPU profile: start, alive while it runs, the verdict
    once it ended (the supervisor's status.json)."""
    ex = LocalRun(load_profile("tiny-lora", ["train.max_steps=2"]))
    rd = ex.start()
    deadline = time.monotonic() + 240
    while ex.final_state() is None and time.monotonic() < deadline:
        assert ex.alive() or ex.final_state() is not None or rd.supervisor() is None
        time.sleep(0.3)
    st = ex.final_state()
    assert st is not None and st.status == "completed", st
    assert not ex.alive()


def test_views_cancel_through_the_executor():
    """The CLI's and the app's cancels name the executor, not the cancel file or a signal."""
    for path in ("fttui/cli/runs_cmd.py", "fttui/cli/ctrl_c.py", "fttui/cli/watch_cmd.py", "fttui/tui/app.py",
                 "fttui/tui/run_screen.py", "fttui/core/experiments/sweep.py", "fttui/core/experiments/planning.py"):
        tree = ast.parse((ROOT / path).read_text())
        called = {n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
                  for n in ast.walk(tree) if isinstance(n, ast.Call)}
        assert "request_cancel" not in called, path
        assert called & {"executor_for", "cancel", "LocalRun", "AttachedPid"}, path


def test_the_interface_imports_none_of_its_implementations():
    """The interface sits below its implementations (and the layer contract of pyproject.toml
    keeps it there): processes/executor.py imports no package above it."""
    tree = ast.parse((ROOT / "fttui/core/run/processes/executor.py").read_text())
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    above = ("launching", "slurm", "supervising", "control", "row", "fold")
    assert not [m for m in imported if any(m.startswith(f"fttui.core.run.{p}") for p in above)], imported
    assert not [m for m in imported if m.startswith("fttui.core.experiments")], imported
