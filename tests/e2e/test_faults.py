"""Faults users meet on long runs: each leaves a correct record and no process behind.

Where faults do not end a run they share one (a training process costs ~8 CPU-s): the stall is
flagged and resumed on the run that is then killed by a signal; the two runs that finish
together are the run whose events are corrupted and the run labelled with a secret."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from fttui.core.run.files.events import read_jsonl
from fttui.core.results.store import Store
from tests.conftest import ROOT, fttui_env, run_fttui
from tests.e2e.shared_runs import home_env, shared_home
from tests.helpers import processes_mentioning, processes_with_env, wait_for

pytestmark = pytest.mark.e2e
#: the tests of one shared fixture share an xdist group (built once, not once per worker)
PAIR = pytest.mark.xdist_group("faults-pair")
STALL_THEN_SIGNAL = pytest.mark.xdist_group("faults-stall-signal")
SECRET = "hf_" + "Q" * 34


def _detach(*sets: str, env: dict | None = None) -> Path:
    args = ["run", "--profile", "tiny-lora", "--detach"]
    for s in sets:
        args += ["--set", s]
    proc = run_fttui(*args, env=env, check=True)
    home = (env or os.environ)["FTTUI_HOME"]
    return Path(home) / "runs" / proc.stdout.strip().splitlines()[-1]


def _steps(run_dir) -> int:
    return sum(1 for e in read_jsonl(run_dir / "events.jsonl") if e.get("event") == "step")


def _worker(run_dir) -> psutil.Process:
    # The training process itself, not its log writer (whose command line carries the training's).
    procs = [p for p in processes_mentioning(str(run_dir))
             if "fttui.worker.train" in " ".join(p.cmdline()) and "fttui.core.run.supervising.logtee" not in p.cmdline()]
    assert procs, "no training process"
    return procs[0]


def _status(run_dir) -> dict:
    wait_for(lambda: (run_dir / "status.json").exists(), timeout=300, what="status.json")
    return json.loads((run_dir / "status.json").read_text())


def _store(run_dir) -> Store:
    return Store(run_dir.parents[1] / "results.sqlite")  # the store of the run's home


def _row(run_dir) -> dict:
    with _store(run_dir) as s:
        return s.get(run_dir.name)


def _has_event(run_dir, name: str) -> bool:
    return any(e.get("event") == name for e in read_jsonl(run_dir / "events.jsonl"))


@pytest.fixture(scope="module")
def stalled_then_killed(tmp_path_factory):
    """One headless tiny-lora run (stall timeout 1.5 s): its training process paused until the run
    is flagged stalled, resumed until it is flagged resumed, then killed with SIGTERM."""
    with shared_home(tmp_path_factory, "faults-stall") as home:
        env = home_env(home, FTTUI_STALL_TIMEOUT="1.5")
        cli = subprocess.Popen([sys.executable, "-m", "fttui", "run", "--profile", "tiny-lora", "--headless",
                                "--set", "max_steps=100000"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            runs = home / "runs"
            run_dir = wait_for(lambda: next(iter(runs.glob("*")), None) if runs.exists() else None,
                               what="the run dir")
            wait_for(lambda: _steps(run_dir) > 0, what="a step")
            w = _worker(run_dir)
            w.suspend()  # alive, but no progress
            wait_for(lambda: _has_event(run_dir, "stalled"), timeout=30, what="the stalled event")
            w.resume()
            wait_for(lambda: _has_event(run_dir, "resumed"), timeout=30, what="the resumed event")
            w.send_signal(signal.SIGTERM)
            out, _ = cli.communicate(timeout=120)
        finally:
            if cli.poll() is None:
                cli.kill()
        yield {"run_dir": run_dir, "out": out}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two tiny-lora runs of 40 steps detached one after the other, so that they finish together:
    ``secret``'s model label is a token (HF_TOKEN holds it too), ``corrupt``'s events get garbage,
    invalid UTF-8 and a partial line appended while it trains."""
    with shared_home(tmp_path_factory, "faults-pair") as home:
        env = home_env(home)
        # The worker prints the model's label into the log: make it the secret.
        secret = _detach("max_steps=40", f'model.name_or_path="{SECRET}"', env=home_env(home, HF_TOKEN=SECRET))
        corrupt = _detach("max_steps=40", env=env)
        wait_for(lambda: _steps(corrupt) > 0, what="a step")
        with open(corrupt / "events.jsonl", "ab") as f:  # garbage, invalid UTF-8 and a partial line
            f.write(b"not json\n\xff\xfe\n{\"event\": \"step\", \"step\": ")
            f.write(b"\n")
        for run_dir in (secret, corrupt):
            _status(run_dir)
        yield {"home": home, "env": env, "secret": secret, "corrupt": corrupt}


