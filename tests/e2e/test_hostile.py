"""End to end: faults and hostile input (issue 28) on command runs of a small script (no torch).

Secrets placed at every place fttui writes or prints, a run directory on a full disk, a daemon
that double-forks out of the run's process group.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import fttui_env, run_fttui
from tests.helpers import only_run_dir, wait_for

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).resolve().parent / "command_scripts" / "hostile_script.py"


def _all_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_secret_at_every_place_reaches_no_file_and_no_output(tmp_path, fttui_home):
    secret = f"hunter2{secrets.token_hex(6)}"
    env_secret = f"envsecret{secrets.token_hex(6)}"
    hub_token = f"hf_{secrets.token_hex(20)}"
    work = tmp_path / "work"
    work.mkdir()
    env = fttui_env(MODE="secrets", SECRET=secret, MY_API_KEY=env_secret)
    outputs = []
    run = run_fttui("run", "--headless", "--", sys.executable, str(SCRIPT), "--hub-token", hub_token,
                    f"--api-key={secret}", cwd=work, env=env)
    outputs.append(run.stdout + run.stderr)
    assert run.returncode == 1, run.stdout + run.stderr
    run_dir = only_run_dir(fttui_home)
    log = (run_dir / "train.log").read_text()
    assert "password=***" in log and "Bearer ***" in log and "using *** from" in log
    assert "x" * 1000 in log and "y" * 1000 in log  # the long line is kept, only its secret masked
    assert "login failed" in log
    # a watched process whose command line holds the token, recorded
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)", "--hub-token", hub_token])
    try:
        w = run_fttui("watch", "--pid", str(sleeper.pid), "--record", "--headless", env=env, timeout=120)
        outputs.append(w.stdout + w.stderr)
    finally:
        sleeper.wait(timeout=60)
    out_file = tmp_path / "export.jsonl"
    for args in (["results", "--json"], ["results"], ["ls", "--json"], ["attach", run_dir.name, "--json"],
                 ["results", "export", "--out", str(out_file)], ["report"], ["-v", "ls"]):
        p = run_fttui(*args, env=env)
        outputs.append(p.stdout + p.stderr)
    files = _all_bytes(fttui_home) | {str(out_file): out_file.read_bytes()}
    assert any(p.endswith("command.json") for p in files) and any(p.endswith("results.sqlite") for p in files)
    for needle in (secret, env_secret, hub_token, "A" * 34):
        for path, data in files.items():
            assert needle.encode() not in data, f"{needle} in {path}"
        for text in outputs:
            assert needle not in text, f"{needle} in the output: {text[-2000:]}"
    row = json.loads(run_fttui("results", "--json", check=True).stdout)
    assert {r["status"] for r in row} >= {"failed"}
