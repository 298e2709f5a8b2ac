"""Forecast against measured training time on this machine (issue 23's bar, docs/forecast.md).

One calibrating run of a tiny profile, then for each other setting: the forecast
(`fttui estimate --json`), then the run itself, alternated, in a fresh FTTUI_HOME.

    .venv/bin/python bench/forecast_cpu.py [--profile tiny-lora] [--steps 40] [--grid 8x128,4x64,16x256,32x128]
        [--set KEY=VALUE ...]

``--set``: more profile overrides for every run and forecast (``devices.gpus=1`` and a model's
numbers for the same check on a card: bench/gpu_verify.sh's ``forecast`` step).

``--grid``: batch x max_seq_len per run, the first one calibrating. On real data (tiny-full) the
calibrating run's batches differ in padded length, so its row's ``step_fit`` separates the fixed
cost per step from the per-token time; synthetic data (tiny-lora) cannot.

Prints one line per setting: forecast seconds, measured training seconds (the row's duration_s),
their ratio. Run it on a quiet machine: load changes a CPU step's time several-fold.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

GRID = "8x128,4x64,16x256,32x128"  # the first is the calibrating run


def fttui(*args: str, env: dict) -> str:
    p = subprocess.run([sys.executable, "-m", "fttui", *args], env=env, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, check=True)
    return p.stdout


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="tiny-lora")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="a profile override for every run (repeatable)")
    ap.add_argument("--grid", default=GRID, help="batch x max_seq_len per run, comma-separated; the first calibrates")
    args = ap.parse_args()
    settings = [(f"train.batch_size={b}", f"data.max_seq_len={s}")
                for b, s in (cell.split("x") for cell in args.grid.split(","))]
    env = dict(os.environ, FTTUI_HOME=tempfile.mkdtemp(prefix="fttui-forecast-"), OMP_NUM_THREADS="1",
               FTTUI_NO_APP="1")
    ratios = []
    for i, setting in enumerate(settings):
        sets = [x for kv in (*args.sets, *setting, f"train.max_steps={args.steps}") for x in ("--set", kv)]
        fc = json.loads(fttui("estimate", "--profile", args.profile, *sets, "--json", env=env))["forecast"]
        fttui("run", "--profile", args.profile, *sets, "--headless", env=env)
        row = json.loads(fttui("results", "--format", "json", "--limit", "1", env=env))
        row = row[0] if isinstance(row, list) else row
        measured = float(row["duration_s"])
        ratio = fc["run_seconds"] / measured if measured else float("nan")
        what = "calibrating run" if i == 0 else f"ratio {ratio:.2f}"
        if i:
            ratios.append(ratio)
        print(f"{' '.join(setting):45s} forecast {fc['run_seconds']:8.2f} s  measured {measured:8.2f} s  "
              f"{what}  ({fc['mfu_source']})", flush=True)
    if ratios:
        worst = max(abs(r - 1) for r in ratios)
        print(f"worst |forecast / measured - 1| over {len(ratios)} runs: {worst:.0%}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
