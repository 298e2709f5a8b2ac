"""The estimator against fttui's own runs on a real card (an H100 80GB HBM3, CUDA 13.0, torch
2.11, transformers 5.23, peft 0.21.2, bitsandbytes 0.50.2; driver 580.159.04).

The figures are the summary rows of fresh ``fttui run --set model.init=random --set
max_steps=3`` runs, recorded by ``bench/estimate_gpu.py`` (docs/estimate.md): NVML's peak
"used" memory of the card (what nvidia-smi shows and the reference tables record), and torch's
reserved and allocated peaks. No GPU is needed to run this test: it checks the estimate, which
is pure arithmetic, against those recordings.
"""

from __future__ import annotations

import pytest

from fttui.core.memory import calibrate, estimate
from fttui.core.profiles import load_profile

MIB = 1 << 20
H100 = 81559 * MIB
GC_EAGER = ["train.gradient_checkpointing=true", "model.attn_implementation=eager"]

#: (label, profile, overrides, NVML used peak MiB, torch reserved peak MiB, torch allocated MiB)
RUNS = [
    ("llama2-7b lora fp16 b4 s512 GC eager", "llama2-7b-lora",
     ["batch_size=4", "max_seq_len=512", *GC_EAGER], 16774.8, 15544, 14828),
    ("llama2-7b lora fp16 b16 s512 GC eager", "llama2-7b-lora",
     ["batch_size=16", "max_seq_len=512", *GC_EAGER], 22562.8, 21332, 19180),
    ("llama2-7b lora fp16 b28 s512 GC eager", "llama2-7b-lora",
     ["batch_size=28", "max_seq_len=512", *GC_EAGER], 28342.8, 27112, 23534),
    ("llama2-7b lora fp16 b128 s64 GC eager", "llama2-7b-lora",
     ["batch_size=128", "max_seq_len=64", *GC_EAGER], 22726.8, 21496, 18551),
    ("llama2-7b lora fp16 b2 s2048 GC eager", "llama2-7b-lora",
     ["batch_size=2", "max_seq_len=2048", *GC_EAGER], 20392.8, 19162, 18340),
    ("llama2-7b lora fp16 b4 s512 (profile: SDPA, no GC)", "llama2-7b-lora", [], 31824.8, 30578, 29180),
    ("llama2-7b lora bf16 b8 s1024 SDPA GC", "llama2-7b-lora",
     ["train.precision=bf16", "batch_size=8", "max_seq_len=1024", "train.gradient_checkpointing=true"],
     22678.8, 21432, 18551),
    # measured without DeepSpeed (pure bf16 AdamW): pinned, whatever sharding the profile gets
    ("qwen-1.8b full (profile: bf16 b1 s256 GC)", "qwen-1.8b-full", ["sharding=none"], 19930.8, 18684, 17754),
    ("qwen-1.8b lora-emb (profile)", "qwen-1.8b-lora-emb", [], 12328.8, 11082, 10704),
    ("qwen-1.8b qlora, 2 of 24 layers (profile: fp16 b1 s256 GC)", "qwen-1.8b-qlora",
     ["model.arch_config.num_hidden_layers=2"], 5206.8, 3832, 3579),
]
#: peak RSS of the training process tree (MiB) of the runs whose weights were drawn on the card
HOST_RSS = {RUNS[0][0]: 1562, RUNS[1][0]: 1560, RUNS[2][0]: 1561, RUNS[3][0]: 1562, RUNS[4][0]: 1571,
            RUNS[5][0]: 1668, RUNS[6][0]: 1631, RUNS[7][0]: 1558, RUNS[8][0]: 1559}
#: a later session on the same card and stack (transformers 5.24): k-bit methods and shardings of
#: Llama-2-7B LoRA on one card, random init drawn on the card and kept on the host
#: (``bash bench/gpu_verify.sh OUT int8 kbit32 fsdp shard3`` and its ``qlora`` step); the last
#: figure is the peak RSS of the training process tree (MiB), the host copy of the model included
LATER_RUNS = [
    ("llama2-7b qlora b4 s512 GC eager", "llama2-7b-qlora",
     ["batch_size=4", "max_seq_len=512", *GC_EAGER], 8859, 7852, 6651, 13867),
    ("llama2-7b qlora b32 s512 GC eager", "llama2-7b-qlora",
     ["batch_size=32", "max_seq_len=512", *GC_EAGER], 27141, 26134, 21001, 13868),
    # reentrant checkpointing (fttui.worker.model); non-reentrant kept every int8 layer's input:
    # 20,357 MiB used, 18,203 allocated
    ("llama2-7b lora int8 b4 s512 GC eager", "llama2-7b-lora-int8",
     ["batch_size=4", "max_seq_len=512", *GC_EAGER], 12189, 11372, 10127, 13826),
    # built on the host (a model drawn on the card before FSDP wrapped it: 27,951 used, 26,010 allocated)
    ("llama2-7b lora fp16 b4 s512 GC eager, FSDP 1 card", "llama2-7b-lora",
     ["sharding=fsdp", "batch_size=4", "max_seq_len=512", *GC_EAGER], 16705, 15822, 15042, 13958),
    # built before zero.Init existed in fttui (the whole model drawn on the card, kept on the host):
    # estimated as that build, deepspeed.zero3_init = false (the GPU run of zero.Init is to come)
    ("llama2-7b lora fp16 b4 s512 GC eager, ZeRO-3 1 card", "llama2-7b-lora",
     ["sharding=zero3", "batch_size=4", "max_seq_len=512", *GC_EAGER, "deepspeed.zero3_init=false"],
     17525, 15822, 14886, 13953),
    # fp16 residual stream (no peft upcast): the reference row's 7,277 MiB within 2.3%
    ("llama2-7b qlora b4 s512 GC eager, quant.prepare=none", "llama2-7b-qlora",
     ["batch_size=4", "max_seq_len=512", *GC_EAGER, "quant.prepare=none"], 7107, 6100, 5398, 13866),
    # QLoRA under FSDP on one card (2026-11-26; transformers 5.24, the 4-bit weights stored in fp16,
    # torch's AdamW: bitsandbytes' cannot step FSDP's DTensor shards)
    ("llama2-7b qlora b4 s512 GC eager, QLoRA under FSDP, one card", "llama2-7b-qlora",
     ["sharding=fsdp", "train.optimizer=adamw_torch", "batch_size=4", "max_seq_len=512", *GC_EAGER],
     10403, 9512, 8635, 13837),
]
#: QLoRA under ZeRO-3 on one card (the same call): the card and host peaks within 15%, the
#: tensor part an upper bound (+46% over torch's allocated peak: more of the quantised model
#: counted as gathered than DeepSpeed keeps), so held to the card and host figures only
ZERO3_QLORA = ("llama2-7b qlora b4 s512 GC eager, QLoRA under ZeRO-3, one card", "llama2-7b-qlora",
               ["sharding=zero3", "batch_size=4", "max_seq_len=512", *GC_EAGER], 8199, 6112, 5410, 13873)
#: settings that ran out of CUDA memory on that card (status oom, kind cuda)
OOM = [
    ("llama2-7b lora fp16 b4 s2048 eager, no GC", "llama2-7b-lora",
     ["max_seq_len=2048", "model.attn_implementation=eager"]),
    ("llama2-7b lora fp16 b64 s2048 eager, no GC", "llama2-7b-lora",
     ["batch_size=64", "max_seq_len=2048", "model.attn_implementation=eager"]),
]


def _estimate(profile, overrides, calibration=None):
    return estimate(load_profile(profile, ["model.init=random", *overrides]), calibration, H100)


@pytest.mark.parametrize("label,profile,overrides,used,reserved,allocated", RUNS,
                         ids=[r[0] for r in RUNS])
def test_h100_runs_within_15_percent(label, profile, overrides, used, reserved, allocated):
    e = _estimate(profile, overrides)
    peak = max(e.gpu_peak_bytes)
    assert abs(peak - used * MIB) / (used * MIB) <= 0.15, f"predicted {peak / MIB:.0f} MiB"
    # what torch allocates (weights, states, activations; no context, no allocator slack) is
    # the tensor model itself: held to 5%
    bd = e.breakdown
    tensors = peak - bd["cuda_context"] - bd["allocator"]
    assert abs(tensors - allocated * MIB) / (allocated * MIB) <= 0.05, f"{tensors / MIB:.0f} MiB"


