"""Shared fixtures: every test gets its own FTTUI_HOME, and a clean colour environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def fttui_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "fttui-home"
    monkeypatch.setenv("FTTUI_HOME", str(home))
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FTTUI_FAKE_GPUS", raising=False)
    monkeypatch.setenv("FTTUI_NO_APP", "1")
    # One thread per training process everywhere (in-process helpers and subprocesses alike):
    # the thread count changes a process's address space, so memory boundaries depend on it.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return home


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


def _cpu_seconds() -> float:
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """``FTTUI_TEST_CPU_LOG=FILE``: each test's CPU seconds (its process and the children it waited
    for) and wall seconds, appended to FILE: what a test costs, whatever the machine's load
    (docs/testing.md)."""
    log = os.environ.get("FTTUI_TEST_CPU_LOG")
    if not log:
        yield
        return
    import time

    cpu0, wall0 = _cpu_seconds(), time.monotonic()
    yield
    with open(log, "a") as f:
        f.write(f"{_cpu_seconds() - cpu0:9.2f} {time.monotonic() - wall0:9.2f} {item.nodeid}\n")
