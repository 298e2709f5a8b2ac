"""fttui's OOM-boundary probe against accelerate's ``find_executable_batch_size``.

    .venv/bin/python bench/probe_vs_accelerate.py --out bench-probe.md

For each host-memory limit (default 120MiB, 220MiB, 400MiB on the CPU profile tiny-full,
2 training steps per trial), three things run on the same model, the same limit rule and the same
Hugging Face Trainer set-up:

  fttui      ``fttui probe --param batch_size --range 1..1024 --json`` (one subprocess, timed).
  accelerate a fresh worker-like process (this file with ``--accelerate-worker``): the same
             ``fttui.worker.train.setup`` (training stack imported, RLIMIT_AS = virtual size after
             imports + the limit, the same malloc environment as a probe worker), one model load,
             then accelerate's ``find_executable_batch_size`` (start at 128; after each
             out-of-memory error its default multiplies by 0.9, older releases halved: both are
             run) around a function that trains the same N steps with
             ``fttui.worker.train.make_trainer`` on the same worst-case synthetic samples.
  truth      a one-by-one scan in fresh processes (one model load and one trial each, the probe
             worker) of every value from (fttui's largest fit - 1) to (its smallest OOM + 1), plus
             accelerate's answer and the value above it: the true boundary is the largest value
             that fits in a fresh process with the next one failing.

Prints a Markdown table and writes it to --out. Runs in its own FTTUI_HOME (a temporary folder
unless --home is given), so the user's results store is left alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------
# accelerate side (runs in its own process; imports the training stack)
def accelerate_worker(profile_path: str, run_dir: str, steps: int, start: int, reduce: str) -> int:
    import gc

    from accelerate.utils import find_executable_batch_size

    from fttui.worker.data import SyntheticDataset
    from fttui.worker.probe import trial_profile
    from fttui.worker.train import Emitter, make_trainer, setup

    t0 = time.perf_counter()
    from fttui.core.profiles.stored import stored_profile

    profile = stored_profile(json.loads(Path(profile_path).read_text()))
    state = {"rank": 0, "emit": Emitter(os.path.join(run_dir, "events.jsonl"), 0), "counters": None}
    su = setup(run_dir, state, profile=profile)
    loaded = time.perf_counter()
    vocab = su.model.get_input_embeddings().num_embeddings
    trials: list[dict] = []

    state_bs = {"bs": start}

    def halve() -> int:  # what accelerate did before it switched to x0.9
        state_bs["bs"] //= 2
        return state_bs["bs"]

    @find_executable_batch_size(starting_batch_size=start, reduce_batch_size_fn=halve if reduce == "half" else None)
    def train(batch_size):
        prof = trial_profile(su.profile, "batch_size", batch_size, steps)
        ds = SyntheticDataset(int(prof.data.num_samples), int(prof.data.max_seq_len), vocab, int(prof.train.seed))
        trials.append({"value": batch_size, "status": "oom"})
        trainer = make_trainer(su, prof, ds, [])
        try:
            trainer.train()
        finally:  # what run_trial does between trials: drop the optimizer state and gradients
            trainer.optimizer = None
            trainer.lr_scheduler = None
            del trainer
            su.model.zero_grad(set_to_none=True)
            gc.collect()
        trials[-1]["status"] = "fit"
        return batch_size

    try:
        answer = train()
        error = None
    except Exception as exc:  # not an error accelerate recognises as an OOM, or nothing fits
        answer, error = None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    print("RESULT " + json.dumps({"answer": answer, "trials": trials, "error": error,
                                  "setup_s": round(loaded - t0, 2), "search_s": round(time.perf_counter() - loaded, 2)}),
          flush=True)
    return 0


# ---------------------------------------------------------------------------------------------
# orchestration (imports fttui.core only)
def _child_env(resolved: dict) -> dict[str, str]:
    from fttui.core.run.launching import launch

    env = dict(os.environ)
    env.update(launch.child_env(resolved))
    env.setdefault("MALLOC_MMAP_THRESHOLD_", "131072")  # as fttui.core.experiments.probe.Prober._load
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_fttui_probe(profile: str, limit: str, steps: int, rng: str) -> tuple[dict, float]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "fttui", "probe", "--profile", profile, "--host-memory-limit", limit,
                        "--range", rng, "--steps", str(steps), "--json"], cwd=ROOT, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 1):
        raise SystemExit(f"fttui probe failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return json.loads(p.stdout), wall


def run_accelerate(resolved: dict, steps: int, start: int, work: Path, reduce: str) -> tuple[dict, float]:
    work.mkdir(parents=True, exist_ok=True)
    prof_path = work / "profile.json"
    prof_path.write_text(json.dumps(resolved))
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--accelerate-worker", str(prof_path),
                        "--run-dir", str(work), "--steps", str(steps), "--start", str(start), "--reduce", reduce],
                       cwd=ROOT, env=_child_env(resolved), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=3600)
    wall = time.perf_counter() - t0
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        return {"answer": None, "trials": [], "error": f"exit {p.returncode}: {p.stderr.strip()[-300:]}"}, wall
    return json.loads(line[len("RESULT "):]), wall


def fresh_trial(resolved: dict, value: int, steps: int) -> str:
    """One trial of batch_size=value in a fresh probe-worker process (one model load): fit | oom."""
    from fttui.core.experiments.probe import Prober

    p = Prober(resolved, param="batch_size", lo=value, hi=value, steps=steps)
    try:
        # --lo-fit value-1: the worker runs exactly one trial (no guide trials below it).
        res = p._load(value, "add", value - 1 if value > 1 else None, None)
    finally:
        p._kill()
    statuses = [t.status for t in res["trials"] if t.value == value]
    if res.get("model_oom"):
        return "oom"
    return statuses[0] if statuses else "none"


def true_boundary(resolved: dict, values: list[int], steps: int, jobs: int) -> tuple[int | None, dict[int, str]]:
    values = sorted({v for v in values if v >= 1})
    with ThreadPoolExecutor(max_workers=jobs) as ex:
        out = dict(zip(values, ex.map(lambda v: fresh_trial(resolved, v, steps), values)))
    fits = [v for v, s in out.items() if s == "fit"]
    ooms = [v for v, s in out.items() if s == "oom"]
    b = max((v for v in fits if v + 1 in ooms), default=None)
    if b is not None and (any(v > b for v in fits) or any(v <= b for v in ooms)):
        b = None  # not monotone: no single boundary
    return b, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="tiny-full")
    ap.add_argument("--limits", default="120MiB,220MiB,400MiB", help="host-memory limits, comma separated")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--range", default="1..1024", dest="rng")
    ap.add_argument("--start", type=int, default=128, help="accelerate's starting batch size (its default 128)")
    ap.add_argument("--jobs", type=int, default=2, help="fresh-process scan processes at a time")
    ap.add_argument("--out", help="write the Markdown table here")
    ap.add_argument("--home", help="FTTUI_HOME for the benchmark (default: a temporary folder)")
    ap.add_argument("--accelerate-worker", metavar="PROFILE_JSON", help=argparse.SUPPRESS)
    ap.add_argument("--run-dir", help=argparse.SUPPRESS)
    ap.add_argument("--reduce", choices=["0.9", "half"], default="0.9", help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    if ns.accelerate_worker:
        return accelerate_worker(ns.accelerate_worker, ns.run_dir, ns.steps, ns.start, ns.reduce)

    home = Path(ns.home) if ns.home else Path(tempfile.mkdtemp(prefix="fttui-bench-"))
    os.environ["FTTUI_HOME"] = str(home)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from fttui.core.profiles import load_profile

    headers = ["host limit", "true boundary", "method", "answer", "exact", "trials (values tried)", "model loads",
               "wall s"]
    rows = []
    for limit in [x.strip() for x in ns.limits.split(",") if x.strip()]:
        resolved = load_profile(ns.profile, [f"limits.host_memory={json.dumps(limit)}"])
        print(f"[{limit}] fttui probe ...", file=sys.stderr, flush=True)
        f, f_wall = run_fttui_probe(ns.profile, limit, ns.steps, ns.rng)
        print(f"[{limit}] fttui: largest fit {f['largest_fit']}, smallest OOM {f['smallest_oom']}, "
              f"{f['model_loads']} loads, {len(f['trials'])} trials, {f_wall:.1f} s", file=sys.stderr, flush=True)
        acc = {}
        for reduce in ("0.9", "half"):
            print(f"[{limit}] accelerate (reduce {reduce}) ...", file=sys.stderr, flush=True)
            a, a_wall = run_accelerate(resolved, ns.steps, ns.start, home / "accelerate" / f"{limit}-{reduce}", reduce)
            acc[reduce] = (a, a_wall)
            print(f"[{limit}] accelerate: {a['answer']} after {[(t['value'], t['status']) for t in a['trials']]}"
                  f"{' error ' + a['error'] if a.get('error') else ''}, {a_wall:.1f} s", file=sys.stderr, flush=True)
        lf, so = f["largest_fit"], f["smallest_oom"]
        scan = list(range(max(1, (lf or 1) - 1), (so or lf or 1) + 2))
        for a, _ in acc.values():
            if a["answer"]:
                scan += [a["answer"], a["answer"] + 1]
        b, seen = true_boundary(resolved, scan, ns.steps, ns.jobs)
        print(f"[{limit}] fresh scan {seen} -> boundary {b}", file=sys.stderr, flush=True)
        bt = "?" if b is None else f"{b} (scan: {', '.join(f'{v} {s}' for v, s in sorted(seen.items()))})"
        f_exact = b is not None and lf == b and so == b + 1
        rows.append([limit, bt, f"fttui probe, range {ns.rng}", f"{lf} (smallest OOM {so})",
                     "yes" if f_exact else "NO", f"{len(f['trials'])} ({', '.join(str(t['value']) for t in f['trials'])})",
                     str(f["model_loads"]), f"{f_wall:.1f}"])
        for reduce, (a, a_wall) in acc.items():
            ans = a["answer"]
            if b is not None and ans == b:
                ex = "yes"
            elif b and ans and ans < b:
                ex = f"no: {b - ans} below ({100 * (b - ans) / b:.0f}% smaller)"
            else:
                ex = "no"
            rows.append(["", "", f"accelerate, from {ns.start}, " + ("x0.9 (default)" if reduce == "0.9" else "halving"),
                         str(ans) if ans else f"none ({a.get('error')})", ex,
                         f"{len(a['trials'])} ({', '.join(str(t['value']) for t in a['trials'])})", "1", f"{a_wall:.1f}"])
    from fttui.core.results.tables import to_markdown

    table = to_markdown(headers, rows)
    from importlib.metadata import version

    meta = (f"\nprofile {ns.profile}, batch_size, {ns.steps} steps per trial, fttui range {ns.rng}, accelerate "
            f"starting at {ns.start}; {os.cpu_count()} CPU cores, {platform.machine()}, "
            f"Python {platform.python_version()}, torch {version('torch')}, transformers {version('transformers')}, "
            f"accelerate {version('accelerate')}, {time.strftime('%Y-%m-%d')}\n")
    text = table + meta
    print(text)
    if ns.out:
        Path(ns.out).write_text(text)
        print(f"table written to {ns.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
