"""The real `fttui` binary in a real terminal (tmux): keys in, screen text out.

Each test starts its own tmux server (``-L``, a private socket) so nothing is shared with other
tmux users, and kills it in a ``finally``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

# The suite runs two tests at a time on two cores: screens take longer than on a quiet machine.
SLACK = 3
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT, fttui_env, run_fttui
from tests.helpers import processes_mentioning, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed: the terminal tests need it"),
]

FTTUI_BIN = Path(sys.executable).parent / "fttui"


class Tmux:
    """One private tmux server with one session running a command."""

    def __init__(self, home: Path, width: int, height: int) -> None:
        self.name = f"fttui-test-{uuid.uuid4().hex[:8]}"
        self.socket = self.name
        self.home = home
        self.size = (width, height)
        env = fttui_env(FTTUI_HOME=str(home), TERM="xterm-256color")
        env.pop("FTTUI_NO_APP", None)  # tests/conftest.py sets it for the other tests
        env.pop("NO_COLOR", None)
        env.pop("TMUX", None)
        self.env = env

    def tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args], env=self.env,
                              capture_output=True, text=True, timeout=20, check=check)

    def start(self, *argv: str, window: str = "main") -> None:
        cmd = " ".join(_quote(a) for a in ["env", "-u", "FTTUI_NO_APP", f"FTTUI_HOME={self.home}",
                                           "TERM=xterm-256color", str(FTTUI_BIN), *argv])
        w, h = self.size
        if window == "main":
            # remain-on-exit: the pane (and its exit status) stays after the app exits
            self.tmux("new-session", "-d", "-s", self.name, "-x", str(w), "-y", str(h), "-n", window,
                      "-c", str(ROOT), cmd, ";", "set-option", "-g", "remain-on-exit", "on")
        else:
            self.tmux("new-window", "-d", "-t", self.name, "-n", window, "-c", str(ROOT), cmd)

    def target(self, window: str = "main") -> str:
        return f"{self.name}:{window}"

    def keys(self, *keys: str, window: str = "main") -> None:
        self.tmux("send-keys", "-t", self.target(window), *keys)

    def screen(self, window: str = "main") -> str:
        return self.tmux("capture-pane", "-p", "-t", self.target(window), check=False).stdout

    def wait_screen(self, text: str, timeout: float, window: str = "main") -> str:
        timeout *= SLACK
        deadline = time.monotonic() + timeout
        while True:
            s = self.screen(window)
            if text in s:
                return s
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {text!r} on screen:\n{s}")
            time.sleep(0.2)

    def pane_dead(self, window: str = "main") -> tuple[bool, str]:
        out = self.tmux("display-message", "-p", "-t", self.target(window), "#{pane_dead} #{pane_dead_status}",
                        check=False).stdout.split()
        return (bool(out) and out[0] == "1"), (out[1] if len(out) > 1 else "")

    def kill(self) -> None:
        self.tmux("kill-server", check=False)
        _tmux_socket_path(self.socket).unlink(missing_ok=True)


def _tmux_socket_path(name: str) -> Path:
    return Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / name


def _quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


def _profile_index(name: str) -> int:
    from fttui.core.profiles import discover

    names = [r.name for r in discover()]
    return names.index(name)


@pytest.fixture
def in_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the binary runs in the repository root: same profiles


@pytest.fixture
def fttui_bin():
    if not FTTUI_BIN.exists():
        pytest.skip(f"no fttui entry point next to the Python running the tests ({sys.executable})")
    return FTTUI_BIN


def test_tmux_pick_launch_complete_quit_result(fttui_home, fttui_bin, in_root):
    t = Tmux(fttui_home, 120, 40)
    try:
        t.start()
        t.wait_screen("profiles", timeout=20)
        t.wait_screen("GPUs:", timeout=10)
        idx = _profile_index("tiny-lora")
        t.keys("Home", *["Down"] * idx)
        t.wait_screen("tiny-lora (bundled)", timeout=10)
        t.wait_screen("seq len", timeout=10)  # the override fields, mounted after the first frame
        # fewer, bigger steps: tab to the batch field (list -> details -> batch), type over it; in
        # one burst, as a fast typist over SSH sends it (the app's Tab is a priority binding:
        # the digits right behind it reach the field, tests/tui/test_picker_typeahead.py)
        t.keys("Tab", "Tab", "3", "2")
        t.wait_screen("32 x accum 1", timeout=10)
        # and the sequence length, two fields on (batch -> accum -> seq len): a quicker run
        t.keys("Tab", "Tab", "3", "2")
        t.wait_screen("max_seq_len 32", timeout=10)
        t.keys("Enter")
        t.wait_screen("tiny-lora", timeout=20)
        t.wait_screen("COMPLETED", timeout=90)
        s = t.wait_screen("summary", timeout=10)
        assert "batch_size 32" in s
        t.keys("q")
        wait_for(lambda: t.pane_dead()[0], timeout=45, what="app exit")
        # tmux records the exit status a moment after the pane dies (and not at all on some
        # versions): a non-zero status fails, a missing one does not
        time.sleep(0.5)
        assert t.pane_dead()[1] in ("0", "")
    finally:
        t.kill()
    rows = json.loads(run_fttui("results", "--format", "json", env=fttui_env(FTTUI_HOME=str(fttui_home)),
                                check=True).stdout)
    runs = [r for r in rows if r.get("profile") == "tiny-lora" and r.get("kind", "run") == "run"]
    assert len(runs) == 1, rows
    assert runs[0]["status"] == "completed" and runs[0]["batch_size"] == 32 and runs[0]["max_seq_len"] == 32


def test_tmux_quit_detach_then_attach(fttui_home, fttui_bin, in_root):
    t = Tmux(fttui_home, 80, 24)
    run_dir = None
    try:
        t.start("--profile", "tiny-lora", "--set", "max_steps=100000")
        t.wait_screen("RUNNING", timeout=60)
        run_dir = wait_for(lambda: next(iter((fttui_home / "runs").iterdir()), None), timeout=5, what="run dir")
        t.keys("q")
        s = t.wait_screen("still live", timeout=10)
        assert run_dir.name in s
        t.keys("d")
        wait_for(lambda: t.pane_dead()[0], timeout=45, what="app exit")
        # tmux records the exit status a moment after the pane dies (and not at all on some
        # versions): a non-zero status fails, a missing one does not
        time.sleep(0.5)
        assert t.pane_dead()[1] in ("0", "")
        # the run goes on without the app
        assert not (run_dir / "status.json").exists()
        assert processes_mentioning(str(run_dir))
        t.start("attach", window="attach")
        s = t.wait_screen(run_dir.name, timeout=20, window="attach")
        s = t.wait_screen("RUNNING", timeout=20, window="attach")
        assert "step" in s
    finally:
        t.kill()
        if run_dir is not None:
            run_fttui("cancel", run_dir.name, env=fttui_env(FTTUI_HOME=str(fttui_home)))
    wait_for(lambda: not processes_mentioning(str(run_dir)), timeout=30, what="run processes gone")
    st = json.loads((run_dir / "status.json").read_text())
    assert st["status"] == "cancelled"


def test_tmux_live_run_listed_and_attached(fttui_home, fttui_bin, in_root):
    """After an SSH drop: `fttui` opens on the live run another fttui started; Enter attaches."""
    from tests.tui.fixtures import write_run

    supervisor = subprocess.Popen(["sleep", "120"])  # stands for the other fttui's supervisor
    try:
        run_dir = write_run("20231114-221320-demo-lora-0001", status=None, live_pid=supervisor.pid,
                            steps=12, total_steps=20)
        t = Tmux(fttui_home, 100, 30)
        try:
            t.start()
            s = t.wait_screen("live runs (1)", timeout=20)
            line = next(ln for ln in s.splitlines() if run_dir.name in ln)
            assert "demo-lora" in line and "running" in line and "12/20" in line and "00:06" in line
            # the key, in the footer: it shows once the live table has the focus, which the picker
            # gives it just after the first frame (a loaded machine may draw the list first)
            t.wait_screen("a Attach", timeout=20)
            t.keys("Enter")
            s = t.wait_screen("RUNNING", timeout=20)
            assert run_dir.name in s and "step 12/20" in s
            t.keys("q")  # attached here: quitting asks, detach leaves the run alone
            t.wait_screen("still live", timeout=10)
            t.keys("d")
            wait_for(lambda: t.pane_dead()[0], timeout=30, what="app exit")
        finally:
            t.kill()
        assert not (run_dir / "cancel").exists()
    finally:
        supervisor.kill()
        supervisor.wait()
