"""End to end: `fttui stacks RUN` names the frame of a live run's rank; a SIGSTOPped rank did not
answer (issue 39 item 2, one piece)."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.conftest import run_fttui
from tests.helpers import processes_mentioning, wait_for

pytestmark = pytest.mark.e2e


def _start_pid(run_dir):
    ev = run_dir / "events.jsonl"
    if not ev.exists():
        return None
    for line in ev.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") == "step":
            starts = [json.loads(x) for x in ev.read_text().splitlines() if '"start"' in x]
            return next((s["pid"] for s in starts if s.get("event") == "start"), None)
    return None


def test_stacks_of_a_live_run_then_of_a_stopped_rank(fttui_home):
    proc = run_fttui("run", "--profile", "tiny-lora", "--detach", "--set", "max_steps=100000", check=True)
    run_id = proc.stdout.strip().splitlines()[-1]
    run_dir = fttui_home / "runs" / run_id
    pid = None
    try:
        pid = wait_for(lambda: _start_pid(run_dir), timeout=120, what="the first step")
        out = run_fttui("stacks", run_id)
        assert out.returncode == 0, out.stdout + out.stderr
        line = out.stdout.splitlines()[0]
        assert line.startswith(f"rank 0 (pid {pid}): ") and ".py:" in line and " in " in line, out.stdout
        assert str(run_dir / "stacks") in out.stdout
        dump = (run_dir / "stacks" / f"rank-0-pid-{pid}.txt").read_text()
        assert "most recent call first" in dump
        os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "T", timeout=10,
                 what="the rank stopped")
        out = run_fttui("stacks", run_id)
        assert out.returncode == 1, out.stdout + out.stderr
        assert out.stdout.splitlines()[0] == f"rank 0 (pid {pid}): did not answer: stopped (SIGSTOP)"
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        out = run_fttui("cancel", run_id)
    assert "cancelled" in out.stdout, out.stdout + out.stderr
    wait_for(lambda: not processes_mentioning(str(run_dir)), timeout=15, what="no process left")
    bad = run_fttui("stacks", run_id)
    assert bad.returncode == 2 and "not live" in bad.stderr and len(bad.stderr.splitlines()) == 1
    assert run_fttui("stacks", "no-such-run").returncode == 2
