"""Cost of fttui's reporting API outside fttui: one ``fttui.report_step`` call per step of a loop
that runs without ``fttui run`` (``FTTUI_RUN_DIR`` unset), against the same loop without the call.

    .venv/bin/python bench/report_cost.py [--calls 1000000] [--repeat 7]

Both loops run ``--calls`` iterations; the cost per call is the difference of their best times
(of ``--repeat``) divided by the calls. The call is the one a loop writes
(``fttui.report_step(step, samples=8, tokens=2048, loss=loss)``, the attribute read through the
``fttui`` module included). Goal: under 1 microsecond a call (issue 42). Say the machine and its
load beside the figure.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

os.environ.pop("FTTUI_RUN_DIR", None)  # outside fttui

import fttui  # noqa: E402


def _with_call(n: int) -> float:
    loss = 0.5
    t0 = time.perf_counter()
    for step in range(1, n + 1):
        fttui.report_step(step, samples=8, tokens=2048, loss=loss)
    return time.perf_counter() - t0


def _without(n: int) -> float:
    loss = 0.5
    t0 = time.perf_counter()
    for step in range(1, n + 1):
        _ = (step, 8, 2048, loss)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    if args.calls < 1 or args.repeat < 1:
        print("report_cost: --calls and --repeat must be 1 or more", file=sys.stderr)
        return 2
    fttui.report_step(0)  # the lazy import, outside the timing
    with_call = min(_with_call(args.calls) for _ in range(args.repeat))
    without = min(_without(args.calls) for _ in range(args.repeat))
    per_call_ns = (with_call - without) / args.calls * 1e9
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")
    print(f"loop with the call: {with_call / args.calls * 1e9:.0f} ns an iteration; "
          f"without: {without / args.calls * 1e9:.0f} ns (best of {args.repeat}, {args.calls:,} iterations)")
    print(f"fttui.report_step outside fttui: {per_call_ns:.0f} ns a call (goal < 1000 ns)")
    return 0 if per_call_ns < 1000 else 1


if __name__ == "__main__":
    sys.exit(main())
