"""End to end: the real `fttui` command on tiny CPU profiles, as a user runs it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from fttui.core.run.files.events import read_jsonl
from tests.conftest import ROOT, fttui_env, run_fttui
from tests.e2e.perf_checks import cpu_perf_is_reported
from tests.e2e.phase_checks import tiny_phases_are_said
from tests.e2e.shared_runs import home_env, shared_home
from tests.helpers import only_run_dir, processes_mentioning, wait_for

pytestmark = pytest.mark.e2e
#: the tests of the run whose command is killed share an xdist group (one run, built once)
CLI_KILLED = pytest.mark.xdist_group("run-cli-killed")


def _results(env: dict | None = None) -> list[dict]:
    out = run_fttui("results", "--format", "json", env=env, check=True)
    return json.loads(out.stdout)


def _independent_rate(run_dir) -> tuple[float, float]:
    """samples / training time, from the run's own step events (whole run, all ranks)."""
    steps = [e for e in read_jsonl(run_dir / "events.jsonl") if e.get("event") == "step"]
    assert steps, "no step events"
    last = steps[-1]
    return last["samples"] / last["train_time"], last["tokens"] / last["train_time"]


def _step_parts_match_the_events(run_dir, row) -> None:
    """The row's ``step_fit`` (the forecast's one-run calibration) computed again from the raw event
    lines: steps after the first (``warmup_exclude_steps`` 1), the passes' time and the floor."""
    events = list(read_jsonl(run_dir / "events.jsonl"))
    steps = [e for e in events if e.get("event") == "step"]
    end = next(e for e in events if e.get("event") == "end")
    first, last = steps[0], steps[-1]
    n, passes = len(steps) - 1, last["passes"] - first["passes"]
    step_s = (last["train_time"] - first["train_time"]) / n
    pass_s = sum(e["pass_time"] for e in steps[1:]) / passes
    fit = row["step_fit"]
    assert fit["steps"] == n and fit["passes"] == passes / n == 1
    assert fit["step_s"] == pytest.approx(step_s, rel=1e-3) and fit["pass_s"] == pytest.approx(pass_s, rel=1e-3)
    assert fit["fixed_step_s"] == pytest.approx(step_s - pass_s, rel=1e-2, abs=1e-5)
    assert fit["tokens"] == row["batch_size"] * row["max_seq_len"]  # synthetic: every sample at max_seq_len
    assert fit["floor_s"] == end["pass_floor_s"] > 0 and fit["floor_tokens"] == end["pass_floor_tokens"] == 16


# tiny-lora only: tiny-full's run and row are tests/e2e/test_methods.py's (one run each, not two)
@pytest.mark.parametrize("profile", ["tiny-lora"])
def test_headless_run_writes_a_row(profile, fttui_home):
    proc = run_fttui("run", "--profile", profile, "--headless")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "COMPLETED" in proc.stdout
    rows = _results()
    assert len(rows) == 1
    row = rows[0]
    assert row["status"] == "completed"
    assert row["profile"] == profile
    assert row["samples_per_s"] > 0 and row["tokens_per_s"] > 0
    assert row["steps"] == row["total_steps"] > 0
    assert row["batch_size"] >= 1 and row["world_size"] == 1
    assert row["effective_batch"] == row["batch_size"] * row["grad_accum"] * row["world_size"]
    assert row["peak_host_rss_mb"] > 0
    assert row["peak_gpu_mem_mb"] == []  # no GPU here
    run_dir = only_run_dir(fttui_home)
    # the launch's forecast (issue 23), kept beside the measured time: the run's first event
    first = json.loads((run_dir / "events.jsonl").read_text().splitlines()[0])
    assert first["event"] == "forecast" and first["run_seconds"] > 0
    assert row["forecast_s"] == pytest.approx(first["run_seconds"], rel=1e-3)
    assert row["forecast_source"].startswith("uncalibrated")  # the store was empty at launch
    # The whole-run figure is samples over training time, computed again from the events.
    sps, tps = _independent_rate(run_dir)
    assert row["samples_per_s_avg"] == pytest.approx(sps, rel=0.01)
    assert row["tokens_per_s_avg"] == pytest.approx(tps, rel=0.01)
    # The headline (warm-up excluded) stays close to it on a short steady CPU run (loose: a
    # loaded CI machine makes the first step slow, which is exactly what the headline leaves out).
    assert row["samples_per_s"] == pytest.approx(sps, rel=0.3)
    _step_parts_match_the_events(run_dir, row)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "completed" and status["row_saved"] is True
    assert not processes_mentioning(str(run_dir))
    if profile == "tiny-lora":  # the startup phases and the CPU performance figures, on this run
        tiny_phases_are_said(run_dir, proc.stdout)
        cpu_perf_is_reported(run_dir, proc.stdout, row)


def test_broken_profile_one_line_exit_2(tmp_path, fttui_home):
    bad = tmp_path / "bad.toml"
    bad.write_text('# fttui run --profile bad\nmethod = "lora"\n[train]\nbatch_sise = 4\n')
    proc = run_fttui("run", "--profile", str(bad), "--headless")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "batch_sise" in lines[0] and "batch_size" in lines[0] and "bad.toml" in lines[0]
    assert not (fttui_home / "runs").exists() or not any((fttui_home / "runs").iterdir())


