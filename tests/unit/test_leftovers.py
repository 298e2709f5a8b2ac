"""The suite's check that no test leaves a process behind (tests/helpers.end_leftovers, used by
tests/conftest.py after each test that ran something and at the session's end)."""

from __future__ import annotations

import os
import subprocess

from tests.helpers import end_leftovers, processes_with_env, wait_for


def test_a_process_left_under_a_folder_is_found_killed_and_named(tmp_path):
    mine, other = tmp_path / "test_x1", tmp_path / "test_x10"  # a sibling whose name starts the same
    procs = [subprocess.Popen(["sleep", "60"], env={**os.environ, "FTTUI_HOME": str(folder / "fttui-home")})
             for folder in (mine, other)]
    try:
        # (waited for, not read once: in a loaded clean-clone run the second process was not found
        # by the first read, unexplained; a process that never shows still fails after 10 s)
        wait_for(lambda: [p.pid for p in processes_with_env("FTTUI_HOME", str(mine), under=True)] == [procs[0].pid],
                 timeout=10, what="the first sleep under its folder, and only it")
        wait_for(lambda: [p.pid for p in processes_with_env("FTTUI_HOME", str(other / "fttui-home"))] == [procs[1].pid],
                 timeout=10, what="the second sleep by its exact folder")
        assert end_leftovers(mine, grace=0.5) == [f"pid {procs[0].pid}: sleep 60"]
        assert procs[0].poll() is not None  # ended (reaped by the check: it waits for what it killed)
        assert procs[1].poll() is None
        assert end_leftovers(mine, grace=0) == []
    finally:
        for p in procs:
            p.kill()
            p.wait()
