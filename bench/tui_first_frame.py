"""Time to the app's first frame, against a bare Textual app, and the import time of fttui.tui.app.

    .venv/bin/python bench/tui_first_frame.py [--runs 10] [--mode compare|pty|tmux|headless|all] [--json]

compare (the goal's figure): `fttui` and the bare app of bench/tui_bare_app.py (a Header, a
  ListView of two items, a Footer), each started with `respawn-pane` in the same tmux pane of
  100x30 and timed until its list is on screen (fttui: the picker's "profiles" and "details"
  pane titles; the bare app: both item labels), polling `capture-pane -p` every 10 ms; the two
  alternate in one session (ABBA order, so neither always goes first). Prints each median and
  the ratio fttui / bare (the median of the per-pair ratios too). `--fttui-tree DIR` runs the
  fttui package of another checkout instead (`python -P -m fttui` with PYTHONPATH=DIR), for
  before/after figures in one session.

pty (default): the real `fttui` binary (the entry point next to this Python) on a pseudo
  terminal of 80x24; the clock starts just before the process is spawned and stops when the
  terminal output contains the picker's profile list ("profiles" border title and a profile
  name): what a user sees first. Then `q` quits it.
tmux: the same binary in a tmux pane (`respawn-pane`), polling `capture-pane -p` every 10 ms
  (adds up to ~10 ms of polling delay).
headless: `python -c` that imports fttui.tui.app and runs the app with `App.run_test()` until
  the first pause (no terminal driver; what tests/tui/test_imports.py checks).

Each run gets its own empty FTTUI_HOME. Prints the median, min and max of each figure.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import pty
import re
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FTTUI_BIN = Path(sys.executable).parent / "fttui"
MARKERS = ("profiles", "details")  # the border titles of the picker's two panes
BARE_APP = ROOT / "bench" / "tui_bare_app.py"
BARE_MARKERS = ("first item", "second item")  # the bare app's two list items (tui_bare_app.ITEMS)
CSI = re.compile(rb"\x1b\[[0-9;?<>=$]*[A-Za-z~]")

IMPORT_CODE = r"""
import time
t0 = time.perf_counter()
import fttui.tui.app
print(time.perf_counter() - t0)
"""

HEADLESS_CODE = r"""
import asyncio, time
t0 = time.perf_counter()
from fttui.tui.app import FttuiApp

async def main():
    app = FttuiApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        return time.perf_counter() - t0

