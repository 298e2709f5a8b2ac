"""The training outlives its supervisor (issue 14, finding 5): a `kill -9` of the supervisor after
the first step leaves the training running; the next fttui command that looks writes the row,
once; `fttui cancel` still stops a training whose supervisor died."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from fttui.core.base import paths
from fttui.core.results.store import Store
from fttui.core.run.files.events import read_jsonl
from tests.conftest import run_fttui
from tests.helpers import processes_mentioning, wait_for

pytestmark = pytest.mark.e2e


def _detach(*sets: str):
    args = ["run", "--profile", "tiny-lora", "--detach"]
    for s in sets:
        args += ["--set", s]
    proc = run_fttui(*args, check=True)
    return paths.runs_dir() / proc.stdout.strip().splitlines()[-1]


def _events(run_dir, name: str) -> list[dict]:
    return [e for e in read_jsonl(run_dir / "events.jsonl") if e.get("event") == name]


def _kill_supervisor(run_dir) -> int:
    sup = json.loads((run_dir / "supervisor.json").read_text())
    wait_for(lambda: "train_pgid" in json.loads((run_dir / "supervisor.json").read_text()), what="train_pgid")
    os.kill(sup["pid"], signal.SIGKILL)
    wait_for(lambda: not _alive(sup["pid"]), timeout=10, what="the supervisor gone")
    return sup["pid"]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _rows(run_id: str) -> list[dict]:
    with Store() as s:
        return [r for r in s.rows(kind=None) if r["run_id"] == run_id]


def test_kill9_of_the_supervisor_the_training_goes_on_and_the_next_command_writes_the_row(fttui_home):
    run_dir = _detach("max_steps=30")
    wait_for(lambda: _events(run_dir, "step"), timeout=180, what="a step")
    _kill_supervisor(run_dir)
    steps_at_kill = len(_events(run_dir, "step"))
    assert steps_at_kill < 30
    # The training runs on without the supervisor: steps keep coming, its log keeps growing.
    wait_for(lambda: (run_dir / "exit.json").exists(), timeout=240, what="the training's exit")
    ended = json.loads((run_dir / "exit.json").read_text())
    assert ended["returncode"] == 0
    assert len(_events(run_dir, "step")) == 30 and _events(run_dir, "end")
    assert "training done: 30 steps" in (run_dir / "train.log").read_text()
    assert not (run_dir / "status.json").exists()

    ls = run_fttui("ls", check=True)  # the next command that looks
    assert time.time() - ended["t"] < 60
    line = next(ln for ln in ls.stdout.splitlines() if run_dir.name in ln)
    assert " completed " in line
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "completed" and status["row_saved"] is True
    (row,) = _rows(run_dir.name)
    assert row["status"] == "completed" and row["recorded_by"] == "recovered"
    assert row["steps"] == 30
    # The row's figures are the run's: samples and tokens from the events, the host figure from
    # the ranks' own peaks.
    steps = _events(run_dir, "step")
    assert row["samples"] == steps[-1]["samples"]
    assert row["peak_host_rss_mb"] == pytest.approx(max(e["peak_rss_mb"] for e in steps), rel=0.01)

    # Nothing is written twice: more commands look, one row and one exit event stay.
    run_fttui("ls", check=True)
    out = run_fttui("results", "--format", "json", check=True)
    assert [r["run_id"] for r in json.loads(out.stdout)].count(run_dir.name) == 1
    assert len(_events(run_dir, "exit")) == 1 and _events(run_dir, "exit")[0]["source"] == "recovery"
    assert len(_rows(run_dir.name)) == 1
    wait_for(lambda: not processes_mentioning(str(run_dir)), timeout=15, what="no process left")


def test_cancel_stops_a_training_whose_supervisor_died(fttui_home):
    run_dir = _detach("max_steps=100000")
    wait_for(lambda: _events(run_dir, "step"), timeout=180, what="a step")
    _kill_supervisor(run_dir)
    ls = run_fttui("ls", check=True)
    assert "running (unsupervised)" in ls.stdout
    out = run_fttui("cancel", run_dir.name, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("cancelled")
    (row,) = _rows(run_dir.name)
    assert row["status"] == "cancelled" and row["recorded_by"] == "recovered"
    wait_for(lambda: not processes_mentioning(str(run_dir)), timeout=15, what="no process left")


def test_supervisor_and_log_writer_killed_the_row_says_lost_with_the_last_steps(fttui_home):
    run_dir = _detach("max_steps=100000")
    wait_for(lambda: len(_events(run_dir, "step")) >= 2, timeout=180, what="two steps")
    sup = json.loads((run_dir / "supervisor.json").read_text())
    wait_for(lambda: "train_pgid" in json.loads((run_dir / "supervisor.json").read_text()), what="train_pgid")
    pgid = json.loads((run_dir / "supervisor.json").read_text())["train_pgid"]
    os.kill(sup["pid"], signal.SIGKILL)
    os.killpg(pgid, signal.SIGKILL)  # as a machine going down takes everything
    wait_for(lambda: not processes_mentioning(str(run_dir)), timeout=15, what="no process left")
    assert not (run_dir / "exit.json").exists()
    last = _events(run_dir, "step")[-1]
    run_fttui("results", "--format", "json", check=True)
    (row,) = _rows(run_dir.name)
    assert row["status"] == "lost" and row["steps"] == last["step"]
    assert f"up to step {last['step']}" in row["error"]
