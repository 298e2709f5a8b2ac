"""Host memory per rank of a sharded LoRA run on two CPU ranks: does a rank hold the whole model?

    .venv/bin/python bench/partitioned_build.py [--size 375m|100m|120m-v4k|20m] [--shardings zero3,fsdp,none]
        [--zero3-share F]

For each sharding, the fttui worker trains a random Llama of ``--size`` with LoRA over two gloo
ranks (torchrun, ``max_steps`` 2, fp32) and again a tiny Llama (the process baseline: the same
run whose model is negligible); each rank's peak resident memory (VmHWM, the ``peak_rss_mb`` of
its last ``step`` event) above the baseline's is divided by the whole model's bytes. Under
ZeRO-3 the model is built inside ``zero.Init`` (each rank holds its partition) and under FSDP
rank 0 alone builds it, the others receive their shards (fttui.worker.partition); a rank that
holds a whole copy shows a ratio of 1 or more. ``--zero3-share F`` sets ZeRO-3's
``stage3_max_reuse_distance`` and ``stage3_max_live_parameters`` to ``F`` times the model's
parameters (``1/7``: what DeepSpeed's default of 1e9 is to a 7B model). ``--json`` prints the figures as JSON. Figures
and the command: docs/estimate.md ("Partitioned build").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: random Llamas (fp32): 375m = 374M parameters, 1.50 GB; 100m = 134M, 0.54 GB; 20m = 22M, 89 MB;
#: 120m-v4k = 119M, 0.48 GB, whose embedding and output layer are 2.6% of it each, as in a 7B
#: Llama (100m's are 18% each)
SIZES = {
    "375m": {"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 24, "num_attention_heads": 16,
             "num_key_value_heads": 16, "vocab_size": 32000},
    "100m": {"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 12,
             "num_key_value_heads": 12, "vocab_size": 32000},
    "20m": {"hidden_size": 384, "intermediate_size": 1024, "num_hidden_layers": 6, "num_attention_heads": 6,
            "num_key_value_heads": 6, "vocab_size": 16000},
    "120m-v4k": {"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 12,
                 "num_key_value_heads": 12, "vocab_size": 4000},
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 4, "vocab_size": 512},
}


def params_of(arch: dict) -> int:
    """Parameters of a Llama of these numbers (untied embeddings, no biases)."""
    h, i, L, V = arch["hidden_size"], arch["intermediate_size"], arch["num_hidden_layers"], arch["vocab_size"]
    return 2 * V * h + L * (4 * h * h + 3 * h * i + 2 * h) + h


def profile(arch: dict, sharding: str, zero3_limit: int | None = None, **train) -> dict:
    """A resolved profile of a LoRA run of this random Llama over two CPU ranks."""
    return {
        "name": "partitioned-build", "source": "bench/partitioned_build.py", "description": "",
        "method": "lora", "sharding": sharding,
        "model": {"name_or_path": "random-llama", "init": "random", "arch": "llama", "config": None,
                  "arch_config": {**arch, "max_position_embeddings": 512}, "trust_remote_code": False,
                  "tokenizer": "byte", "attn_implementation": "sdpa"},
        "data": {"source": "synthetic", "name": "synthetic", "format": "auto", "max_seq_len": 32,
                 "num_samples": 8, "pad_to_max": False, "eval_ratio": 0.0},
        "train": {"batch_size": 2, "grad_accum": 1, "epochs": 1.0, "max_steps": 2, "lr": 2e-4,
                  "precision": "fp32", "gradient_checkpointing": False, "optimizer": "adamw_torch",
                  "lr_scheduler": "linear", "warmup_ratio": 0.0, "weight_decay": 0.0, "seed": 42,
                  "warmup_exclude_steps": 1, "save": "none", **train},
        "lora": {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
        "quant": {"type": "nf4", "double_quant": True},
        "deepspeed": {"offload_optimizer": True, "offload_params": True, "pin_memory": False,
                      "stage3_max_reuse_distance": zero3_limit, "stage3_max_live_parameters": zero3_limit},
        "devices": {"gpus": 0, "cpu_processes": 2, "nodes": 1, "node_rank": 0, "main_addr": "127.0.0.1",
                    "main_port": 29500, "launcher": "auto"},
        "limits": {"gpu_memory": "", "host_memory": ""},
    }


def run_ranks(run_dir: Path, prof: dict, port: int, timeout: float = 1200) -> dict:
    """Train ``prof`` over two torchrun ranks in ``run_dir``; the ranks' last step events and
    start events (``{rank: event}``) and the model build lines of the log."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "profile.json").write_text(json.dumps(prof))
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("MALLOC_ARENA_MAX", "1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(port),
           "-m", "fttui.worker.train", "--run-dir", str(run_dir)]
    res = subprocess.run(cmd, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=timeout)
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines() if x.strip()]
    if res.returncode != 0:
        errors = [e.get("message") for e in events if e.get("event") == "error"]
        raise RuntimeError(f"{run_dir.name}: exit {res.returncode}: {errors or res.stderr[-2000:]}")
    steps = {e["rank"]: e for e in events if e.get("event") == "step"}
    starts = {e["rank"]: e for e in events if e.get("event") == "start"}
    builds = [x for x in res.stdout.splitlines() if "model built" in x]
    return {"steps": steps, "starts": starts, "builds": builds}


