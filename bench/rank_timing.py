"""The slow rank and where a hang is (issue 39), measured: what the rank timing costs, and how
often the straggler is named right and wrongly.

    .venv/bin/python bench/rank_timing.py cost [--pairs 5] [--steps 300]
    .venv/bin/python bench/rank_timing.py named [--repeat 3] [--busy 2]

``cost``: tiny-lora on 2 CPU ranks (DDP over gloo) for ``--steps`` steps, with the rank timing on
(the default: collectives timed, the flight recorder on, the answering thread) and off
(``FTTUI_RANK_TIMING=0``), alternated on / off ``--pairs`` times; each run's steady samples/s from
its row, the ratio on / off per pair, the median ratio and the spread (goal: median >= 0.98).

``named``: 4 CPU ranks of tiny-lora beside ``--busy`` busy processes (a loop each), ``--repeat``
times each: (a) unslowed, 100 steps: the row's straggler (goal: none); (b) rank 3 slowed from
outside (SIGSTOP for 40% of every 0.5 s), 100 steps: the step at which the fold first named rank 3
(goal: within 20 steps of the slowing) and the row's straggler.

Each run writes its own FTTUI_HOME under a temporary folder. Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _fttui(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ, FTTUI_HOME=str(home), **(env or {}))
    return subprocess.run([sys.executable, "-m", "fttui", *args], cwd=ROOT, env=e, capture_output=True, text=True)


def _row(home: Path, run_id: str) -> dict:
    rows = json.loads(_fttui(home, "results", "--kind", "all", "--json").stdout)
    return next(r for r in rows if r["run_id"] == run_id)


def _events(run_dir: Path) -> list[dict]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def cost(pairs: int, steps: int) -> None:
    ratios = []
    for i in range(pairs):
        rates = {}
        for side, env in (("on", {}), ("off", {"FTTUI_RANK_TIMING": "0"})):
            with tempfile.TemporaryDirectory() as tmp:
                home = Path(tmp)
                proc = _fttui(home, "run", "--profile", "tiny-lora", "--headless", "--set", "devices.gpus=0",
                              "--set", "devices.cpu_processes=2", "--set", f"train.max_steps={steps}", env=env)
                run_id = next(ln.split()[1].rstrip(":") for ln in proc.stdout.splitlines() if ln.startswith("run "))
                rates[side] = _row(home, run_id)["samples_per_s"]
        ratios.append(rates["on"] / rates["off"])
        print(f"pair {i + 1}: on {rates['on']:.1f} samples/s, off {rates['off']:.1f} samples/s, "
              f"ratio {ratios[-1]:.3f}", flush=True)
    print(f"median ratio on/off {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}, "
          f"{pairs} pairs, {steps} steps each)")


def _slow(pid: int, stop: threading.Event, duty: float = 0.4, period: float = 0.5) -> None:
    while not stop.is_set():
        try:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(period * duty)
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            return
        time.sleep(period * (1 - duty))


def _one(slowed: bool, steps: int) -> tuple[int | None, str | None]:
    from fttui.core.run.files.events import read_events
    from fttui.core.run.fold.state import RunState

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        proc = _fttui(home, "run", "--profile", "tiny-lora", "--detach", "--set", "devices.gpus=0",
                      "--set", "devices.cpu_processes=4", "--set", f"train.max_steps={steps}")
        run_id = proc.stdout.strip().splitlines()[-1]
        run_dir = home / "runs" / run_id
        pids: dict[int, int] = {}
        while len(pids) < 4:
            pids = {e["rank"]: e["pid"] for e in _events(run_dir) if e.get("event") == "start"}
            time.sleep(0.2)
        first = max([e.get("step", 0) for e in _events(run_dir) if e.get("event") == "step"] or [0])
        stop = threading.Event()
        if slowed:
            threading.Thread(target=_slow, args=(pids[3], stop), daemon=True).start()
        while not (run_dir / "status.json").exists():
            time.sleep(0.5)
        stop.set()
        named_at = None
        st = RunState()
        for ev in read_events(run_dir / "events.jsonl"):
            st.apply(ev)
            skew = st.skew.now()
            if named_at is None and skew is not None and skew.rank == 3:
                named_at = st.progress.step() - first
        row = _row(home, run_id)
        return named_at, row.get("straggler")


def named(repeat: int, busy: int) -> None:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        for i in range(repeat):
            _, row = _one(False, 100)
            print(f"unslowed {i + 1}: row straggler {row!r}", flush=True)
            at, row = _one(True, 100)
            print(f"slowed {i + 1}: rank 3 named {at} steps after the slowing began; row {row!r}", flush=True)
    finally:
        for h in hogs:
            h.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("cost")
    c.add_argument("--pairs", type=int, default=5)
    c.add_argument("--steps", type=int, default=300)
    n = sub.add_parser("named")
    n.add_argument("--repeat", type=int, default=3)
    n.add_argument("--busy", type=int, default=2)
    args = ap.parse_args()
    if args.what == "cost":
        cost(args.pairs, args.steps)
    else:
        named(args.repeat, args.busy)


if __name__ == "__main__":
    main()