@STALL_THEN_SIGNAL
def test_training_killed_by_signal_is_failed_with_the_signal(stalled_then_killed):
    run_dir = stalled_then_killed["run_dir"]  # SIGTERM to the training process after a step
    st = _status(run_dir)
    assert st["status"] == "failed" and st["signal"] == "SIGTERM", st
    row = _row(run_dir)
    assert row["status"] == "failed" and "SIGTERM" in row["error"]
    wait_for(lambda: not processes_mentioning(str(run_dir)), timeout=15, what="no process left")


def test_a_sigkill_by_hand_under_a_host_limit_is_failed_saying_why_it_is_no_oom(fttui_home, tmp_path):
    # A SIGKILL by hand is no OOM, host budget or not (issue 41 item 6: it was `oom (host-kill)` and
    # retried): the kernel log (here a file fttui reads instead, FTTUI_KERNEL_LOG) has no OOM kill
    # of the run's processes, and the status says that decided it.
    log = tmp_path / "kmsg"
    log.write_text("6,1,0,-;Linux version 6.0\n")
    env = fttui_env(FTTUI_KERNEL_LOG=str(log))
    run_dir = _detach("max_steps=100000", "limits.host_memory=\"4GiB\"", env=env)
    wait_for(lambda: _steps(run_dir) > 0, what="a step")
    _worker(run_dir).send_signal(signal.SIGKILL)
    st = _status(run_dir)
    assert st["status"] == "failed" and st["signal"] == "SIGKILL" and st.get("oom_kind") is None, st
    assert st["error"].startswith("training process killed by SIGKILL, not taken for the kernel's OOM killer ("), st
    assert "the kernel log has no OOM kill of the run's processes" in st["error"], st
    row = _row(run_dir)
    assert row["status"] == "failed" and row["signal"] == "SIGKILL" and row["error"] == st["error"]
    wait_for(lambda: not processes_mentioning(str(run_dir)), timeout=15, what="no process left")


@STALL_THEN_SIGNAL
def test_stalled_run_is_flagged_in_events_headless_view_and_row(stalled_then_killed):
    run_dir, out = stalled_then_killed["run_dir"], stalled_then_killed["out"]  # paused, then resumed
    assert "STALLED" in out and "resumed" in out, out
    assert _row(run_dir)["stalled"] == 1
    wait_for(lambda: not processes_mentioning(str(run_dir)), timeout=15, what="no process left")


@PAIR
def test_two_runs_finishing_together_both_rows_land(two_runs):
    a, b = two_runs["secret"], two_runs["corrupt"]
    assert _status(a)["status"] == _status(b)["status"] == "completed"
    with _store(a) as s:
        assert {r["run_id"] for r in s.rows()} == {a.name, b.name}


def _writer(path: str, prefix: str, n: int) -> None:
    with Store(path) as s:
        for i in range(n):
            s.put({"run_id": f"{prefix}-{i}", "status": "completed", "started_at": f"2026-01-01T00:00:{i % 60:02d}"})


def test_concurrent_writers_lose_nothing(tmp_path):
    path = str(tmp_path / "s.sqlite")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, f"w{k}", 60)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with Store(path) as s:
        assert len(s.rows()) == 240


def _killed_mid_transaction(path: str) -> None:
    s = Store(path)
    s.conn.execute("BEGIN IMMEDIATE")
    s.conn.execute("INSERT INTO runs (run_id, status) VALUES ('half-written', 'completed')")
    s.conn.execute("UPDATE runs SET status = 'corrupted' WHERE run_id = 'earlier'")
    os.kill(os.getpid(), signal.SIGKILL)


