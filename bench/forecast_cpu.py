"""Forecast against measured training time on this machine (issue 23's bar, docs/forecast.md).

One calibrating run of a tiny profile; then the forecast of every other setting from that one row
(`fttui estimate --json`, the bar's figure); then, per setting, the forecast from the rows so far
and the run itself, alternated. All in a fresh FTTUI_HOME, OMP_NUM_THREADS=1.

    .venv/bin/python bench/forecast_cpu.py [--profile tiny-lora] [--steps 100] [--grid 8x128,4x64,16x256,32x128]
        [--set KEY=VALUE ...] [--warm]

``--set``: more profile overrides for every run and forecast (``devices.gpus=1`` and a model's
numbers for the same check on a card: bench/gpu_verify.sh's ``forecast`` step).

``--grid``: batch x max_seq_len per run, the first one calibrating. The calibrating row's
``step_fit`` holds its step measured by parts (the passes' time, the rest of the step, the pass
floor timed after training): the forecast's one-run calibration.

Prints one line per setting: the forecast from the one calibrating row, the forecast from the rows
so far, the measured training time (the row's duration_s) and their ratios; then the worst ratio
of the one-row forecasts. Run it on a quiet machine: load changes a CPU step's time several-fold.
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
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="a profile override for every run (repeatable)")
    ap.add_argument("--grid", default=GRID, help="batch x max_seq_len per run, comma-separated; the first calibrates")
    ap.add_argument("--warm", action="store_true",
                    help="first one unrecorded 5-step run of the calibrating setting in another FTTUI_HOME (the "
                         "first process on a machine reads the libraries from disk: on an H100 its warm-up was "
                         "3.3 s against 0.7-0.8 s for the next, and one row carries it into every forecast)")
    args = ap.parse_args()
    settings = [(f"train.batch_size={b}", f"data.max_seq_len={s}")
                for b, s in (cell.split("x") for cell in args.grid.split(","))]
    env = dict(os.environ, FTTUI_HOME=tempfile.mkdtemp(prefix="fttui-forecast-"), OMP_NUM_THREADS="1",
               FTTUI_NO_APP="1")

    def sets(setting):
        return [x for kv in (*args.sets, *setting, f"train.max_steps={args.steps}") for x in ("--set", kv)]

    def estimate(setting):
        return json.loads(fttui("estimate", "--profile", args.profile, *sets(setting), "--json", env=env))["forecast"]

    def run(setting):
        fttui("run", "--profile", args.profile, *sets(setting), "--headless", env=env)
        row = json.loads(fttui("results", "--format", "json", "--limit", "1", env=env))
        return row[0] if isinstance(row, list) else row

    if args.warm:
        warm_env = dict(env, FTTUI_HOME=tempfile.mkdtemp(prefix="fttui-forecast-warm-"))
        fttui("run", "--profile", args.profile, *[x for kv in (*args.sets, *settings[0], "train.max_steps=5")
                                                  for x in ("--set", kv)], "--headless", env=warm_env)
    row = run(settings[0])
    print(f"{' '.join(settings[0]):40s} calibrating run: {row['duration_s']:.2f} s, step parts {row['step_fit']}",
          flush=True)
    one_row = {i: estimate(s) for i, s in enumerate(settings) if i}
    print(f"one-row calibration: {one_row[1]['mfu_source']}", flush=True)
    ratios = []
    for i, setting in enumerate(settings[1:], start=1):
        now = estimate(setting)
        row = run(setting)
        measured = float(row["duration_s"])
        first, later = one_row[i]["run_seconds"], now["run_seconds"]
        ratios.append(first / measured)
        print(f"{' '.join(setting):40s} forecast (1 row) {first:7.2f} s  (rows so far) {later:7.2f} s  "
              f"measured {measured:7.2f} s  ratio {first / measured:.2f} / {later / measured:.2f}  "
              f"step parts {row['step_fit']}", flush=True)
    if ratios:
        worst = max(abs(r - 1) for r in ratios)
        print(f"worst |forecast from the one calibrating row / measured - 1| over {len(ratios)} runs: {worst:.0%}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
