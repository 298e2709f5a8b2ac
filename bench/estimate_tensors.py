"""The estimator's model of a training step against the tensors the step really keeps (CPU).

    .venv/bin/python bench/estimate_tensors.py [--big]

For each setting: one step of the worker's model measured storage by storage
(fttui.worker.memtrace.measure_step) and the estimate's model part (weights, gradients,
optimizer states, LoRA, quantisation, activations; the process baseline excluded). ``--big``
uses a 13M-parameter Llama (hidden 512, 4 layers, batch 16 x 512) instead of the test size.
Prints a Markdown table (docs/estimate.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "2")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from fttui.core.estimate import estimate  # noqa: E402
from fttui.core.profile import load_profile  # noqa: E402
from fttui.worker.memtrace import measure_step  # noqa: E402

SMALL = ["model.arch_config.hidden_size=128", "model.arch_config.intermediate_size=344",
         "model.arch_config.num_attention_heads=4", "model.arch_config.num_key_value_heads=2",
         "model.arch_config.num_hidden_layers=2", "data.source=synthetic", "batch_size=4",
         "max_seq_len=256"]
BIG = ["model.arch_config.hidden_size=512", "model.arch_config.intermediate_size=1376",
       "model.arch_config.num_attention_heads=8", "model.arch_config.num_key_value_heads=8",
       "model.arch_config.num_hidden_layers=4", "data.source=synthetic", "batch_size=16",
       "max_seq_len=512"]
CASES = [
    ("tiny-lora", []), ("tiny-lora", ["train.gradient_checkpointing=true"]),
    ("tiny-lora", ["train.precision=bf16"]), ("tiny-lora", ["model.attn_implementation=eager"]),
    ("tiny-lora", ["lora.dropout=0.0", "lora.target_modules=all-linear"]),
    ("tiny-full", []), ("tiny-full", ["train.gradient_checkpointing=true"]),
    ("tiny-full", ["train.precision=bf16", "model.attn_implementation=eager"]),
    ("tiny-lora-emb", []), ("tiny-qlora", []),
    ("tiny-qlora", ["train.precision=bf16", "train.gradient_checkpointing=true"]),
    ("tiny-lora-int8", []),
]
PARTS = ("weights", "gradients", "optimizer_states", "lora", "activations")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", action="store_true")
    args = ap.parse_args()
    arch = BIG if args.big else SMALL
    print("| profile | settings | live tensors MiB | predicted MiB | error |")
    print("| --- | --- | --- | --- | --- |")
    errs = []
    for prof, sets in CASES:
        t0 = time.time()
        r = load_profile(prof, arch + sets)
        m = measure_step(r)
        e = estimate(r)
        pred = sum(e.host_breakdown[k] for k in PARTS)
        err = (pred - m["total"]) / m["total"]
        errs.append(abs(err))
        print(f"| {prof} | {' '.join(sets) or 'profile'} | {m['total'] / 2**20:.1f} | "
              f"{pred / 2**20:.1f} | {err:+.1%} |", flush=True)
        print(f"  ({time.time() - t0:.1f} s; top at peak {m['top'][:4]})", file=sys.stderr)
    print(f"\nmax {max(errs):.1%}, mean {sum(errs) / len(errs):.1%} over {len(errs)} settings")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