def test_store_killed_mid_write_reopens_without_loss(tmp_path):
    path = str(tmp_path / "s.sqlite")
    with Store(path) as s:
        s.put({"run_id": "earlier", "status": "completed", "started_at": "2026-01-01T00:00:00"})
    ctx = multiprocessing.get_context("spawn")
    p = ctx.Process(target=_killed_mid_transaction, args=(path,))
    p.start()
    p.join(30)
    assert p.exitcode == -signal.SIGKILL
    with Store(path) as s:
        rows = s.rows()
        assert [(r["run_id"], r["status"]) for r in rows] == [("earlier", "completed")]
        assert s.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        s.put({"run_id": "after", "status": "completed", "started_at": "2026-01-02T00:00:00"})
        assert len(s.rows()) == 2


@PAIR
def test_corrupt_and_truncated_events_do_not_break_the_record(two_runs):
    run_dir = two_runs["corrupt"]  # garbage appended to its events after its first step
    assert _status(run_dir)["status"] == "completed"
    row = _row(run_dir)
    assert row["status"] == "completed" and row["steps"] == 40 and row["samples_per_s"] > 0
    out = run_fttui("attach", run_dir.name, "--headless", env=two_runs["env"], check=True)
    assert "completed" in out.stdout


def _tmux(socket: str, *args: str) -> subprocess.CompletedProcess:
    # A server of the test's own (-L): two tests on the default server race when one's kill-session
    # ends the server while the other's new-session connects to it, and the app never starts.
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=20)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize("how", ["sigkill", "sighup"])
def test_app_killed_or_hung_up_mid_run_the_run_goes_on(how, fttui_home):
    session = f"fttui-fault-{uuid.uuid4().hex[:8]}"
    fttui = os.path.join(os.path.dirname(sys.executable), "fttui")
    env = " ".join(f"{k}={v}" for k, v in (("FTTUI_HOME", str(fttui_home)), ("TERM", "xterm-256color")))
    cmd = f"cd {ROOT} && env -u FTTUI_NO_APP {env} {fttui} --profile tiny-lora --set max_steps=60"
    started = _tmux(session, "new-session", "-d", "-s", session, "-x", "120", "-y", "40", cmd)
    assert started.returncode == 0, f"tmux new-session: {started.stderr.strip()}"
    _tmux(session, "set-option", "-t", session, "remain-on-exit", "on")  # an app that dies shows why
    try:
        from fttui.core.base import paths

        def run_dir_or_dead_app():
            if paths.runs_dir().exists() and (d := next(iter(paths.runs_dir().glob("*")), None)):
                return d
            dead = _tmux(session, "display-message", "-p", "-t", session, "#{pane_dead}").stdout.strip()
            assert dead != "1", "the app ended before a run started:\n" + _tmux(
                session, "capture-pane", "-p", "-t", session).stdout
            return None

        run_dir = wait_for(run_dir_or_dead_app, timeout=180, what="the run dir")
        wait_for(lambda: _steps(run_dir) > 0, timeout=120, what="a step")
        if how == "sigkill":
            # This test's app only: the other parametrization may be starting its own app beside it.
            apps = [p for p in processes_with_env("FTTUI_HOME", str(fttui_home))
                    if any(a.endswith("/fttui") for a in p.cmdline()[:2]) and "--profile" in p.cmdline()]
            assert apps, "the app is not running"
            for p in apps:
                p.kill()
        else:
            _tmux(session, "kill-session", "-t", session)  # the terminal goes away: SIGHUP, as when SSH drops
        st = _status(run_dir)
    finally:
        _tmux(session, "kill-server")
    assert st["status"] == "completed"
    assert _row(run_dir)["status"] == "completed"
    out = run_fttui("attach", run_dir.name, "--headless", check=True)
    assert "completed" in out.stdout
    wait_for(lambda: not processes_mentioning(str(run_dir)), timeout=15, what="no process left")


@PAIR
def test_secrets_never_reach_the_run_log(two_runs):
    run_dir = two_runs["secret"]  # its model label is the secret, HF_TOKEN in its environment
    assert _status(run_dir)["status"] == "completed"
    log = (run_dir / "train.log").read_text()
    assert re.search(r"model built \([^)]*\): \*\*\*", log) and SECRET not in log
    command = (run_dir / "command.json").read_text()
    assert SECRET not in command
