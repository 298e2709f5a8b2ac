"""Does a resume's load peak exceed the run's own peak? (issue 44, item 3), on CPU ranks (gloo).

    python bench/resume_peak.py [--shardings none,zero2,zero3,fsdp] [--ranks 2] [--hidden 512]

For each sharding: ``fttui run`` of tiny-full widened (hidden ``--hidden``, intermediate 2.7x,
4 layers: about 13M parameters at 512) over ``--ranks`` CPU ranks for 4 steps with a checkpoint
every 2 (``save = "steps"``), then ``fttui run --resume`` of it (the latest checkpoint, the last
step's: the resumed run loads it and trains no step). Per rank, from the events:

- ``begin``: the rank's VmHWM when training began in the first run (its startup and model);
- ``train``: its VmHWM at the last step of the first run (the run's own peak);
- ``resume``: its VmHWM when training began in the resumed run: startup, model and the
  checkpoint's load (the start event's ``begin_peak_rss_mb``, taken at ``on_train_begin``, after the
  Trainer loaded the weights and the optimizer's states).

``resume > train`` means the load's peak exceeds the run's own. The saves, on the lowest rank
(the rank that writes: its ``save`` events carry its VmHWM once the save is done):

- ``ckpt save``: the checkpoint of step 2's VmHWM less step 2's (0: the save stayed below the
  training's peak; steps of synthetic data are all alike);
- ``final save``: the final model's (``save_model`` after training) less the run's last step's.

Prints a Markdown table (MiB, per rank) with the estimate's resume term for the setup beside it
(``fttui estimate --json``'s ``resume``, fttui.core.memory.resume: the worst rank's load peak less
its training peak, both without the process's own baseline, so only the difference compares).
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

from fttui.core.run.files.events import SaveEvent, StartEvent, StepEvent, read_events  # noqa: E402


def fttui(home: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FTTUI_HOME": home, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "fttui", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900, check=False)


def latest_run(home: str) -> str:
    runs = sorted(os.listdir(os.path.join(home, "runs")), key=lambda r: os.path.getmtime(os.path.join(home, "runs", r)))
    return os.path.join(home, "runs", runs[-1])


def per_rank(run_dir: str) -> tuple[dict[int, float], dict[int, float], dict[str, float]]:
    """Each rank's VmHWM when training began and at its last step; the lowest rank's saves
    (``ckpt``: the first checkpoint's VmHWM less its step's, ``final``: the final model's less the
    last step's)."""
    begin, last, at_step, saves = {}, {}, {}, {}
    for e in read_events(os.path.join(run_dir, "events.jsonl")):
        if isinstance(e, StartEvent) and e.begin_peak_rss_mb is not None and e.rank is not None:
            begin[e.rank] = e.begin_peak_rss_mb
        if isinstance(e, StepEvent) and e.peak_rss_mb is not None and e.rank is not None:
            last[e.rank] = max(last.get(e.rank, 0.0), e.peak_rss_mb)
            if e.rank == 0 and e.step is not None:
                at_step[e.step] = e.peak_rss_mb
        if isinstance(e, SaveEvent) and e.peak_rss_mb is not None and e.step is not None:
            if e.kind == "checkpoint" and "ckpt" not in saves and e.step in at_step:
                saves["ckpt"] = e.peak_rss_mb - at_step[e.step]
            elif e.kind == "model" and 0 in last:
                saves["final"] = e.peak_rss_mb - last[0]
    return begin, last, saves


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shardings", default="none,zero2,zero3,fsdp")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=512)
    a = ap.parse_args()
    inter = int(a.hidden * 2.6875)
    print("| sharding | rank | begin | train (the run's peak) | ckpt save - its step | final save - train | "
          "resume (after the load) | resume - train | resume - begin | estimate: resume - train (its rank) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for sharding in a.shardings.split(","):
        sets = [f"sharding={sharding}", f"devices.cpu_processes={a.ranks}", "train.save=steps", "train.save_steps=2",
                "max_steps=4", "data.source=synthetic", "data.num_samples=64", "data.max_seq_len=128",
                f"model.arch_config.hidden_size={a.hidden}", f"model.arch_config.intermediate_size={inter}",
                "model.arch_config.num_hidden_layers=4", "model.arch_config.num_attention_heads=8",
                "model.arch_config.num_key_value_heads=8"]
        with tempfile.TemporaryDirectory() as home:
            flags = [x for s in sets for x in ("--set", s)]
            est = fttui(home, "estimate", "--profile", "tiny-full", *flags, "--json")
            first = fttui(home, "run", "--profile", "tiny-full", *flags, "--headless")
            rd1 = latest_run(home)
            if first.returncode != 0:
                print(f"| {sharding} | first run failed ({first.returncode}): {first.stdout[-300:]!r} |")
                continue
            resumed = fttui(home, "run", "--resume", os.path.basename(rd1), "--headless")
            rd2 = latest_run(home)
            if resumed.returncode != 0 or rd2 == rd1:
                print(f"| {sharding} | resume failed ({resumed.returncode}): {resumed.stdout[-300:]!r} |")
                continue
            b1, t1, saves = per_rank(rd1)
            b2, _, _ = per_rank(rd2)
            said = "-"
            try:
                res = json.loads(est.stdout).get("resume") or {}
                said = f"{(res['peak'] - res['train_peak']) / 2**20:+.0f} ({res['rank']})"
            except (ValueError, KeyError, TypeError):
                pass
            for r in sorted(b1):
                tr = t1.get(r)
                rs = b2.get(r)
                d = f"{rs - tr:+.0f}" if rs is not None and tr is not None else "-"
                db = f"{rs - b1[r]:+.0f}" if rs is not None else "-"
                ck, fin = (f"{saves[k]:+.0f}" if r == 0 and k in saves else "-" for k in ("ckpt", "final"))
                print(f"| {sharding} | {r} | {b1[r]:.0f} | {tr if tr is None else f'{tr:.0f}'} | {ck} | {fin} | "
                      f"{rs if rs is None else f'{rs:.0f}'} | {d} | {db} | {said} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
