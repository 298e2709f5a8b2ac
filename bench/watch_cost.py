"""Cost of watching: does supervising and sampling a run slow the training down?

    .venv/bin/python bench/watch_cost.py [--pairs 6] [--profile tiny-lora] [--steps 300] [--out FILE]

Paired runs, alternated (A B, B A, A B, ...) so that drift of the machine hits both sides:
  A  the worker alone: `python -m fttui.worker.train --run-dir D` (no supervisor, no sampling);
  B  the real thing: `fttui run --headless` (supervisor sampling NVML + psutil at 2 Hz, the CLI
     following the events at 2 Hz).
Each side's figure is the steady-state samples/s of its own events (warm-up step excluded).
Prints a Markdown table and the ratio B / A (target: at least 0.99).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fttui.core.profiles import Profile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def steady_sps(events_path: Path, warmup: int = 1) -> float:
    from fttui.core.run.files.events import read_jsonl
    from fttui.core.run.fold.state import RunState

    st = RunState(warmup_exclude_steps=warmup)
    for e in read_jsonl(events_path):
        st.apply(e)
    return st.snapshot().samples_per_s


def run_alone(resolved: Profile, home: Path) -> float:
    from fttui.core.run.launching import launch
    from fttui.core.run.files import rundir

    os.environ["FTTUI_HOME"] = str(home)
    rd = rundir.create(resolved.to_dict(), [], launch.child_env(resolved))
    env = dict(os.environ, **launch.child_env(resolved))
    subprocess.run([sys.executable, "-m", "fttui.worker.train", "--run-dir", str(rd.path)], env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return steady_sps(rd.events_path)


def run_watched(profile: str, steps: int, home: Path) -> float:
    env = dict(os.environ, FTTUI_HOME=str(home))
    out = subprocess.run([sys.executable, "-m", "fttui", "run", "--profile", profile, "--headless", "--set",
                          f"max_steps={steps}"], env=env, capture_output=True, text=True, check=True)
    run_dir = Path(out.stdout.split("(", 1)[1].split(")", 1)[0])
    return steady_sps(run_dir / "events.jsonl")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--profile", default="tiny-lora")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--out")
    a = ap.parse_args()
    from fttui.core.profiles import load_profile

    resolved = load_profile(a.profile, [f"max_steps={a.steps}"])
    home = Path(tempfile.mkdtemp(prefix="fttui-bench-"))
    alone, watched = [], []
    for i in range(a.pairs):
        order = ("A", "B") if i % 2 == 0 else ("B", "A")
        for side in order:
            if side == "A":
                alone.append(run_alone(resolved, home))
            else:
                watched.append(run_watched(a.profile, a.steps, home))
        print(f"pair {i + 1}: alone {alone[-1]:.1f}  watched {watched[-1]:.1f} samples/s", file=sys.stderr)
    ratios = [w / x for w, x in zip(watched, alone)]
    lines = [
        f"profile {a.profile}, {a.steps} steps per run, {a.pairs} pairs alternated, {os.cpu_count()} CPUs",
        "",
        "| pair | worker alone (samples/s) | supervised + sampled + followed (samples/s) | ratio |",
        "| --- | --- | --- | --- |",
        *(f"| {i + 1} | {x:.1f} | {w:.1f} | {r:.3f} |" for i, (x, w, r) in enumerate(zip(alone, watched, ratios))),
        f"| median | {statistics.median(alone):.1f} | {statistics.median(watched):.1f} | "
        f"{statistics.median(ratios):.3f} |",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    print(json.dumps({"median_ratio": statistics.median(ratios)}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
