"""Issue 41, as a user tried them: a multi-node sweep, `--on-oom shrink` in a Slurm job, card
names, `plan --write`, a SIGKILL that was no OOM, and the words of `attach` and a sacct time limit."""

from __future__ import annotations

from tests.conftest import run_fttui


def test_a_sweep_of_several_nodes_is_refused_in_one_line():
    """Item 2: the sweep started node 0 on this machine and waited for node 1 until killed; the
    probe refuses the same profile in one line, and so does the sweep now, before any cell runs."""
    out = run_fttui("sweep", "--profile", "tiny-lora", "--set", "devices.nodes=2", "--grid", "batch_size=2,4",
                    timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "the sweep runs on one machine, the profile has devices.nodes = 2" in out.stderr
    grid = run_fttui("sweep", "--profile", "tiny-lora", "--grid", "devices.nodes=1,2", timeout=60)
    assert grid.returncode == 2 and "devices.nodes = 2" in grid.stderr and grid.stderr.count("\n") == 1
