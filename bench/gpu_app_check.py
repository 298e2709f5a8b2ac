"""The app over a real NVML (bench/gpu_verify.sh, step ``app``; needs an NVIDIA card for its point,
runs anywhere):

    python bench/gpu_app_check.py OUT_DIR [--gpus 1] [--seconds 12]

Starts a small run (tiny-lora, on the card with ``--gpus 1``), then drives the real app with
Textual's Pilot: attached to the live run (run screen: GPU cards from the supervisor's NVML
samples) and on the picker (the cards the app's own NVML sampler sees); saves each screen as SVG
and text; under tmux when tmux is on the PATH (the real binary in a 120x40 pane, captured); then
cancels the run. Prints what each screen showed of the card.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)


def fttui(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fttui", *args], cwd=ROOT, text=True, capture_output=True,
                          timeout=timeout)


def live_run(deadline: float) -> dict | None:
    while time.time() < deadline:
        runs = json.loads(fttui("ls", "--json").stdout or "[]")
        live = [r for r in runs if r.get("live") or r.get("state") in ("running", "starting")]
        if live and (live[0].get("step") or 0) > 0:
            return live[0]
        time.sleep(1)
    return None


async def pilot_screens(run_dir: str, out: str, seconds: float) -> list[str]:
    from fttui.tui.app import FttuiApp
    from fttui.tui.run_screen import RunScreen
    from tests.tui.textdump import screen_text

    notes = []
    app = FttuiApp(attach=run_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        t0 = time.monotonic()
        while not isinstance(app.screen, RunScreen) and time.monotonic() - t0 < 20:
            await pilot.pause(0.2)
        await pilot.pause(seconds)  # a few samples and steps on screen
        text = screen_text(app)
        app.save_screenshot("run_screen.svg", out)
        open(os.path.join(out, "run_screen.txt"), "w").write(text)
        cards = [str(c.border_title) for c in app.screen.query(".gpu-card")]
        notes.append(f"run screen: {type(app.screen).__name__}, GPU cards {cards}")
    app = FttuiApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(seconds / 2)
        text = screen_text(app)
        app.save_screenshot("picker.svg", out)
        open(os.path.join(out, "picker.txt"), "w").write(text)
        gpu_lines = [ln.strip() for ln in text.splitlines() if "GPU" in ln or "H100" in ln or "NVIDIA" in ln]
        notes.append(f"picker: {gpu_lines[:6]}")
    return notes


def tmux_capture(run_id: str, out: str) -> str:
    tmux = shutil.which("tmux")
    if not tmux:
        return "tmux: not on the PATH, skipped"
    sock = os.path.join(out, "tmux.sock")
    env = dict(os.environ, TERM="xterm-256color")
    cmd = f"cd {ROOT} && {sys.executable} -m fttui attach {run_id}"
    subprocess.run([tmux, "-S", sock, "new-session", "-d", "-x", "120", "-y", "40", cmd], env=env, check=False)
    time.sleep(8)
    cap = subprocess.run([tmux, "-S", sock, "capture-pane", "-p"], capture_output=True, text=True, env=env)
    subprocess.run([tmux, "-S", sock, "kill-server"], env=env, check=False)
    open(os.path.join(out, "tmux_run_screen.txt"), "w").write(cap.stdout)
    lines = [ln.rstrip() for ln in cap.stdout.splitlines() if ln.strip()]
    return f"tmux ({tmux}): {len(lines)} lines captured; " + " | ".join(ln.strip() for ln in lines if "GPU" in ln)[:400]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=12)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    run = subprocess.Popen([sys.executable, "-m", "fttui", "run", "--profile", "tiny-lora", "--set", f"devices.gpus={args.gpus}",
                            "--set", "max_steps=100000", "--set", "num_samples=400000", "--headless"],
                           cwd=ROOT, stdout=open(os.path.join(args.out, "app_run.log"), "w"), stderr=subprocess.STDOUT,
                           start_new_session=True)
    try:
        r = live_run(time.time() + 90)
        if r is None:
            print("app: the run never reached a step; see app_run.log")
            return 1
        run_id = r.get("id") or r.get("run_id")
        run_dir = r.get("run_dir") or r.get("path") or run_id
        for note in asyncio.run(pilot_screens(run_dir, args.out, args.seconds)):
            print("app:", note)
        print("app:", tmux_capture(run_id, args.out))
        print("app: cancel:", fttui("cancel", run_id).returncode)
        run.wait(timeout=60)
        print("app: run exit", run.returncode)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, 9)
    return 0


if __name__ == "__main__":
    sys.exit(main())
