"""Cost of ``fttui run -- CMD``: a plain Trainer script run under fttui's supervisor against the same
script run plainly, alternated.

    .venv/bin/python bench/command_cost.py [--pairs 3] [--samples 3200] [--threads 1] [--out FILE]

Both sides run ``bench/plain_trainer.py`` (random Llama, LoRA r8 q/v, synthetic samples of 128
tokens, batch 8, fp32, CPU; no fttui import), with the same ``OMP_NUM_THREADS``:
  A  ``fttui run --headless -- python bench/plain_trainer.py ...``: supervisor, 2 Hz sampling of
     the process tree (VmHWM included), the log writer and its Trainer-log parser, fttui's
     callback injected into the Trainer by the sitecustomize hook, the headless view;
  B  ``python bench/plain_trainer.py ...``, nothing else.
Each side's figure is the script's own: its TrainerCallback's steady samples/s (first step
excluded), so what is compared is the command's speed, not how fttui measures it. The fttui
row's steady samples/s is printed beside it (the injected callback's figure: it should agree).
Pairs alternate A B, B A, ...; the ratio A / B per pair and the median (goal: >= 0.95). The bench
uses its own FTTUI_HOME under a temporary folder. Say the machine's load beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "plain_trainer.py"


def _env(threads: int, home: Path) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), CUDA_VISIBLE_DEVICES="", FTTUI_HOME=str(home),
               FTTUI_NO_APP="1")
    for k in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "FTTUI_FAKE_GPUS"):
        env.pop(k, None)
    return env


def _argv(samples: int, out: Path, home: Path) -> list[str]:
    return [sys.executable, str(SCRIPT), "--samples", str(samples), "--out-dir", str(home / "out"),
            "--json-out", str(out)]


def run_side(under_fttui: bool, home: Path, threads: int, samples: int) -> dict:
    out = home / ("fttui.json" if under_fttui else "plain.json")
    out.unlink(missing_ok=True)
    env = _env(threads, home)
    argv = _argv(samples, out, home)
    if under_fttui:
        argv = [sys.executable, "-m", "fttui", "run", "--headless", "--", *argv]
    proc = subprocess.run(argv, cwd=str(home), env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{'fttui' if under_fttui else 'plain'} run failed ({proc.returncode}): "
                           f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    res = json.loads(out.read_text())
    row = None
    if under_fttui:
        rows = json.loads(subprocess.run([sys.executable, "-m", "fttui", "results", "--json"], cwd=str(home),
                                         env=env, capture_output=True, text=True, check=True).stdout)
        row = max(rows, key=lambda r: r["started_at"] or "")
    return {"steady": res["steady_samples_per_s"], "whole": res["whole_samples_per_s"],
            "row_steady": None if row is None else row.get("samples_per_s"),
            "status": None if row is None else row.get("status")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--samples", type=int, default=3200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", help="also write the Markdown table here")
    a = ap.parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="fttui-command-cost-"))
    pairs = []
    try:
        for i in range(a.pairs):
            if i % 2 == 0:  # A B, then B A: a trend in the machine's load falls on both sides
                f = run_side(True, home, a.threads, a.samples)
                p = run_side(False, home, a.threads, a.samples)
            else:
                p = run_side(False, home, a.threads, a.samples)
                f = run_side(True, home, a.threads, a.samples)
            pairs.append((f, p))
            print(f"pair {i + 1}: fttui run -- CMD {f['steady']:.1f} samples/s (row {f['row_steady']}, "
                  f"{f['status']}), plain {p['steady']:.1f}, ratio {f['steady'] / p['steady']:.3f}", flush=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    ratios = [f["steady"] / p["steady"] for f, p in pairs]
    lines = [f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores", "",
             "| pair | under fttui (script's own steady samples/s) | fttui row | plain | ratio |",
             "| --- | --- | --- | --- | --- |"]
    for i, ((f, p), r) in enumerate(zip(pairs, ratios)):
        lines.append(f"| {i + 1} | {f['steady']:.1f} | {f['row_steady']} | {p['steady']:.1f} | {r:.3f} |")
    lines.append(f"| median | | | | {statistics.median(ratios):.3f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
