"""DeepSpeed's shared-memory buffers left after a run (fttui.core.run.processes.shmleft): this
user's buffers no living process maps, and old enough, are removed; one a process maps, one just
made and another user's are kept. A folder of the test stands in for /dev/shm."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from fttui.core.run.processes import shmleft
from tests.helpers import wait_for


def _buffer(folder, name: str, age_s: float):
    path = folder / name
    path.write_bytes(b"\0" * 4096)
    old = time.time() - age_s
    os.utime(path, (old, old))
    return path


def test_only_unheld_old_buffers_of_this_user_go(tmp_path):
    uid = os.getuid()
    left = _buffer(tmp_path, f"{shmleft.PREFIX}_{uid}_127.0.0.1_29500_0", 3600)
    held = _buffer(tmp_path, f"{shmleft.PREFIX}_{uid}_127.0.0.1_29600_0", 3600)
    new = _buffer(tmp_path, f"{shmleft.PREFIX}_{uid}_127.0.0.1_29700_0", 1)
    other = _buffer(tmp_path, f"{shmleft.PREFIX}_{uid + 1}_127.0.0.1_29500_0", 3600)
    unrelated = _buffer(tmp_path, "torch_shm_0", 3600)
    # a rank that maps its buffer (as DeepSpeed's shm_initialize does), alive through the sweep
    holder = subprocess.Popen(
        [sys.executable, "-c", "import mmap, sys, time\nf = open(sys.argv[1], 'r+b')\n"
         "m = mmap.mmap(f.fileno(), 4096)\nprint('mapped', flush=True)\ntime.sleep(60)", str(held)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "mapped"
        removed = shmleft.remove_unheld(tmp_path)
        assert removed == [left.name]
        assert not left.exists() and held.exists() and new.exists() and other.exists() and unrelated.exists()
    finally:
        holder.kill()
        holder.wait()
    # its process gone, the held one is left over too; the new one is still too young
    wait_for(lambda: shmleft.remove_unheld(tmp_path) == [held.name] or not held.exists(), timeout=10,
             what="the buffer freed by its process's end removed")
    assert not held.exists() and new.exists()
    assert shmleft.remove_unheld(tmp_path, min_age_s=0) == [new.name]


def test_nothing_to_do_without_buffers_or_a_folder(tmp_path):
    assert shmleft.remove_unheld(tmp_path) == []
    assert shmleft.remove_unheld(tmp_path / "missing") == []
