"""Shared fixtures: every test gets its own FTTUI_HOME, and a clean colour environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# One thread for torch in the pytest processes too (test modules that import torch do so while
# collecting, before any fixture runs): its second OpenMP thread only spun waiting for a core that
# the suite's other workers keep busy. The fixture below sets the same for every subprocess.
os.environ["OMP_NUM_THREADS"] = "1"


LEFT_BEHIND = """{what} left {n} process(es) behind, killed now (every process a test starts must end with it):
{lines}"""


@pytest.fixture(scope="session", autouse=True)
def no_process_left_at_the_end(tmp_path_factory):
    """At the session's end no process the suite started (``FTTUI_HOME`` under this session's
    temporary folder: under xdist, this worker's own) may be alive: those left are killed and the
    session fails, naming them."""
    yield
    from tests.helpers import end_leftovers

    lines = end_leftovers(tmp_path_factory.getbasetemp(), grace=30)
    if lines:
        text = LEFT_BEHIND.format(what="the test session", n=len(lines), lines="\n".join(lines))
        print("\n" + text, file=sys.stderr)
        pytest.fail(text, pytrace=False)


@pytest.fixture(autouse=True)
def fttui_home(tmp_path, monkeypatch):
    home = tmp_path / "fttui-home"
    monkeypatch.setenv("FTTUI_HOME", str(home))
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FTTUI_FAKE_GPUS", raising=False)
    monkeypatch.setenv("FTTUI_NO_APP", "1")
    # One thread per training process everywhere (in-process helpers and subprocesses alike):
    # the thread count changes a process's address space, so memory boundaries depend on it.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    yield home
    if (home / "runs").is_dir():  # the test ran something: nothing of it may outlive the test
        from tests.helpers import end_leftovers

        lines = end_leftovers(tmp_path, grace=30)  # a supervisor still exiting after its status (a loaded machine)
        if lines:
            pytest.fail(LEFT_BEHIND.format(what="this test", n=len(lines), lines="\n".join(lines)), pytrace=False)


def fttui_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra)
    return env


def run_fttui(*args: str, timeout: float = 240, env: dict | None = None, cwd: Path = ROOT,
              check: bool = False) -> subprocess.CompletedProcess:
    """Run the real `fttui` command (python -m fttui) with no terminal."""
    proc = subprocess.run(
        [sys.executable, "-m", "fttui", *args],
        cwd=cwd, env=env or fttui_env(), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"fttui {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc

