"""`fttui estimate` against fresh `fttui run`s on a real GPU (needs an NVIDIA card; not run by CI).

    python bench/estimate_gpu.py [--group ref|modern|kbit|all] [--out DIR] [--steps N]

For each setting: the estimate (``fttui estimate --json --gpu-memory <the card>``) and a fresh
run (``fttui run ... --set model.init=random --set max_steps=N --headless``), then the run's
summary row (``fttui results --format json --limit 1``). Prints one Markdown row per setting as
soon as it is measured (and appends it to DIR/estimate_gpu.md, DIR/estimate_gpu.jsonl):

- NVML: the card's peak "used" memory (what nvidia-smi shows, the reference tables' figure);
- torch reserved / allocated peaks (``torch.cuda.max_memory_reserved/allocated``);
- the predicted peak per card, and the predicted part that torch allocates (the estimate less
  its CUDA-context and allocator terms), each with its error against the measured figure;
- the reference table's figure where the setting is one of its rows.

Groups: ``ref`` (rows of llama2-7b-3090.csv: LoRA fp16, gradient checkpointing, eager
attention, as tests/unit/test_estimate.py expresses them), ``modern`` (the shipped profiles'
own defaults: SDPA, checkpointing off, bf16, full fine-tuning, lora-emb, and a batch that
cannot fit), ```kbit`` (QLoRA and 8-bit LoRA of Llama-2-7B: the random model is built on the host, saved
and loaded back quantised; drawn on the card one module at a time since it took over 150 s on the host),
``kbit-small`` (the same for Qwen-1.8B), ``zero3`` (DeepSpeed ZeRO-3 CPU offload of Qwen-1.8B;
the first run JIT-builds DeepSpeed's CPU Adam), ``shard`` (Llama-2-7B LoRA as the ``ref`` group's
first row under FSDP, ZeRO-3 offload and ZeRO-3 on one card), ``qshard`` (the ``kbit`` group's QLoRA
row under FSDP and ZeRO-3 on one card: 4-bit weights stored in the compute dtype).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
GB, MIB = 10**9, 2**20
LLAMA_REF = ["train.gradient_checkpointing=true", "model.attn_implementation=eager"]

#: (group, label, profile, overrides, reference figure in bytes or None)
SETTINGS: list[tuple[str, str, str, list[str], float | None]] = [
    ("ref", "llama2-7b lora fp16 b4 s512", "llama2-7b-lora", ["batch_size=4", "max_seq_len=512", *LLAMA_REF], 15.81 * GB),
    ("ref", "llama2-7b lora fp16 b16 s512", "llama2-7b-lora", ["batch_size=16", "max_seq_len=512", *LLAMA_REF], 20.90 * GB),
    ("ref", "llama2-7b lora fp16 b28 s512", "llama2-7b-lora", ["batch_size=28", "max_seq_len=512", *LLAMA_REF], 24.10 * GB),
    ("ref", "llama2-7b lora fp16 b128 s64", "llama2-7b-lora", ["batch_size=128", "max_seq_len=64", *LLAMA_REF], 20.41 * GB),
    ("ref", "llama2-7b lora fp16 b2 s2048", "llama2-7b-lora", ["batch_size=2", "max_seq_len=2048", *LLAMA_REF], 20.65 * GB),
    ("modern", "llama2-7b lora fp16 b4 s512 (profile: SDPA, no GC)", "llama2-7b-lora", [], None),
    ("modern", "llama2-7b lora bf16 b8 s1024 SDPA GC", "llama2-7b-lora",
     ["train.precision=bf16", "batch_size=8", "max_seq_len=1024", "train.gradient_checkpointing=true"], None),
    ("modern", "llama2-7b lora fp16 b4 s2048 eager, no GC", "llama2-7b-lora",
     ["max_seq_len=2048", "model.attn_implementation=eager"], None),
    ("modern", "qwen-1.8b full (profile)", "qwen-1.8b-full", [], None),
    ("modern", "qwen-1.8b lora-emb (profile)", "qwen-1.8b-lora-emb", [], None),
    ("modern", "llama2-7b lora fp16 b64 s2048 eager, no GC (cannot fit)", "llama2-7b-lora",
     ["batch_size=64", "max_seq_len=2048", "model.attn_implementation=eager"], None),
    ("kbit", "llama2-7b qlora b4 s512", "llama2-7b-qlora", ["batch_size=4", "max_seq_len=512", *LLAMA_REF], 7.63 * GB),
    ("kbit", "llama2-7b qlora b32 s512", "llama2-7b-qlora", ["batch_size=32", "max_seq_len=512", *LLAMA_REF], 19.47 * GB),
    ("kbit", "llama2-7b lora int8 b4 s512", "llama2-7b-lora-int8", ["batch_size=4", "max_seq_len=512", *LLAMA_REF], 11.1 * GB),
    ("kbit", "llama2-7b qlora b4 s512, quant.prepare=none", "llama2-7b-qlora",
     ["batch_size=4", "max_seq_len=512", *LLAMA_REF, "quant.prepare=none"], 7.63 * GB),
    # QLoRA at long sequences against Qwen's own table (one A100, batch 1, accumulation 8, GC,
    # flash attention 2: 16.9 / 23.5 GB at 4,096 / 8,192 tokens; tests/unit/test_prequant.py)
    ("kbit-long", "qwen-7b qlora b1 s4096 GC", "qwen-7b-qlora", ["max_seq_len=4096"], 16.9 * GB),
    ("kbit-long", "qwen-7b qlora b1 s8192 GC", "qwen-7b-qlora", ["max_seq_len=8192"], 23.5 * GB),
    ("kbit-long", "qwen-7b qlora b1 s8192 GC, quant.prepare=none", "qwen-7b-qlora",
     ["max_seq_len=8192", "quant.prepare=none"], 23.5 * GB),
    ("kbit-small", "qwen-1.8b qlora (profile: b1 x 256, GC)", "qwen-1.8b-qlora", [], None),
    ("kbit-small", "qwen-1.8b qlora b8 s1024 GC", "qwen-1.8b-qlora", ["batch_size=8", "max_seq_len=1024"], None),
    ("kbit-small", "qwen-1.8b lora-int8 b8 s1024 GC", "qwen-1.8b-qlora",
     ["method=lora-int8", "train.optimizer=adamw_torch", "batch_size=8", "max_seq_len=1024"], None),
    ("zero3", "qwen-1.8b ZeRO-3 offload b4 s512 GC", "qwen-1.8b-full",
     ["method=full-zero3-offload", "train.precision=bf16", "batch_size=4", "max_seq_len=512"], None),
    ("shard", "llama2-7b lora fp16 b4 s512 GC eager, FSDP 1 card", "llama2-7b-lora",
     ["sharding=fsdp", "batch_size=4", "max_seq_len=512", *LLAMA_REF], None),
    ("shard", "llama2-7b lora fp16 b4 s512 GC eager, ZeRO-3 offload 1 card", "llama2-7b-lora",
     ["sharding=zero3-offload", "batch_size=4", "max_seq_len=512", *LLAMA_REF], None),
    ("shard", "llama2-7b lora fp16 b4 s512 GC eager, ZeRO-3 1 card", "llama2-7b-lora",
     ["sharding=zero3", "batch_size=4", "max_seq_len=512", *LLAMA_REF], None),
    ("shard", "llama2-7b lora fp16 b4 s512 GC eager, ZeRO-3 1 card, DeepSpeed's optimizer", "llama2-7b-lora",
     ["sharding=zero3", "deepspeed.optimizer=deepspeed", "batch_size=4", "max_seq_len=512", *LLAMA_REF], None),
    ("qshard", "llama2-7b qlora b4 s512 GC eager, QLoRA under FSDP, one card", "llama2-7b-qlora",
     ["sharding=fsdp", "train.optimizer=adamw_torch", "batch_size=4", "max_seq_len=512", *LLAMA_REF], None),
    ("qshard", "llama2-7b qlora b4 s512 GC eager, QLoRA under ZeRO-3, one card", "llama2-7b-qlora",
     ["sharding=zero3", "batch_size=4", "max_seq_len=512", *LLAMA_REF], None),
]


def fttui(*args: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fttui", *args], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=timeout)


def rows(env: dict) -> list[dict]:
    return json.loads(fttui("results", "--format", "json", env=env, timeout=60).stdout or "[]")


def card_bytes() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total)
    except Exception:  # noqa: BLE001 - no NVIDIA card: report host figures only
        return None


def pct(pred: float | None, meas: float | None) -> str:
    if not pred or not meas:
        return ""
    return f"{(pred - meas) / meas:+.1%}"


def mib(x: float | None) -> str:
    return "" if x is None else f"{x / MIB:,.0f}"


def measure(label: str, profile: str, sets: list[str], ref: float | None, steps: int, card: int | None,
            env: dict, timeout: float) -> dict:
    flags = [f for kv in ["model.init=random", *sets] for f in ("--set", kv)]
    est_args = ["estimate", "--profile", profile, *flags, "--json"]
    if card:
        est_args += ["--gpu-memory", str(card)]
    est = fttui(*est_args, env=env, timeout=60)
    if est.returncode != 0:
        return {"label": label, "error": est.stderr.strip()[-300:]}
    e = json.loads(est.stdout)
    t0 = time.time()
    before = rows(env)
    # its own session, so that a run past its time is cancelled as a user would (SIGINT to
    # the group: the supervisor saves the row and stops the training)
    proc = subprocess.Popen([sys.executable, "-m", "fttui", "run", "--profile", profile, *flags,
                             "--set", f"max_steps={steps}", "--headless"], cwd=ROOT, env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        rc = f"timeout {timeout:.0f} s"
    tail = (out or "").strip().splitlines()[-4:]
    after = rows(env)
    r = after[-1] if len(after) > len(before) else {}
    first = lambda v: (v[0] if v else None) if isinstance(v, list) else v  # noqa: E731
    nvml = first(r.get("peak_gpu_mem_mb"))
    proc = first(r.get("peak_gpu_proc_mb"))
    res, alloc = first(r.get("peak_torch_reserved_mb")), first(r.get("peak_torch_alloc_mb"))
    bd = e["breakdown"]
    pred = max(e["gpu_peak_bytes"]) if e["gpu_peak_bytes"] else e["host_peak_bytes"]
    pred_alloc = pred - bd.get("cuda_context", 0) - bd.get("allocator", 0)
    return {"label": label, "profile": profile, "overrides": sets, "rc": rc, "tail": tail,
            "status": r.get("status"), "oom_kind": r.get("oom_kind"), "wall_s": round(time.time() - t0, 1),
            "samples_per_s": r.get("samples_per_s"), "tokens_per_s": r.get("tokens_per_s"),
            "nvml_peak": nvml and nvml * MIB, "proc_peak": proc and proc * MIB,
            "reserved_peak": res and res * MIB, "alloc_peak": alloc and alloc * MIB,
            "host_rss_peak": r.get("peak_host_rss_mb") and r["peak_host_rss_mb"] * MIB,
            "predicted": pred, "predicted_alloc": pred_alloc, "fits": e.get("fits"),
            "predicted_host": e["host_peak_bytes"], "breakdown": bd, "reference": ref,
            "versions": r.get("versions")}


HEADER = ("| setting | status | NVML peak MiB | torch reserved | torch allocated | predicted | error "
          "| predicted allocated | error | reference | host RSS / predicted MiB | samples/s |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")


def md_row(m: dict) -> str:
    if "error" in m:
        return f"| {m['label']} | estimate failed: {m['error']} |" + " |" * 10
    status = m["status"] or f"rc {m['rc']}"
    if m.get("oom_kind"):
        status += f" ({m['oom_kind']})"
    meas = m["nvml_peak"] or m["proc_peak"] or m["host_rss_peak"]
    ref = f"{m['reference'] / MIB:,.0f} ({pct(m['nvml_peak'], m['reference'])} measured vs it)" if m["reference"] else ""
    return (f"| {m['label']} | {status} | {mib(meas)} | {mib(m['reserved_peak'])} | {mib(m['alloc_peak'])} "
            f"| {mib(m['predicted'])} | {pct(m['predicted'], meas) if m['status'] == 'completed' else ''} "
            f"| {mib(m['predicted_alloc'])} | {pct(m['predicted_alloc'], m['alloc_peak']) if m['status'] == 'completed' else ''} "
            f"| {ref} | {mib(m['host_rss_peak'])} / {mib(m['predicted_host'])} | {m['samples_per_s'] or ''} |")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--group", default="all", choices=["ref", "modern", "kbit", "kbit-long", "kbit-small", "zero3", "shard", "qshard", "all"])
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="fttui-estimate-gpu-"))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=240, help="seconds per run")
    ap.add_argument("--only", help="run only the settings whose label contains this text")
    ap.add_argument("--exact", action="store_true", help="with --only: the labels that end with it")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    env = dict(os.environ, FTTUI_HOME=os.path.join(args.out, "home"), PYTHONUNBUFFERED="1")
    card = card_bytes()
    print(f"card: {card and card / MIB:.0f} MiB" if card else "no NVIDIA card: host figures only", flush=True)
    print(HEADER, flush=True)
    with open(os.path.join(args.out, "estimate_gpu.md"), "a") as md:
        md.write(HEADER + "\n")
    for group, label, profile, sets, ref in SETTINGS:
        picked = args.only and (label.endswith(args.only) if args.exact else args.only in label)
        if (args.group not in ("all", group) and not args.only) or (args.only and not picked):
            continue
        m = measure(label, profile, sets, ref, args.steps, card, env, args.timeout)
        line = md_row(m)
        print(line, flush=True)
        if m.get("status") not in ("completed", "oom"):
            print(f"  tail: {m.get('tail')}", flush=True)
        with open(os.path.join(args.out, "estimate_gpu.md"), "a") as md:
            md.write(line + "\n")
        with open(os.path.join(args.out, "estimate_gpu.jsonl"), "a") as js:
            js.write(json.dumps(m) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
