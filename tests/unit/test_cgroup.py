"""The run's cgroup (fttui.core.run.processes.cgroup): finding the cgroup v2 folder, refusing a recorded
path that is not the run's, and ending every process in it, with ``cgroup.kill`` and without."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fttui.core.run.processes import cgroup
from fttui.core.run.files.runfiles import SupervisorFile

MOUNTINFO = """\
24 30 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw
35 24 0:30 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755
41 35 0:38 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw
42 35 0:39 / /sys/fs/cgroup/memory rw,relatime shared:11 - cgroup cgroup rw,memory
43 30 0:40 /docker/abc /mnt/my\\040cg rw - cgroup2 cgroup2 rw
"""


def test_the_cgroup_v2_mounts_and_this_process_path_are_read_from_proc_text():
    assert cgroup.mount_points(MOUNTINFO) == [("/", Path("/sys/fs/cgroup/unified")),
                                              ("/docker/abc", Path("/mnt/my cg"))]
    assert cgroup.own_path("9:name=systemd:/\n4:memory:/x\n0::/user.slice/u.service/app.scope\n") \
        == "/user.slice/u.service/app.scope"
    assert cgroup.own_path("4:memory:/x\n") is None  # cgroup v1 only
    assert cgroup.own_path("0::/gone (deleted)\n") is None


def test_a_folder_that_is_no_cgroup_gives_a_note_not_a_cgroup(tmp_path, monkeypatch):
    path, why = cgroup.create("r1", parent=tmp_path)
    assert path is None and why.startswith("no cgroup for the run's processes (") and str(tmp_path) in why
    assert list(tmp_path.iterdir()) == []  # what it made is removed
    path, why = cgroup.create("r1", parent=tmp_path / "missing")
    assert path is None and "not writable here" in why
    monkeypatch.setenv("FTTUI_CGROUP", "0")
    assert cgroup.create("r1") == (None, "no cgroup for the run's processes (FTTUI_CGROUP=0)")


def test_only_the_runs_own_cgroup_on_a_cgroup_v2_mount_is_used(monkeypatch):
    monkeypatch.setattr(cgroup, "_read", lambda p: MOUNTINFO if p.endswith("mountinfo") else "")
    good = "/sys/fs/cgroup/unified/user.slice/fttui-R1"
    assert cgroup.recorded(SupervisorFile.from_dict({"cgroup": good}), "R1") == Path(good)
    for bad in ("/sys/fs/cgroup/unified/user.slice", "/sys/fs/cgroup/unified/fttui-R2",
                "/sys/fs/cgroup/memory/fttui-R1", "/tmp/fttui-R1", "/sys/fs/cgroup/unified/x/../../fttui-R1", 7, None):
        assert cgroup.recorded(SupervisorFile.from_dict({"cgroup": bad}), "R1") is None, bad
    assert cgroup.recorded(None, "R1") is None


def _writable() -> Path:
    path, why = cgroup.create(f"unit-{os.getpid()}")
    if path is None:
        pytest.skip(f"NOT TESTED: the run's cgroup cannot be made on this machine: {why}")
    return path


@pytest.mark.parametrize("how", ["cgroup.kill", "freeze"])
def test_every_process_in_the_cgroup_is_ended_and_the_cgroup_removed(monkeypatch, how):
    """A process and one it forked (born in the cgroup) are ended; the empty cgroup is removed.
    ``freeze``: a kernel without ``cgroup.kill`` (before 5.14): frozen, each process killed."""
    path = _writable()
    procs = []
    try:
        code = "import os, sys, time; os.fork() or time.sleep(60); time.sleep(60)"
        procs.append(subprocess.Popen([sys.executable, "-c", code],
                                      preexec_fn=lambda: cgroup.join(path)))  # noqa: PLW1509
        (path / "sub").mkdir()  # a cgroup the training made below its own
        procs.append(subprocess.Popen(["sleep", "60"], preexec_fn=lambda: cgroup.join(path / "sub")))  # noqa: PLW1509
        import time

        deadline = time.monotonic() + 30
        while len(cgroup.members(path)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        held = sorted(cgroup.members(path))
        assert len(held) == 3 and {p.pid for p in procs} <= set(held)
        if how == "freeze":
            real = cgroup._write
            monkeypatch.setattr(cgroup, "_write", lambda p, t: False if p.name == "cgroup.kill" else real(p, t))
        assert sorted(cgroup.kill(path)) == held
        assert not path.exists()
        assert [p.wait(timeout=30) for p in procs] == [-9, -9]
    finally:
        for p in procs:
            p.kill()
        cgroup.kill(path)
