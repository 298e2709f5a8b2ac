"""End to end: signals to a foreground fttui command (issue 36, items 6 and 7).

A second Ctrl-C before the cancel of `fttui run --headless -- CMD` is sent detaches and leaves the
run running (the cancel is never sent); one after it is said to be too late, and the run stops.
SIGTERM and SIGHUP to a foreground `fttui watch --pid P --headless` end its watcher too (it used
to sample at 2 Hz until P ended); Ctrl-C already did.
"""

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
from tests.helpers import processes_mentioning, wait_for

pytestmark = pytest.mark.e2e

# A command that ignores SIGTERM (only SIGKILL ends it) and runs until the test releases it.
STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
end = time.monotonic() + 300
while time.monotonic() < end and not os.path.exists(sys.argv[1]):
    time.sleep(0.1)
print("released", flush=True)
"""


class Cli:
    """A foreground fttui command with no terminal, its two outputs read as they come."""

    def __init__(self, *args: str, env: dict, cwd: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "fttui", *args], env=env, cwd=cwd, text=True,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.out: list[str] = []
        self.err: list[str] = []
        self.readers = [threading.Thread(target=lambda s=s, d=d: d.extend(s), daemon=True)
                        for s, d in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for r in self.readers:
            r.start()

    def said(self, text: str, where: str = "err") -> bool:
        return any(text in line for line in (self.err if where == "err" else self.out))

    def wait(self, timeout: float) -> int:
        rc = self.proc.wait(timeout=timeout)
        for r in self.readers:
            r.join(timeout=10)
        return rc

    def text(self) -> str:
        return "".join(self.out) + "".join(self.err)


def _run_dir(home: Path) -> Path:
    runs = wait_for(lambda: sorted((home / "runs").glob("*")) if (home / "runs").is_dir() else [], timeout=60,
                    what="the run directory")
    assert len(runs) == 1, runs
    return runs[0]


def _state(home: Path, run_id: str) -> str:
    runs = json.loads(run_fttui("ls", "--json", env=fttui_env(FTTUI_HOME=str(home)), check=True).stdout)
    return next(r["status"] for r in runs if r["run_id"] == run_id)


def _start_stubborn_run(tmp_path: Path, home: Path) -> tuple[Cli, Path, Path]:
    work = tmp_path / "work"
    work.mkdir()
    release = tmp_path / "release"
    # a short kill grace: a cancel that was not withdrawn would end the run within 2 s of its SIGTERM
    cli = Cli("run", "--headless", "--name", "stubborn", "--", sys.executable, "-c", STUBBORN, str(release),
              env=fttui_env(FTTUI_HOME=str(home), FTTUI_KILL_GRACE="2"), cwd=work)
    wait_for(lambda: cli.said("ready", "out"), timeout=120, what="the command's first line")
    return cli, _run_dir(home), release


def _end_run(home: Path, run_dir: Path, release: Path) -> None:
    release.touch()
    try:
        wait_for(lambda: (run_dir / "status.json").exists(), timeout=60, what="the run's status")
    finally:
        if not (run_dir / "status.json").exists():
            run_fttui("cancel", run_dir.name, env=fttui_env(FTTUI_HOME=str(home)))


def test_a_second_ctrl_c_before_the_cancel_is_sent_leaves_the_run_running(tmp_path, fttui_home):
    """Issue 36.6: the first Ctrl-C asks to cancel the run (sent after a short window); a second
    within it detaches and withdraws it: the run (a command that ignores SIGTERM) still runs 15 s
    later. It used to print "the run goes on" and cancel it all the same."""
    cli, run_dir, release = _start_stubborn_run(tmp_path, fttui_home)
    try:
        cli.proc.send_signal(signal.SIGINT)
        wait_for(lambda: cli.said("Ctrl-C again"), timeout=30, what="the first Ctrl-C's line")
        cli.proc.send_signal(signal.SIGINT)
        assert cli.wait(timeout=30) == 130, cli.text()
        end = time.monotonic() + 15
        while time.monotonic() < end:  # no status, the command alive, all along
            assert not (run_dir / "status.json").exists(), (run_dir / "status.json").read_text()
            assert processes_mentioning(str(release)), "the command must still run"
            time.sleep(0.5)
        assert not (run_dir / "cancel").exists()
        assert _state(fttui_home, run_dir.name) == "running"
        assert cli.said("cancel withdrawn") and cli.said(f"the run goes on: fttui attach {run_dir.name}"), cli.text()
        assert not cli.said("cancel sent"), cli.text()
    finally:
        _end_run(fttui_home, run_dir, release)
    assert json.loads((run_dir / "status.json").read_text())["status"] == "completed"


def test_a_second_ctrl_c_after_the_cancel_was_sent_says_the_run_stops(tmp_path, fttui_home):
    """A cancel already sent (the supervisor may have signalled the command) is not taken back:
    the second Ctrl-C detaches saying so, and the run ends cancelled."""
    cli, run_dir, release = _start_stubborn_run(tmp_path, fttui_home)
    try:
        cli.proc.send_signal(signal.SIGINT)
        wait_for(lambda: cli.said("cancel sent: the run is stopping"), timeout=30, what="the cancel sent")
        cli.proc.send_signal(signal.SIGINT)
        assert cli.wait(timeout=30) == 130, cli.text()
        assert cli.said("the cancel was already sent and cannot be withdrawn: the run is stopping"), cli.text()
        assert not cli.said("the run goes on"), cli.text()
        wait_for(lambda: (run_dir / "status.json").exists(), timeout=60, what="the run's status")
        assert json.loads((run_dir / "status.json").read_text())["status"] == "cancelled"
        wait_for(lambda: not processes_mentioning(str(release)), timeout=30, what="the command's end")
    finally:
        _end_run(fttui_home, run_dir, release)


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGHUP, 128 + signal.SIGHUP),
                                       (signal.SIGINT, 0)], ids=["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_signal_to_a_foreground_watch_ends_its_watcher(tmp_path, fttui_home, sig, code):
    """Issue 36.7: SIGTERM or SIGHUP to `fttui watch --pid P --headless` leaves no fttui process
    within 5 s (its watcher, in a session of its own, sampled on until P ended); Ctrl-C already
    did. The watched process is never touched."""
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    try:
        cli = Cli("watch", "--pid", str(target.pid), "--headless", env=fttui_env(FTTUI_HOME=str(fttui_home)),
                  cwd=tmp_path)
        run_dir = _run_dir(fttui_home)
        wait_for(lambda: (run_dir / "samples.jsonl").exists() and cli.said(f"pid {target.pid}:", "out"),
                 timeout=60, what="the watch's first sample and line")
        assert processes_mentioning(str(run_dir)), "the watcher should run"
        cli.proc.send_signal(sig)
        wait_for(lambda: cli.proc.poll() is not None and not processes_mentioning(str(run_dir)), timeout=5,
                 what="no fttui process of the watch")
        assert cli.wait(timeout=10) == code, cli.text()
        status = json.loads((run_dir / "status.json").read_text())
        assert status["status"] == "watched" and status["error"].startswith("stopped watching"), status
        if sig != signal.SIGINT:
            assert cli.said(f"{sig.name}: the watch is stopped (the watched process is not touched)"), cli.text()
        size = (run_dir / "samples.jsonl").stat().st_size
        time.sleep(1.5)  # three sampling ticks: nothing samples any more
        assert (run_dir / "samples.jsonl").stat().st_size == size
        assert target.poll() is None, "the watched process must live on"
    finally:
        os.killpg(target.pid, signal.SIGKILL)
        target.wait(timeout=30)
