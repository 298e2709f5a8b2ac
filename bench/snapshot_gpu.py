"""What held a card's memory, checked on a real card (needs an NVIDIA GPU; not run by CI, NOT RUN
YET: no card was lent when it was written). ``bench/gpu_verify.sh OUT snapshot`` runs it.

    python bench/snapshot_gpu.py [--out DIR] [--batch 4] [--seq 1024] [--layers 32] [--limit SIZE]

1. A randomly initialised Llama-2-7B-shaped LoRA run (bf16, micro batch ``--batch`` x ``--seq``
   tokens) pushed over ``--gpu-memory-limit``: by default the estimate's weights and LoRA terms
   plus 85% of its activations (``fttui estimate --json``), so that the forward's saved
   activations fit and the backward runs out (an out of memory in the forward holds only the
   layers built so far: no match is expected there). It must end ``oom`` (CUDA) and leave
   ``memory_snapshot.pickle``; in the backward, the snapshot's activation bytes (forward +
   backward, fttui.core.run.row.oomheld) against the estimate's activations at the micro batch
   and the longest sequence fed (the ``forecast`` event's record, without the allocator's share):
   within 20% is the check. The row's ``oom_phase`` and ``oom_held`` are printed.
2. The recording's cost: the same model at micro batch 1 for 6 steps, with
   ``train.memory_history_steps`` 3 and 0; the mean step time of steps 2 and 3 (recorded in the
   first run, not in the second), the ratio printed.

Prints one JSON line per part (and appends them to DIR/snapshot_gpu.jsonl).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from fttui.core.run.files.events import ForecastEvent, StepEvent, read_events  # noqa: E402
from fttui.core.run.files.memsnap import read_snapshot, read_tensor_ranges  # noqa: E402
from fttui.core.run.files.rundir import RunDir  # noqa: E402
from fttui.core.run.row.oomexplain import oom_error  # noqa: E402
from fttui.core.run.row.oomheld import estimate_beside, summarise  # noqa: E402


def fttui_run(home: str, sets: list[str], extra: list[str]) -> RunDir:
    argv = [sys.executable, "-m", "fttui", "run", "--profile", "llama2-7b-lora", "--headless", *extra]
    for s in sets:
        argv += ["--set", s]
    env = {**os.environ, "FTTUI_HOME": home}
    subprocess.run(argv, cwd=ROOT, env=env, timeout=900, check=False)
    runs = sorted(os.listdir(os.path.join(home, "runs")))
    return RunDir(os.path.join(home, "runs", runs[-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--limit", default=None, help="default: the estimate's weights + LoRA + 85%% of activations")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=32)
    a = ap.parse_args()
    model = ["model.init=random", "precision=bf16", "devices.gpus=1", f"model.arch_config.num_hidden_layers={a.layers}"]
    out = []
    with tempfile.TemporaryDirectory() as home:
        data = [f"data.max_seq_len={a.seq}", "data.pad_to_max=true"]
        sets = [*model, *data, f"batch_size={a.batch}", "max_steps=3"]
        limit = a.limit
        if limit is None:
            argv = [sys.executable, "-m", "fttui", "estimate", "--profile", "llama2-7b-lora", "--json"]
            argv += [x for s in sets for x in ("--set", s)]
            est = json.loads(subprocess.run(argv, cwd=ROOT, env={**os.environ, "FTTUI_HOME": home},
                                            capture_output=True, text=True, check=True).stdout)["breakdown"]
            mib = (est["weights"] + est["lora"] + est["quantisation"] + 0.85 * est["activations"]) / 2**20
            limit = f"{int(mib)}MiB"
        rd = fttui_run(home, sets, ["--gpu-memory-limit", limit])
        events = read_events(rd.events_path)
        snap = read_snapshot(rd.snapshot_path)
        row = rd.row() or {}
        res: dict = {"part": "snapshot", "limit": limit, "status": row.get("status"), "oom_kind": row.get("oom_kind"),
                     "oom_phase": row.get("oom_phase"), "snapshot": snap is not None}
        if snap is not None:
            held = summarise(snap, read_tensor_ranges(rd.tensors_path))
            mem = next((e.memory for e in events if isinstance(e, ForecastEvent)), None)
            err = oom_error(events)
            beside = estimate_beside(mem, a.batch, (err.longest_seq if err else None) or a.seq)
            acts = held.by_category.get("activations", 0) + held.by_category.get("backward", 0)
            est = beside.get("activations") or 0
            res.update(by_category=held.by_category, estimate=beside, activations_held=acts,
                       activations_estimate=est, error=(est - acts) / acts if acts else None,
                       within_20pct=(bool(acts) and abs(est - acts) <= 0.2 * acts) if row.get("oom_phase") == "backward"
                       else "not comparable: the out of memory was not in the backward",
                       oom_held=row.get("oom_held"))
        out.append(res)
        print(json.dumps(res), flush=True)
        times = {}
        for k in (3, 0):
            rd = fttui_run(home, [*model, "data.max_seq_len=512", "batch_size=1", "max_steps=6",
                                  f"train.memory_history_steps={k}"], [])
            steps = {e.step: e.step_time for e in read_events(rd.events_path) if isinstance(e, StepEvent)}
            got = [steps.get(i) for i in (2, 3)]
            times[k] = sum(got) / 2 if all(isinstance(x, float) for x in got) else None
        cost = {"part": "cost", "step_s_recorded": times[3], "step_s_off": times[0],
                "ratio": times[3] / times[0] if times[3] and times[0] else None}
        out.append(cost)
        print(json.dumps(cost), flush=True)
    with open(os.path.join(a.out, "snapshot_gpu.jsonl"), "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
