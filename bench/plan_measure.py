"""The measured ranking (``fttui plan --measure``, issue 43 item 1) against a brute force.

    .venv/bin/python bench/plan_measure.py [--reps 5] [--steps 20] [--busy 2] [--seq 512] [--out FILE]

tiny-lora on 2 CPU ranks, effective batch 8, the grid {none, zero2, fsdp} x micro batch {2, 4} x
checkpointing off/on (12 setups, all fitting), each repetition in two fresh ``FTTUI_HOME``s (no
stored row: the uncalibrated forecast, which does not tell the shardings apart):

- **measured**: :func:`fttui.core.experiments.measured.measure` over the grid in forecast order,
  with its early stop (what ``fttui plan --measure N`` runs); its wall time, launches included;
- **brute force**: the same trials of every setup (the stop turned off: ``noise=1``), each
  setup's measured step (a warm-up step, then ``--steps`` timed, the median).

Checked per repetition: the setup the measured plan picked has a brute-force step within 5% of
the best brute-force step, and the measured plan's wall time is at most half the brute force's.
Over the repetitions: how often the same winner came out. ``--busy N`` runs N busy-looping
processes beside it (the issue's check: two). Each phase runs in a subprocess of its own, with
``OMP_NUM_THREADS=1``. Say the machine's load beside the figures.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRID_SHARDINGS = ("none", "zero2", "fsdp")
GRID_MICRO = (2, 4)


def _spin(stop) -> None:  # a busy process
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def phase(kind: str, steps: int, seq: int) -> dict:
    """One phase in this process (its FTTUI_HOME fresh): the grid measured, or brute-forced."""
    from fttui.core.experiments.measured import NOISE, measure, rerank
    from fttui.core.experiments.planning import machine_budget, run_plan
    from fttui.core.profiles import apply_overrides, load_profile

    t0 = time.monotonic()
    prof = apply_overrides(load_profile("tiny-lora"), ["devices.cpu_processes=2", f"data.max_seq_len={seq}"])
    budget = machine_budget(prof, gpus=0)
    options = run_plan(prof, budget, effective_batch=8, methods=["lora"])
    grid = [o for o in options if o.fits and o.sharding in GRID_SHARDINGS and o.batch_size in GRID_MICRO]
    trials, why = measure(prof, grid, budget, steps, noise=NOISE if kind == "measured" else 1.0)
    wall = time.monotonic() - t0
    ranked = [t for t in rerank(trials) if t.measured]
    return {
        "phase": kind,
        "wall_s": round(wall, 2),
        "grid": len(grid),
        "trials": [t.to_dict() for t in trials],
        "stopped": why,
        "winner": ranked[0].setup if ranked else None,
    }


def _run_phase(kind: str, args) -> dict:
    home = tempfile.mkdtemp(prefix=f"fttui-bench-{kind}-")
    env = dict(os.environ, FTTUI_HOME=home, OMP_NUM_THREADS="1", FTTUI_NO_APP="1", CUDA_VISIBLE_DEVICES="")
    env.pop("FTTUI_FAKE_GPUS", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, __file__, "--phase", kind, "--steps", str(args.steps), "--seq", str(args.seq)]
    with tempfile.TemporaryDirectory() as cwd:
        r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"{kind} phase failed ({r.returncode}): {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    # long enough that the timed steps, not the launches, decide (5 steps of 0.05 s at 128 tokens
    # were within the machine's noise of each other: docs/plan.md)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per trial (after one warm-up step)")
    ap.add_argument("--seq", type=int, default=512, help="the samples' length (the longest real batch)")
    ap.add_argument("--busy", type=int, default=0, help="busy-looping processes beside it (the issue's: 2)")
    ap.add_argument("--out", help="append each repetition's JSON here")
    ap.add_argument("--phase", choices=("measured", "brute"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(phase(args.phase, args.steps, args.seq)))
        return 0
    stop = multiprocessing.Event()
    busy = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(args.busy)]
    for p in busy:
        p.start()
    winners: list[str | None] = []
    try:
        for rep in range(args.reps):
            measured = _run_phase("measured", args)
            brute = _run_phase("brute", args)
            rates = {t["setup"]: t["measured_step_s"] for t in brute["trials"] if t["measured_step_s"]}
            best = min(rates.values()) if rates else None
            picked = rates.get(measured["winner"] or "")
            within = None if best is None or picked is None else picked / best - 1
            rep_out = {
                "rep": rep + 1,
                "busy": args.busy,
                "load": os.getloadavg(),
                "measured_wall_s": measured["wall_s"],
                "brute_wall_s": brute["wall_s"],
                "wall_share": round(measured["wall_s"] / brute["wall_s"], 3),
                "measured_trials": len(measured["trials"]),
                "grid": brute["grid"],
                "stopped": measured["stopped"],
                "picked": measured["winner"],
                "best": min(rates, key=lambda k: rates[k]) if rates else None,
                "picked_over_best": None if within is None else round(within, 4),
                "within_5pct": within is not None and within <= 0.05,
                "at_most_half": measured["wall_s"] <= 0.5 * brute["wall_s"],
                "brute_steps": rates,
                "measured": measured["trials"],
            }
            winners.append(measured["winner"])
            print(json.dumps({k: v for k, v in rep_out.items() if k not in ("brute_steps", "measured")}), flush=True)
            if args.out:
                with open(args.out, "a", encoding="utf-8") as f:
                    f.write(json.dumps(rep_out) + "\n")
    finally:
        stop.set()
        for p in busy:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
    same = max((winners.count(w) for w in set(winners)), default=0)
    print(f"same winner {same} of {len(winners)}: {sorted(set(map(str, winners)))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
