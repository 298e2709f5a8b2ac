"""Cost of being measured: the same training as an fttui run and as a plain Trainer script.

    .venv/bin/python bench/measure_cost.py [--pairs 3] [--samples 3200] [--threads N] [--out FILE]
    .venv/bin/python bench/measure_cost.py --quick          # 1 pair, 800 samples

Both sides train a random Llama (hidden 128, intermediate 256, 2 layers, 4 heads, vocab 512)
with LoRA r8 alpha 16 on q_proj/v_proj without dropout, on ``--samples`` synthetic samples of
128 tokens, batch 8, fp32, on the CPU, with the same number of threads (``OMP_NUM_THREADS`` set
for both; each side reports what torch used):
  A  fttui: the real command, ``fttui run --profile measure-cost --headless`` (supervisor,
     sampling, events, the headless lines), its figure read back from the row
     (``fttui results --format json``): ``samples_per_s``, steady state, first step excluded;
  B  plain: ``bench/plain_trainer.py`` (no fttui), whose TrainerCallback takes the time at the end
     of every step: the same steady-state definition, first step excluded.
Runs alternate A B A B ...; the bench prints each run's steady samples/s, the ratio A / B per
pair and the median ratio (goal: >= 0.98). The whole-run figures (warm-up included: the row's
``samples_per_s_avg``, the Trainer's ``train_samples_per_second``) are printed beside them.
The bench writes its own FTTUI_HOME (profile, runs, store) under a temporary folder.
``--plain-env K=V`` adds environment to the plain side only (e.g. fttui's malloc settings);
``--fttui-tree DIR`` runs the fttui of another checkout (a before / after comparison).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILE = "measure-cost"
PLAIN_SCRIPT = ROOT / "bench" / "plain_trainer.py"


def profile_text(samples: int, seq_len: int = 128, batch: int = 8) -> str:
    """The fttui profile of the bench's training (the same as bench/plain_trainer.py)."""
    return f"""# fttui run --profile {PROFILE}
description = "bench/measure_cost.py: random Llama, LoRA r8 q/v, synthetic, CPU"
method = "lora"

[model]
init = "random"
arch = "llama"
tokenizer = "byte"

[model.arch_config]
hidden_size = 128
intermediate_size = 256
num_hidden_layers = 2
num_attention_heads = 4
num_key_value_heads = 4
vocab_size = 512
max_position_embeddings = 512

[data]
source = "synthetic"
max_seq_len = {seq_len}
num_samples = {samples}

[train]
batch_size = {batch}
epochs = 1
lr = 2e-3
precision = "fp32"
warmup_ratio = 0.0
seed = 42

[lora]
r = 8
alpha = 16
dropout = 0.0
target_modules = ["q_proj", "v_proj"]

[devices]
gpus = 0
"""


def make_home(samples: int, seq_len: int = 128, batch: int = 8, root: str | None = None) -> Path:
    """A fresh FTTUI_HOME holding the bench's profile."""
    home = Path(tempfile.mkdtemp(prefix="fttui-measure-cost-", dir=root))
    (home / "profiles").mkdir(parents=True)
    (home / "profiles" / f"{PROFILE}.toml").write_text(profile_text(samples, seq_len, batch))
    return home


