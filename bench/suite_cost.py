"""What each test of the suite costs in CPU seconds, whatever the machine's load.

pytest puts ``PYTEST_CURRENT_TEST`` in the environment of every process a test starts, detached
supervisors and their workers included. This sampler reads every process's environment and CPU
time twice a second and charges each process's own CPU time to the test named there; at the end
(Ctrl-C, or when the pytest processes are gone) it prints the tests by cost and the total.

    python bench/suite_cost.py --out cost.txt &      # then run the suite (scripts/test.sh)

A process that ends between two samples loses at most half a second of its time; a process whose
test is over keeps charging that test (a daemon that outlives its test shows up that way).
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from collections import defaultdict

import psutil


def _test_of(proc: psutil.Process, only: tuple[str, str] | None) -> str | None:
    try:
        env = proc.environ()
    except (psutil.Error, OSError):
        return None
    name = env.get("PYTEST_CURRENT_TEST")
    if only is not None and only[1] not in env.get(only[0], ""):
        return None
    return name.rsplit(" (", 1)[0] if name else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="file for the per-test costs")
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--only", metavar="KEY=TEXT", help="only processes whose environment's KEY contains TEXT "
                    "(one suite among several pytest runs, e.g. PYTHONPATH=my-checkout)")
    ap.add_argument("--wait", type=float, default=600, help="seconds to wait for pytest to start")
    args = ap.parse_args()
    only = tuple(args.only.split("=", 1)) if args.only else None
    seen: dict[tuple[int, float], tuple[str, float]] = {}  # (pid, start) -> (test, cpu)
    stop = False

    def _stop(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    started = time.time()
    had_tests = False
    last_write = time.time()
    while not stop:
        live = False
        for proc in psutil.process_iter(["pid", "create_time", "cmdline"]):
            key = (proc.info["pid"], proc.info["create_time"])
            if key in seen:
                test = seen[key][0]
            else:
                test = _test_of(proc, only)
                if test is None:
                    continue
            try:
                t = proc.cpu_times()
            except psutil.Error:
                continue
            seen[key] = (test, t.user + t.system)
            live = True
        had_tests = had_tests or live
        alive = any("pytest" in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"]))
        if (had_tests and not alive) or (not had_tests and time.time() - started > args.wait):
            break
        if time.time() - last_write > 30:  # the figures so far, readable while the suite runs
            _write(args.out, seen)
            last_write = time.time()
        time.sleep(args.interval)
    _write(args.out, seen)
    return 0


def _write(out: str, seen: dict[tuple[int, float], tuple[str, float]]) -> None:
    cost: dict[str, float] = defaultdict(float)
    for test, cpu in seen.values():
        cost[test] += cpu
    with open(out + ".tmp", "w") as f:
        for test, cpu in sorted(cost.items(), key=lambda kv: -kv[1]):
            f.write(f"{cpu:9.1f} {test}\n")
        f.write(f"{sum(cost.values()):9.1f} TOTAL ({len(cost)} tests)\n")
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    raise SystemExit(main())
