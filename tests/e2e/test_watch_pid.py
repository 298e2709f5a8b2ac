"""`fttui watch --pid`: the panels of a process fttui did not start. The recorded peak is the
process's own (compared with the peak RSS the process reads from its kernel), Ctrl-C and
`fttui cancel` stop the watch and never the process, a row only with --record, and bad pids are
one line, exit 2, nothing written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import fttui_env, run_fttui
from tests.helpers import wait_for

pytestmark = pytest.mark.e2e

# The process's own peak RSS from its kernel: VmHWM (its address space's high-water mark, new at
# exec; ru_maxrss would carry the peak of the process it was forked from).
HOLD = """
import os, sys, time
block = bytearray(200 * 1024 * 1024)          # touched: resident
for i in range(0, len(block), 4096):
    block[i] = 1
end = time.monotonic() + float(sys.argv[2])   # or earlier, once the test releases it
while time.monotonic() < end and not os.path.exists(sys.argv[1] + ".release"):
    time.sleep(0.1)
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
open(sys.argv[1], "w").write(str(int(hwm.split()[1]) / 1024))  # MiB
"""


def _target(tmp_path: Path, seconds: float) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / "maxrss.txt"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(out), str(seconds)], start_new_session=True)
    return proc, out


def _watch(*args: str, env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fttui", "watch", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def test_recorded_watch_peak_is_the_process_own(tmp_path, fttui_home):
    # the process holds its memory until the watch printed its line (a loaded machine starts the
    # watcher slowly: a fixed 4 s ended the process before its first sample, seen in a busy run)
    proc, out = _target(tmp_path, 90.0)
    env = fttui_env(FTTUI_HOME=str(fttui_home))
    t0 = time.monotonic()
    lines: list[str] = []
    try:
        watch = _watch("--pid", str(proc.pid), "--headless", "--record", "--name", "holder", env=env)
        reader = threading.Thread(target=lambda: lines.extend(watch.stdout), daemon=True)
        reader.start()
        wait_for(lambda: any(f"pid {proc.pid}: 1 process" in ln for ln in lines), timeout=60,
                 what="the watch's line")
        Path(str(out) + ".release").touch()
        watch.wait(timeout=60)
        reader.join(timeout=10)
        stdout, stderr = "".join(lines), watch.stderr.read()
    finally:
        Path(str(out) + ".release").touch()
        proc.wait(timeout=30)
    watched_for = time.monotonic() - t0  # the watch's wall time is inside this, whatever the load
    assert watch.returncode == 0, stdout + stderr
    assert f"pid {proc.pid}: 1 process, tree RSS" in stdout and "own peaks" in stdout and "WATCHED: process" in stdout
    rows = json.loads(run_fttui("results", "--json", env=env, check=True).stdout)
    assert len(rows) == 1
    row = rows[0]
    assert (row["kind"], row["status"], row["profile"], row["recorded_by"]) == ("watch", "watched", "holder", "watch")
    own = float(out.read_text())  # the process's peak RSS, from its kernel
    assert row["peak_tree_rss_mb"] == pytest.approx(own, rel=0.15)
    # the watcher's start is slow on a loaded machine: its wall time is only bounded, not timed
    assert 0 < row["wall_s"] <= watched_for + 0.5 and row["steps"] is None


def test_ctrl_c_and_cancel_stop_the_watch_not_the_process(tmp_path, fttui_home):
    proc, _ = _target(tmp_path, 60.0)
    env = fttui_env(FTTUI_HOME=str(fttui_home))
    try:
        watch = _watch("--pid", str(proc.pid), "--headless", env=env)
        wait_for(lambda: list((fttui_home / "runs").glob("*/samples.jsonl")), timeout=30, what="the first sample")
        watch.send_signal(signal.SIGINT)
        stdout, stderr = watch.communicate(timeout=30)
        assert watch.returncode == 0, stdout + stderr
        assert "stopping the watch" in stderr and "WATCHED: stopped watching" in stdout
        assert proc.poll() is None, "the watched process must live on"
        detached = run_fttui("watch", "--pid", str(proc.pid), "--detach", env=env, check=True).stdout.strip()
        run_dir = fttui_home / "runs" / detached
        wait_for(lambda: (run_dir / "samples.jsonl").exists(), timeout=30, what="the detached watch's sample")
        cancel = run_fttui("cancel", detached, env=env)
        assert cancel.returncode == 0, cancel.stderr
        assert json.loads((run_dir / "status.json").read_text())["status"] == "watched"
        assert proc.poll() is None
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert json.loads(run_fttui("results", "--json", env=env, check=True).stdout) == []  # no --record, no row


@pytest.mark.parametrize("pid, words", [("999999999", "no such process"), ("0", "not a process id")])
def test_bad_pid_is_one_line_exit_2_and_writes_nothing(fttui_home, pid, words):
    out = run_fttui("watch", "--pid", pid, "--headless", env=fttui_env(FTTUI_HOME=str(fttui_home)))
    assert out.returncode == 2 and words in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not fttui_home.exists() or not any(fttui_home.rglob("*"))


def test_another_users_process_is_refused(monkeypatch):
    from fttui.core.base.errors import FttuiError
    from fttui.core.run.supervising import pidwatch

    other = os.getuid() + 4242  # as another (non-root) user sees this test's parent process
    monkeypatch.setattr(pidwatch.os, "getuid", lambda: other)
    with pytest.raises(FttuiError, match="not your process"):
        pidwatch.check_pid(os.getppid())


# A short spike between two samples: 400 MiB held for 0.1 s, then freed; the process lives on.
SPIKE = """
import sys, time
time.sleep(1.0)
block = bytearray(400 * 1024 * 1024)
for i in range(0, len(block), 4096):
    block[i] = 1
time.sleep(0.1)
del block
time.sleep(float(sys.argv[2]))
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
open(sys.argv[1], "w").write(str(int(hwm.split()[1]) / 1024))  # MiB
"""


def test_watch_peak_is_the_process_high_water_mark_not_a_sample(tmp_path, fttui_home):
    """The recorded peak is each process's own VmHWM, read while it lives (issue 27.3): a spike
    shorter than the sampling interval is in it; the sampled tree's peak is its own column."""
    out = tmp_path / "hwm.txt"
    proc = subprocess.Popen([sys.executable, "-c", SPIKE, str(out), "2.5"], start_new_session=True)
    env = fttui_env(FTTUI_HOME=str(fttui_home))
    try:
        watch = _watch("--pid", str(proc.pid), "--headless", "--record", env=env)
        stdout, stderr = watch.communicate(timeout=60)
    finally:
        proc.wait(timeout=30)
    assert watch.returncode == 0, stdout + stderr
    row = json.loads(run_fttui("results", "--json", env=env, check=True).stdout)[0]
    own = float(out.read_text())
    assert own > 400
    assert row["peak_host_rss_mb"] == pytest.approx(own, abs=1.0), row
    assert row["host_measure"] == "processes"
    assert row["peak_tree_rss_mb"] <= row["peak_host_rss_mb"] + 0.1

