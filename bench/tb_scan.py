"""Cost of looking for a command's TensorBoard event files: one look of fttui's follower
(``fttui.core.run.supervising.tbfollow``, breadth first, at most 2,000 folders) through a
generated tree of ``--wide`` x ``--deep`` folders with a file in each and no event file, the
worst case of a command whose folder holds no log (the follower keeps looking).

    .venv/bin/python bench/tb_scan.py [--wide 40] [--deep 50] [--repeat 7]

Prints the best and the median of ``--repeat`` looks, and the share of one CPU at the slowest
rate of looks (every 30 s). Say the machine and its load beside the figure.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from fttui.core.run.supervising import tbfollow
from fttui.core.run.supervising.tbfollow import TbFollower


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wide", type=int, default=40)
    ap.add_argument("--deep", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    if min(args.wide, args.deep, args.repeat) < 1:
        print("tb_scan: --wide, --deep and --repeat must be 1 or more", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i in range(args.wide):
            for j in range(args.deep):
                folder = root / f"d{i}" / f"e{j}"
                folder.mkdir(parents=True)
                (folder / "data.txt").write_text("x")
        follower = TbFollower(root, since=time.time())
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            follower.poll(time.time(), force=True)
            times.append(time.perf_counter() - t0)
    times.sort()
    best, median = times[0], times[len(times) // 2]
    n = 1 + args.wide + args.wide * args.deep
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, load {load:.1f}")
    print(f"one look through {min(n, tbfollow.MAX_DIRS):,} of {n:,} folders: best {best * 1000:.1f} ms, "
          f"median {median * 1000:.1f} ms (of {args.repeat})")
    print(f"at one look every {tbfollow.SCAN_MAX_S:.0f} s: {median / tbfollow.SCAN_MAX_S * 100:.2f}% of a CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