print(asyncio.run(main()))
"""


def _env(home: str) -> dict:
    env = dict(os.environ)
    env.pop("FTTUI_NO_APP", None)
    env.pop("NO_COLOR", None)
    env.update(FTTUI_HOME=home, TERM="xterm-256color", COLUMNS="80", LINES="24")
    return env


def import_time() -> float:
    out = subprocess.run([sys.executable, "-c", IMPORT_CODE], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    return float(out.stdout.strip().splitlines()[-1])


def interpreter_only() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t0


def first_frame_pty(width: int = 80, height: int = 24) -> float:
    home = tempfile.mkdtemp(prefix="fttui-bench-")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(FTTUI_BIN)], stdin=slave, stdout=slave, stderr=slave, cwd=ROOT,
                            env=_env(home), start_new_session=True, close_fds=True)
    os.close(slave)
    buf = b""
    t_frame = None
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 0.05)
            if r:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                buf += chunk
                if t_frame is None and all(m.encode() in CSI.sub(b"", buf) for m in MARKERS):
                    t_frame = time.perf_counter() - t0
                    os.write(master, b"q")
            if t_frame is not None and proc.poll() is not None:
                break
    finally:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        os.close(master)
        shutil.rmtree(home, ignore_errors=True)
    if t_frame is None:
        raise RuntimeError(f"no first frame within 30 s; output tail: {buf[-400:]!r}")
    return t_frame


class TmuxPane:
    def __init__(self, width: int = 80, height: int = 24) -> None:
        self.sock = f"fttui-bench-{uuid.uuid4().hex[:8]}"
        self.size = (width, height)
        subprocess.run(self._cmd("new-session", "-d", "-s", "b", "-x", str(width), "-y", str(height),
                                 "sleep 3600", ";", "set-option", "-g", "remain-on-exit", "on"), check=True)

    def _cmd(self, *args: str) -> list[str]:
        return ["tmux", "-L", self.sock, "-f", "/dev/null", *args]

    def run(self, argv: list[str], home: str, markers: tuple[str, ...] = MARKERS,
            env: tuple[str, ...] = ()) -> float:
        import shlex

        cmd = " ".join(shlex.quote(a) for a in ["env", "-u", "FTTUI_NO_APP", *env, f"FTTUI_HOME={home}",
                                                 "TERM=xterm-256color", *argv])
        t0 = time.perf_counter()
        subprocess.run(self._cmd("respawn-pane", "-k", "-t", "b", "-c", str(ROOT), cmd), check=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            s = subprocess.run(self._cmd("capture-pane", "-p", "-t", "b"), capture_output=True, text=True).stdout
            if all(m in s for m in markers):
                t = time.perf_counter() - t0
                subprocess.run(self._cmd("send-keys", "-t", "b", "q"))
                self._wait_exit()
                return t
            time.sleep(0.01)
        raise RuntimeError(f"no first frame within 30 s in tmux ({argv[0]})")

    def _wait_exit(self, timeout: float = 10.0) -> None:
        """Until the app has quit (the pane is dead), so the next run starts on a clear screen."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = subprocess.run(self._cmd("display-message", "-p", "-t", "b", "#{pane_dead}"),
                                  capture_output=True, text=True).stdout.strip()
            if dead == "1":
                return
            time.sleep(0.02)

    def close(self) -> None:
        subprocess.run(self._cmd("kill-server"), capture_output=True)
        _tmux_socket_path(self.sock).unlink(missing_ok=True)


def _tmux_socket_path(name: str) -> Path:
    return Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / name


def first_profile(home: str) -> str:
    """The first name of the picker's profile list (as `fttui` started in ROOT lists them)."""
    code = "from fttui.core.profiles import discover; print(discover()[0].name)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(home), capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


def compare(runs: int, width: int = 100, height: int = 30, tree: str | None = None) -> dict:
    """fttui and the bare app alternated in one tmux pane; medians and the ratio.

    Both run as installed software does: with Python's bytecode cache (a private
    PYTHONPYCACHEPREFIX, written by the warm-up runs; PYTHONDONTWRITEBYTECODE is unset)."""
    pane = TmuxPane(width, height)
    home = tempfile.mkdtemp(prefix="fttui-bench-")
    pycache = tempfile.mkdtemp(prefix="fttui-bench-pyc-")
    env = ("-u", "PYTHONDONTWRITEBYTECODE", f"PYTHONPYCACHEPREFIX={pycache}")
    fttui_argv = [str(FTTUI_BIN)]
    if tree:
        env = (*env, f"PYTHONPATH={Path(tree).resolve()}")
        fttui_argv = [sys.executable, "-P", "-m", "fttui"]  # -P: not the working directory's package
    fttui: list[float] = []
    bare: list[float] = []
    try:
        # fttui: the two pane titles and the first profile of the list
        apps = {"fttui": (fttui_argv, (*MARKERS, first_profile(home)), fttui),
                "bare": ([sys.executable, str(BARE_APP)], BARE_MARKERS, bare)}
        for name in ("fttui", "bare", "fttui", "bare"):  # warm-up (and bytecode), not counted
            argv, markers, _ = apps[name]
            pane.run(argv, home, markers, env)
            time.sleep(0.3)
        for i in range(runs):
            order = ("fttui", "bare") if i % 2 == 0 else ("bare", "fttui")
            for name in order:
                argv, markers, xs = apps[name]
                xs.append(pane.run(argv, home, markers, env))
                time.sleep(0.2)
    finally:
        pane.close()
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(pycache, ignore_errors=True)
    pairs = [a / b for a, b in zip(fttui, bare)]
    return {"size": f"{width}x{height}", "fttui_tree": str(tree or ROOT), "fttui": stats(fttui), "bare": stats(bare),
            "ratio_of_medians": round(statistics.median(fttui) / statistics.median(bare), 2),
            "median_pair_ratio": round(statistics.median(pairs), 2)}


