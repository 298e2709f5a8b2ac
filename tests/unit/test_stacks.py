"""`fttui stacks`: parsing a real faulthandler dump, the SIGUSR1 hook, asking a process (issue 39 item 2)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fttui.core.run.processes import stacks
from fttui.integrations import stackdump

# A process that sets fttui's hook up, starts a helper thread and sleeps in a known function.
SLEEPER = """
import sys, threading, time
sys.path.insert(0, sys.argv[2])
from fttui.integrations.stackdump import register as register_stacks
path = register_stacks(sys.argv[1], 3)

def helper_waits():
    time.sleep(120)

def deep_in_the_loop():
    print(path, flush=True)
    time.sleep(120)

threading.Thread(target=helper_waits, daemon=True).start()
deep_in_the_loop()
"""

ROOT = str(Path(__file__).resolve().parents[2])


def _sleeper(run_dir: Path) -> tuple[subprocess.Popen, Path]:
    p = subprocess.Popen([sys.executable, "-c", SLEEPER, str(run_dir), ROOT], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    assert line, "the sleeper did not start"
    return p, Path(line)


def _asleep(p: subprocess.Popen, path: Path) -> str:
    """The sleeper's dump once it is in its sleep (it printed its path just before: on a loaded
    machine a signal can still find it on the print's line), asking again until it is."""
    deadline, text = time.monotonic() + 10, ""
    while time.monotonic() < deadline and "line 12 in deep_in_the_loop" not in text:
        start = path.stat().st_size
        os.kill(p.pid, signal.SIGUSR1)
        end = time.monotonic() + 2
        while time.monotonic() < end and "<module>" not in (text := path.read_text()[start:]):
            time.sleep(0.05)
        time.sleep(0.1)
        text = path.read_text()[start:]
    return text


def _wait_state(pid: int, state: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == state:
                return
        time.sleep(0.02)


def _dump(tmp_path: Path) -> str:
    p, path = _sleeper(tmp_path)
    try:
        return _asleep(p, path)
    finally:
        p.kill()
        p.wait()


def test_parse_a_real_dump(tmp_path):
    text = _dump(tmp_path)
    threads = stacks.parse_dump(text)
    assert len(threads) >= 2, text
    main = stacks.main_thread(threads)
    assert main is not None and main.frames[-1].function == "<module>"
    frame = stacks.main_frame(text)
    assert frame is not None, text
    assert frame.function == "deep_in_the_loop" and frame.file == "<string>" and frame.line == 12, text
    assert any(t.frames and t.frames[0].function == "helper_waits" for t in threads)
    assert frame.text() == "<string>:12 in deep_in_the_loop"


def test_parse_handles_no_frames_and_unknown_lines():
    text = "Stack (most recent call first):\n  <no Python frame>\n"
    assert stacks.main_frame(text) is None
    text = 'Current thread 0x00007f00 (most recent call first):\n  File "a.py", line ??? in f\n  ...\n'
    f = stacks.main_frame(text)
    assert f == stacks.Frame("a.py", None, "f") and f.text() == "a.py:? in f"
    assert stacks.parse_dump("") == [] and stacks.main_frame("garbage") is None


def test_hook_file_mode_and_the_users_handler(tmp_path):
    p, path = _sleeper(tmp_path)
    p.kill()
    p.wait()
    assert path == tmp_path / "stacks" / f"rank-3-pid-{p.pid}.txt"
    assert (tmp_path / "stacks").stat().st_mode & 0o777 == 0o700
    code = (
        "import signal, sys; sys.path.insert(0, sys.argv[2]); signal.signal(signal.SIGUSR1, lambda *a: None);"
        "from fttui.integrations.stackdump import register as register_stacks; print(register_stacks(sys.argv[1]))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "b"), ROOT], capture_output=True, text=True)
    assert out.stdout.strip() == "None" and not (tmp_path / "b").exists()
    assert stackdump.register(None) is None
    assert path.stat().st_mode & 0o777 == 0o600


def test_ask_a_process_then_a_stopped_one(tmp_path):
    p, path = _sleeper(tmp_path)
    try:
        ev = {"event": "start", "t": time.time(), "rank": 3, "pid": p.pid}
        (tmp_path / "events.jsonl").write_text(json.dumps(ev) + "\n")
        assert stacks.ranks_of(tmp_path) == {3: p.pid}
        _asleep(p, path)
        [r] = stacks.ask(tmp_path)
        assert r.answered and r.frame is not None and r.frame.function == "deep_in_the_loop", path.read_text()
        assert r.line() == f"rank 3 (pid {p.pid}): <string>:12 in deep_in_the_loop"
        os.kill(p.pid, signal.SIGSTOP)
        _wait_state(p.pid, "T")  # the kernel stops it a moment later on a loaded machine
        [r] = stacks.ask(tmp_path, wait_s=0.5)
        assert not r.answered and r.stopped
        assert r.line() == f"rank 3 (pid {p.pid}): did not answer: stopped (SIGSTOP)"
        os.kill(p.pid, signal.SIGCONT)
    finally:
        p.kill()
        p.wait()
    [r] = stacks.ask(tmp_path, wait_s=0.2)
    assert r.gone and "not running" in r.line()


def test_main_thread_of_a_module_run_with_python_m():
    text = (
        "Thread 0x0001 (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n'
        '  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap\n\n'
        "Current thread 0x0002 (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n'
        '  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap\n\n'
        "Thread 0x0003 (most recent call first):\n"
        '  File "/x/train.py", line 7 in training_step\n'
        '  File "<frozen runpy>", line 88 in _run_code\n'
        '  File "<frozen runpy>", line 198 in _run_module_as_main\n'
    )
    assert stacks.main_frame(text) == stacks.Frame("/x/train.py", 7, "training_step")


def test_a_rank_in_generated_code_is_named_by_its_source_line():
    """Caught in a dataclass's generated ``__init__`` (file ``<string>``: a CI run's `fttui stacks`
    said "<string>:20 in __init__"), the rank is named by the source line that built it."""
    text = (
        "Current thread 0x0001 (most recent call first):\n"
        '  File "<string>", line 20 in __init__\n'
        '  File "/x/fttui/integrations/hf.py", line 442 in _step\n'
        '  File "/x/trainer.py", line 9 in train\n'
        '  File "<frozen runpy>", line 88 in _run_code\n'
    )
    assert stacks.main_frame(text) == stacks.Frame("/x/fttui/integrations/hf.py", 442, "_step")
    assert stacks.in_source("/x/a.py") and not stacks.in_source("<string>") and not stacks.in_source("<frozen runpy>")
