"""Helpers for end-to-end tests: process checks and waiting."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil


def processes_mentioning(text: str) -> list[psutil.Process]:
    """Live processes whose command line mentions `text` (a run directory, say)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(text in part for part in (p.info["cmdline"] or [])):
                found.append(p)
        except psutil.Error:
            pass
    return found


def processes_with_env(key: str, value: str, prefix: bool = False) -> list[psutil.Process]:
    """Live processes whose environment has ``key`` = ``value`` (``prefix``: starting with it), this
    process left out: every process of a run (``FTTUI_RUN_DIR``), of a test (``FTTUI_HOME``)."""
    found = []
    for p in psutil.process_iter(["status"]):
        try:
            if p.pid == os.getpid() or p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            got = p.environ().get(key)
            if got is not None and (got.startswith(value) if prefix else got == value):
                found.append(p)
        except psutil.Error:
            pass
    return found


def wait_for(cond, timeout: float = 120, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def only_run_dir(home: Path) -> Path:
    runs = sorted((home / "runs").iterdir())
    assert len(runs) == 1, runs
    return runs[0]