def test_missing_dataset_one_line_exit_2(fttui_home):
    proc = run_fttui("run", "--profile", "tiny-full", "--headless", "--set", "data.source=nowhere.jsonl")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "nowhere.jsonl" in proc.stderr


def _start_cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fttui", *args], cwd=ROOT, env=fttui_env(),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _first_step(home):
    runs = home / "runs"
    if not runs.exists():
        return None
    for d in runs.iterdir():
        ev = d / "events.jsonl"
        if ev.exists() and any(e.get("event") == "step" for e in read_jsonl(ev)):
            return d
    return None


@pytest.fixture(scope="module")
def killed_cli_long_run(tmp_path_factory):
    """`fttui run --headless` of tiny-lora at data.max_seq_len 1024 (past the tiny Llama's 512
    positions; 16 samples of batch 2, 30 steps), its command SIGKILLed after the first step: the run
    goes on to its end. Its stderr is kept in a file (what the command said before launch)."""
    with shared_home(tmp_path_factory, "cli-killed") as home:
        env = home_env(home)
        err_path = home.parent / "stderr.txt"
        with open(err_path, "w") as err:
            cli = subprocess.Popen(
                [sys.executable, "-m", "fttui", "run", "--profile", "tiny-lora", "--headless", "--set",
                 "data.max_seq_len=1024", "--set", "data.num_samples=16", "--set", "batch_size=2",
                 "--set", "max_steps=30"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=err, text=True)
        try:
            run_dir = wait_for(lambda: _first_step(home), timeout=120, what="the first step")
            cli.send_signal(signal.SIGKILL)
            cli.wait(timeout=10)
            wait_for(lambda: (run_dir / "status.json").exists(), timeout=180, what="status.json")
        finally:
            if cli.poll() is None:
                cli.kill()
        yield {"home": home, "env": env, "run_dir": run_dir, "stderr": err_path.read_text()}


@CLI_KILLED
def test_cli_killed_row_still_written(killed_cli_long_run):
    run_dir = killed_cli_long_run["run_dir"]  # the command SIGKILLed after the first of 30 steps
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "completed"
    rows = _results(killed_cli_long_run["env"])
    assert [r["run_id"] for r in rows] == [run_dir.name]
    assert not processes_mentioning(str(run_dir))


def test_cancel_leaves_no_process(fttui_home):
    proc = run_fttui("run", "--profile", "tiny-lora", "--detach", "--set", "max_steps=100000", check=True)
    run_id = proc.stdout.strip().splitlines()[-1]
    run_dir = fttui_home / "runs" / run_id
    wait_for(lambda: _first_step(fttui_home), timeout=120, what="the first step")
    assert processes_mentioning(str(run_dir)), "the training process should be alive"
    out = run_fttui("cancel", run_id, check=True)
    assert "cancelled" in out.stdout
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "cancelled"
    wait_for(lambda: not processes_mentioning(str(run_dir)), timeout=15, what="no process left")
    rows = _results()
    assert rows[0]["status"] == "cancelled"


def test_ctrl_c_cancels_the_run(fttui_home):
    cli = _start_cli("run", "--profile", "tiny-lora", "--headless", "--set", "max_steps=100000")
    try:
        run_dir = wait_for(lambda: _first_step(fttui_home), timeout=120, what="the first step")
        cli.send_signal(signal.SIGINT)
        out, err = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 4, out + err
    assert json.loads((run_dir / "status.json").read_text())["status"] == "cancelled"
    wait_for(lambda: not processes_mentioning(str(run_dir)), timeout=15, what="no process left")


@CLI_KILLED
def test_max_seq_len_past_the_model_positions_is_said_before_launch(killed_cli_long_run):
    """Issue 27.7: a rotary model past its max_position_embeddings is launched with a warning on
    stderr first; a learned position table is refused in one line, exit 2, nothing written.
    The launched run is the one whose command is killed (it completes on its own)."""
    env, home = killed_cli_long_run["env"], killed_cli_long_run["home"]
    first = killed_cli_long_run["stderr"].strip().splitlines()[0]
    assert first.startswith("fttui: warning: data.max_seq_len 1024 is above the model's max_position_embeddings 512")
    (row,) = _results(env)
    assert row["max_seq_len"] == 1024 and row["status"] == "completed"
    gpt2 = run_fttui("run", "--profile", "tiny-lora", "--headless", "--set", "model.arch=gpt2",
                     "--set", "model.arch_config.n_positions=64", "--set", "data.max_seq_len=128", env=env)
    assert gpt2.returncode == 2 and len(gpt2.stderr.strip().splitlines()) == 1, gpt2.stderr
    assert "learns a table of absolute positions" in gpt2.stderr and "at most 64" in gpt2.stderr
    assert len(list((home / "runs").iterdir())) == 1  # only the launched run's