@pytest.mark.parametrize("label,profile,overrides,used,reserved,allocated", RUNS[:9],
                         ids=[r[0] for r in RUNS[:9]])
def test_h100_host_within_15_percent(label, profile, overrides, used, reserved, allocated):
    e = _estimate(profile, overrides)
    rss = HOST_RSS[label] * MIB
    assert abs(e.host_peak_bytes - rss) / rss <= 0.15, f"predicted {e.host_peak_bytes / MIB:.0f} MiB"


@pytest.mark.parametrize("label,profile,overrides,used,reserved,allocated,host", LATER_RUNS,
                         ids=[r[0] for r in LATER_RUNS])
def test_h100_kbit_and_sharded_runs_within_15_percent(label, profile, overrides, used, reserved, allocated, host):
    """Card peak, tensor part (vs torch's allocated peak) and host peak, each within 15% (the
    tensor part of the QLoRA b4 run is +8.9%, of ZeRO-3 +13.4%: the gathered-parameter and
    prefetch terms are an upper bound)."""
    e = _estimate(profile, overrides)
    peak = max(e.gpu_peak_bytes)
    assert abs(peak - used * MIB) / (used * MIB) <= 0.15, f"predicted {peak / MIB:.0f} MiB"
    tensors = peak - e.breakdown["cuda_context"] - e.breakdown["allocator"]
    assert abs(tensors - allocated * MIB) / (allocated * MIB) <= 0.15, f"{tensors / MIB:.0f} MiB"
    assert abs(e.host_peak_bytes - host * MIB) / (host * MIB) <= 0.15, f"host {e.host_peak_bytes / MIB:.0f} MiB"


def test_h100_qlora_under_zero3_card_and_host_within_15_percent():
    _label, profile, overrides, used, _reserved, allocated, host = ZERO3_QLORA
    e = _estimate(profile, overrides)
    peak = max(e.gpu_peak_bytes)
    assert abs(peak - used * MIB) / (used * MIB) <= 0.15, f"predicted {peak / MIB:.0f} MiB"
    assert abs(e.host_peak_bytes - host * MIB) / (host * MIB) <= 0.15, f"host {e.host_peak_bytes / MIB:.0f} MiB"
    tensors = peak - e.breakdown["cuda_context"] - e.breakdown["allocator"]
    assert tensors >= allocated * MIB  # an upper bound, never under what torch allocated


@pytest.mark.parametrize("label,profile,overrides", OOM, ids=[r[0] for r in OOM])
def test_h100_oom_runs_predicted_not_to_fit(label, profile, overrides):
    e = _estimate(profile, overrides)
    assert e.fits is False
    assert max(e.gpu_peak_bytes) - e.breakdown["allocator"] > H100


def _row(run):
    _label, _profile, overrides, used, reserved, allocated = run
    kv = dict(o.split("=", 1) for o in overrides)
    return {"batch_size": int(kv.get("batch_size", 4)), "max_seq_len": int(kv.get("max_seq_len", 512)),
            "peak_gpu_mem_mb": [used], "peak_torch_reserved_mb": [reserved],
            "peak_torch_alloc_mb": [allocated], "num_gpus": 1, "status": "completed"}


def test_calibration_learns_this_machines_context_and_extrapolates():
    """Two runs (batch 4 and 16 at 512 tokens) calibrate the GC + eager Llama setting; the
    three other batch shapes are then predicted within 1% (batch 28 x 512, batch 128 x 64) and
    7% (batch 2 x 2,048: +6.5%, the allocator keeps less slack at that shape), and the fitted
    context is the card's: NVML used - torch reserved = 1,231 MiB on every one of these runs."""
    fit_runs = [RUNS[0], RUNS[1]]
    base = load_profile("llama2-7b-lora", ["model.init=random", *GC_EAGER])
    cal = calibrate([_row(r) for r in fit_runs], base)
    assert cal.context_bytes == pytest.approx(1230.8 * MIB)
    for run in RUNS[2:5]:
        e = _estimate(run[1], run[2], cal)
        err = (max(e.gpu_peak_bytes) - run[3] * MIB) / (run[3] * MIB)
        assert abs(err) <= (0.07 if "s2048" in run[0] else 0.01), f"{run[0]}: {err:+.1%}"