def headless() -> float:
    home = tempfile.mkdtemp(prefix="fttui-bench-")
    env = _env(home)
    try:
        out = subprocess.run([sys.executable, "-c", HEADLESS_CODE], cwd=ROOT, capture_output=True, text=True,
                             env=env, check=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return float(out.stdout.strip().splitlines()[-1])


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def stats(xs: list[float]) -> dict:
    return {"median_s": round(statistics.median(xs), 3), "min_s": round(min(xs), 3), "max_s": round(max(xs), 3),
            "runs": len(xs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--mode", choices=["compare", "pty", "tmux", "headless", "all"], default="all")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--fttui-tree", metavar="DIR", help="compare: the fttui package of this checkout instead")
    args = ap.parse_args()
    if args.mode != "headless" and not FTTUI_BIN.exists():
        print(f"no fttui entry point next to {sys.executable}: install the project (make) first", file=sys.stderr)
        return 2
    out: dict = {"machine": machine(),
                 "load_avg_start": [round(x, 2) for x in os.getloadavg()],
                 "date": time.strftime("%Y-%m-%d %H:%M")}
    import_time()  # warm the page cache once
    if args.mode in ("compare", "all"):
        if not shutil.which("tmux"):
            print("--mode compare needs tmux", file=sys.stderr)
            return 2
        out["compare_tmux_100x30"] = compare(args.runs, tree=args.fttui_tree)
        if args.mode == "compare":
            return _print(out, args.json)
    out["python_startup"] = stats([interpreter_only() for _ in range(args.runs)])
    out["import_fttui_tui_app"] = stats([import_time() for _ in range(args.runs)])
    if args.mode in ("pty", "all"):
        first_frame_pty()  # warm-up, not counted
        out["first_frame_pty"] = stats([first_frame_pty() for _ in range(args.runs)])
    if args.mode in ("tmux", "all") and shutil.which("tmux"):
        pane = TmuxPane()
        try:
            home = tempfile.mkdtemp(prefix="fttui-bench-")
            xs = []
            for _ in range(args.runs):
                xs.append(pane.run([str(FTTUI_BIN)], home))
                time.sleep(0.5)
            out["first_frame_tmux"] = stats(xs)
            shutil.rmtree(home, ignore_errors=True)
        finally:
            pane.close()
    if args.mode in ("headless", "all"):
        out["first_frame_headless_run_test"] = stats([headless() for _ in range(args.runs)])
    return _print(out, args.json)


def _stat_line(v: dict) -> str:
    return f"median {v['median_s']:.3f} s  (min {v['min_s']:.3f}, max {v['max_s']:.3f}, {v['runs']} runs)"


def _print(out: dict, as_json: bool) -> int:
    out["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    if as_json:
        print(json.dumps(out, indent=2))
        return 0
    for k, v in out.items():
        if isinstance(v, dict) and "median_s" in v:
            print(f"{k:32s} {_stat_line(v)}")
        elif isinstance(v, dict):  # the comparison
            print(f"{k} ({v['size']}, alternated; fttui from {v['fttui_tree']}):")
            print(f"  {'fttui':30s} {_stat_line(v['fttui'])}")
            print(f"  {'bare Textual app':30s} {_stat_line(v['bare'])}")
            print(f"  {'ratio (medians)':30s} x{v['ratio_of_medians']:.2f}  (median of pair ratios "
                  f"x{v['median_pair_ratio']:.2f})")
        else:
            print(f"{k:32s} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