def base_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    for k in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "FTTUI_FAKE_GPUS"):
        env.pop(k, None)
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run_fttui(home: Path, threads: int, python: str = sys.executable, tree: str | None = None) -> dict:
    """One ``fttui run --headless`` of the bench profile; its figures from ``fttui results``.
    ``tree``: a checkout of fttui to run instead of the installed one (put first on PYTHONPATH)."""
    env = dict(base_env(threads), FTTUI_HOME=str(home), FTTUI_NO_APP="1")
    if tree:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH", "")) if p)
    before = {r["run_id"] for r in _rows(home, env, python)}
    # save = none: the adapter saved at the end is outside train_time but inside wall_s
    proc = subprocess.run([python, "-m", "fttui", "run", "--profile", PROFILE, "--headless", "--set",
                           "train.save=none"], cwd=str(home),
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"fttui run failed ({proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    new = [r for r in _rows(home, env, python) if r["run_id"] not in before]
    if len(new) != 1:
        raise RuntimeError(f"expected one new row, found {len(new)}")
    row = new[0]
    return {"steady": row["samples_per_s"], "whole": row.get("samples_per_s_avg"),
            "threads": _torch_threads(home / "runs" / row["run_id"] / "events.jsonl"), "run_id": row["run_id"]}


def _rows(home: Path, env: dict, python: str) -> list[dict]:
    out = subprocess.run([python, "-m", "fttui", "results", "--format", "json"], cwd=str(home), env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout or "[]")


def _torch_threads(events: Path) -> int | None:
    try:
        for line in events.read_text().splitlines():
            ev = json.loads(line)
            if ev.get("event") == "start":
                return (ev.get("env") or {}).get("torch_threads")
    except (OSError, ValueError):
        pass
    return None


def run_plain(home: Path, threads: int, samples: int, seq_len: int = 128, batch: int = 8,
              extra_env: dict[str, str] | None = None, python: str = sys.executable) -> dict:
    """One run of bench/plain_trainer.py; its steady and whole-run samples/s."""
    env = dict(base_env(threads), **(extra_env or {}))
    out = home / "plain.json"
    subprocess.run([python, str(PLAIN_SCRIPT), "--samples", str(samples), "--seq-len", str(seq_len),
                    "--batch", str(batch), "--out-dir", str(home / "plain-out"), "--json-out", str(out)],
                   env=env, cwd=str(home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    res = json.loads(out.read_text())
    return {"steady": res["steady_samples_per_s"], "whole": res["whole_samples_per_s"],
            "threads": res["torch_threads"]}


def ratio(fttui_sps: float, plain_sps: float) -> float:
    """fttui's samples/s over the plain script's (1.0: measuring costs nothing)."""
    if not plain_sps or plain_sps <= 0:
        raise ValueError("the plain run has no samples/s")
    return fttui_sps / plain_sps


def table(pairs: list[tuple[dict, dict]], header: str) -> str:
    ratios = [ratio(a["steady"], b["steady"]) for a, b in pairs]
    lines = [header, "",
             "| pair | fttui steady (samples/s) | plain steady (samples/s) | ratio | fttui whole run | plain whole run | threads (fttui/plain) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for i, ((a, b), r) in enumerate(zip(pairs, ratios)):
        lines.append(f"| {i + 1} | {a['steady']:.1f} | {b['steady']:.1f} | {r:.3f} | {_f(a['whole'])} | "
                     f"{_f(b['whole'])} | {a['threads']}/{b['threads']} |")
    lines.append(f"| median | {statistics.median(a['steady'] for a, _ in pairs):.1f} | "
                 f"{statistics.median(b['steady'] for _, b in pairs):.1f} | {statistics.median(ratios):.3f} | | | |")
    lines.append("")
    lines.append(f"ratios: min {min(ratios):.3f}, median {statistics.median(ratios):.3f}, max {max(ratios):.3f}")
    return "\n".join(lines) + "\n"


def _f(x) -> str:
    return "-" if x is None else f"{x:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--samples", type=int, default=3200)
    ap.add_argument("--threads", type=int, default=1,
                    help="OMP_NUM_THREADS of both sides (default 1: on a shared machine, threads that wait on "
                         "each other for a busy core make both sides several times slower)")
    ap.add_argument("--quick", action="store_true", help="1 pair of 800 samples")
    ap.add_argument("--plain-env", action="append", default=[], metavar="K=V",
                    help="environment for the plain side only (repeatable)")
    ap.add_argument("--fttui-tree", metavar="DIR",
                    help="run the fttui of this checkout (e.g. `git archive` of an older commit)")
    ap.add_argument("--out", help="also write the Markdown table here")
    a = ap.parse_args(argv)
    if a.quick:
        a.pairs, a.samples = 1, 800
    extra = dict(kv.split("=", 1) for kv in a.plain_env)
    home = make_home(a.samples)
    pairs = []
    try:
        for i in range(a.pairs):
            f = run_fttui(home, a.threads, tree=a.fttui_tree)
            p = run_plain(home, a.threads, a.samples, extra_env=extra)
            pairs.append((f, p))
            print(f"pair {i + 1}: fttui {f['steady']:.1f}  plain {p['steady']:.1f} samples/s  "
                  f"ratio {ratio(f['steady'], p['steady']):.3f}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)  # the runs' folders and the plain script's output
    header = (f"{a.samples} samples of 128 tokens, batch 8, fp32, CPU, {a.threads} threads, {a.pairs} pairs "
              f"(A B alternated){', plain env ' + ' '.join(a.plain_env) if a.plain_env else ''}")
    text = table(pairs, header)
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    print(json.dumps({"median_ratio": statistics.median(ratio(f['steady'], p['steady']) for f, p in pairs)}),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
