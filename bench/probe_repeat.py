"""The same value in N fresh processes of the probe's verdict path: the same verdict every time?

Each process is one model load and exactly one trial under the profile's host-memory budget:
by default the probe's verdict trial (``Prober._launch``: a launch of the command ``fttui run``
starts, as tests/e2e/test_oom_probe.py's fresh_trial does); with ``--worker`` the probe worker's
fresh trial (``Prober._load``: the first model load of a one-process probe). Prints one line per
process (verdict, headroom, peak address space and the limit) and the counts per value.

    .venv/bin/python bench/probe_repeat.py --profile tiny-lora --param max_seq_len \\
        --limit 48MiB --values 274,275 --n 10 [--parallel 2] [--worker]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from fttui.core.base import paths
from fttui.core.base.constants import PROBE_STEPS
from fttui.core.experiments.probe import Prober
from fttui.core.profiles import Profile, load_profile
from fttui.core.run.files.events import read_jsonl


def one(resolved: Profile, param: str, value: int, steps: int, worker: bool = False) -> dict:
    p = Prober(resolved, param=param, lo=value, hi=value, steps=steps)
    try:
        res = p._load(value, "add", value - 1 if value > 1 else None, None) if worker else p._launch(value)
    finally:
        p._kill()
    events = read_jsonl(paths.runs_dir() / f"{p.probe_id}-load1" / "events.jsonl")
    if worker:
        start = next(e for e in events if e.get("event") == "probe_start")
        trial = next(e for e in events if e.get("event") == "trial")
        return {"value": value, "status": trial["status"], "headroom_mb": trial.get("headroom_mb"),
                "vm_peak_mb": trial.get("peak_host_vm_mb"),
                "limit_mb": round(start["limits"]["rlimit_as_bytes"] / 2**20, 2),
                "vm_base_mb": round(start["limits"]["vm_base_bytes"] / 2**20, 3)}
    t = res["trials"][0]
    steps_ev = [e for e in events if e.get("event") == "step"]
    return {"value": value, "status": t.status, "headroom_mb": t.headroom_mb,
            "vm_peak_mb": max((e.get("peak_vm_mb") or 0 for e in steps_ev), default=None),
            "limit_mb": next((e.get("vm_limit_mb") for e in steps_ev), None), "steps": t.steps}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="tiny-lora")
    ap.add_argument("--param", default="batch_size", choices=["batch_size", "max_seq_len"])
    ap.add_argument("--limit", default="48MiB")
    ap.add_argument("--values", required=True, help="comma-separated values, e.g. 274,275")
    ap.add_argument("--n", type=int, default=10, help="fresh processes per value")
    ap.add_argument("--steps", type=int, default=PROBE_STEPS, help=f"optimizer steps a trial (default {PROBE_STEPS}, the probe's)")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--worker", action="store_true", help="the probe worker's fresh trial, not the verdict launch")
    ns = ap.parse_args()
    os.environ.setdefault("FTTUI_HOME", tempfile.mkdtemp(prefix="fttui-probe-repeat-"))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    resolved = load_profile(ns.profile, [f"limits.host_memory={json.dumps(ns.limit)}"])
    values = [int(v) for v in ns.values.split(",")]
    jobs = [v for _ in range(ns.n) for v in values]  # interleaved: the machine's load hits both alike
    counts: Counter = Counter()
    with ThreadPoolExecutor(max_workers=ns.parallel) as ex:
        for r in ex.map(lambda v: one(resolved, ns.param, v, ns.steps, ns.worker), jobs):
            counts[(r["value"], r["status"])] += 1
            print(json.dumps(r), flush=True)
    for v in values:
        print(f"{ns.param}={v}: fit {counts[(v, 'fit')]}, OOM {counts[(v, 'oom')]} of {ns.n} fresh processes"
              + (" (probe worker)" if ns.worker else " (the run's command)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
