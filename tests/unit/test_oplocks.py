"""Stale DeepSpeed op build locks (fttui/core/run/launching/oplocks.py): a lock left by a killed build is
removed before DeepSpeed loads its ops (else the run waits on it forever); a build that is
running (a process works in its folder) or has just started keeps its lock."""

from __future__ import annotations

import os
import subprocess
import time

from fttui.core.run.launching.oplocks import clear_stale_locks, stale_locks


def _lock(folder, age_s: float):
    folder.mkdir(parents=True)
    lock = folder / "lock"
    lock.write_text("")
    t = time.time() - age_s
    os.utime(lock, (t, t))
    return lock


def test_a_lock_left_by_a_killed_build_is_removed_and_said(tmp_path):
    left = _lock(tmp_path / "py311_cpu" / "deepspeed_shm_comm", 3600)
    fresh = _lock(tmp_path / "py311_cpu" / "cpu_adam", 5)  # a build starting now
    flat = _lock(tmp_path / "fused_adam", 3600)  # TORCH_EXTENSIONS_DIR has no <py>_<acc> level
    said: list[str] = []
    removed = clear_stale_locks(tmp_path, said.append)
    assert sorted(removed) == sorted([left, flat])
    assert not left.exists() and not flat.exists() and fresh.exists()
    assert len(said) == 2 and all("stale op build lock" in s for s in said)
    assert clear_stale_locks(tmp_path, said.append) == [] and len(said) == 2


def test_a_build_in_progress_keeps_its_lock(tmp_path):
    lock = _lock(tmp_path / "py311_cpu" / "cpu_adam", 3600)
    # a compiler working in the op's folder (as ninja and c++ do)
    proc = subprocess.Popen(["sleep", "60"], cwd=lock.parent)
    try:
        assert stale_locks(tmp_path) == []
        assert clear_stale_locks(tmp_path, print) == [] and lock.exists()
    finally:
        proc.kill()
        proc.wait()
    assert stale_locks(tmp_path) == [lock]


def test_no_folder_no_locks(tmp_path):
    assert stale_locks(tmp_path / "missing") == []