def measure(size: str, shardings: list[str], port: int = 29611, zero3_share: float | None = None) -> dict:
    arch = SIZES[size]
    model_bytes = 4 * params_of(arch)
    # the same limit (elements) for the baseline's tiny model: a tiny model stays whole under either
    limit = None if zero3_share is None else round(zero3_share * params_of(arch))
    out: dict = {"size": size, "params": params_of(arch), "model_bytes": model_bytes, "zero3_limit": limit,
                 "runs": {}}
    with tempfile.TemporaryDirectory(prefix="fttui-partitioned-") as tmp:
        for i, sh in enumerate(shardings):
            base = run_ranks(Path(tmp) / f"{sh}-tiny", profile(SIZES["tiny"], sh, limit), port + 2 * i)
            big = run_ranks(Path(tmp) / f"{sh}-{size}", profile(arch, sh, limit), port + 2 * i + 1)
            ranks = {}
            for r in sorted(big["steps"]):
                hwm = big["steps"][r]["peak_rss_mb"] * 2**20
                b = base["steps"][r]["peak_rss_mb"] * 2**20
                ranks[r] = {"vmhwm_mb": round(hwm / 2**20), "baseline_mb": round(b / 2**20),
                            "above_baseline_mb": round((hwm - b) / 2**20), "ratio": round((hwm - b) / model_bytes, 3),
                            "step_time_s": big["steps"][r].get("step_time"),
                            "optimizer": (big["starts"].get(r) or {}).get("optimizer", {}).get("class")}
            out["runs"][sh] = {"ranks": ranks, "builds": big["builds"]}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=[s for s in SIZES if s != "tiny"], default="375m")
    ap.add_argument("--shardings", default="zero3,fsdp,none")
    ap.add_argument("--zero3-share", type=lambda v: float(Fraction(v)), default=None,
                    help="ZeRO-3 reuse distance and live limit as a share of the parameters (1/7: a 7B model's default)")
    ap.add_argument("--json", action="store_true")
    ns = ap.parse_args()
    res = measure(ns.size, [s for s in ns.shardings.split(",") if s], zero3_share=ns.zero3_share)
    if ns.json:
        print(json.dumps(res, indent=1))
        return 0
    print(f"random Llama {ns.size}: {res['params']:,} parameters, {res['model_bytes'] / 2**20:,.0f} MiB fp32; "
          "LoRA, 2 CPU ranks, 2 steps")
    print("| sharding | rank | VmHWM MiB | baseline MiB | above baseline | / model bytes |")
    print("| --- | --- | --- | --- | --- | --- |")
    for sh, run in res["runs"].items():
        for r, f in run["ranks"].items():
            print(f"| {sh} | {r} | {f['vmhwm_mb']:,} | {f['baseline_mb']:,} | {f['above_baseline_mb']:,} | {f['ratio']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
