"""The estimator's model of a training step against the tensors the step really keeps (CPU).

    .venv/bin/python bench/estimate_tensors.py [--big]

For each setting of fttui.worker.memtrace.SETTINGS: one step of the worker's model measured
storage by storage and the estimate's model part (weights, gradients, optimizer states, LoRA,
quantisation, activations; the process baseline excluded), via memtrace.check_estimate.
``--big`` uses a 13M-parameter Llama (hidden 512, 4 layers, batch 16 x 512) instead of the test
size. Prints a Markdown table (docs/estimate.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "2")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from fttui.worker.memtrace import BIG_ARCH, SETTINGS, SMALL_ARCH, check_estimate  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", action="store_true")
    args = ap.parse_args()
    arch = BIG_ARCH if args.big else SMALL_ARCH
    print("| profile | settings | live tensors MiB | predicted MiB | error |")
    print("| --- | --- | --- | --- | --- |")
    errs = []
    for prof, sets in SETTINGS:
        t0 = time.time()
        c = check_estimate(prof, arch + sets)
        errs.append(abs(c["error"]))
        print(f"| {prof} | {' '.join(sets) or 'profile'} | {c['measured'] / 2**20:.1f} | "
              f"{c['predicted'] / 2**20:.1f} | {c['error']:+.1%} |", flush=True)
        print(f"  ({time.time() - t0:.1f} s; top at peak {c['top'][:4]})", file=sys.stderr)
    print(f"\nmax {max(errs):.1%}, mean {sum(errs) / len(errs):.1%} over {len(errs)} settings")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
