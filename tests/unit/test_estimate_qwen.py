"""The Qwen reference profiles of the sharded rows against Qwen's published table.

QwenLM/Qwen README, "Profiling of Memory and Speed" (A100-SXM4-80G, batch 1, gradient
accumulation 8, gradient checkpointing; memory in GB summed over all cards, by sequence length
256..8192). Not a CSV in ../shared/reference, so the figures are copied here. Each profile is
estimated per card and the figure summed over its cards.
"""

from __future__ import annotations

from fttui.core.memory import GIB, estimate
from fttui.core.profiles import load_profile

GB = 10**9
A100 = 80 * GIB
LENGTHS = (256, 512, 1024, 2048, 4096, 8192)
#: profile -> measured GB over all cards, by sequence length
ROWS = {
    "qwen-1.8b-full": (43.5, 43.5, 43.5, 43.5, 47.1, 48.3),
    "qwen-7b-full": (139.2, 148.0, 162.0),
    "qwen-7b-lora-multinode": (74.7, 77.6, 84.9, 95.1, 121.1, 155.5),
    "qwen-72b-lora": (215.4, 217.7, 222.6, 228.8, 249.0, 289.2),
}


def _total(profile, seq, **kw):
    r = load_profile(profile, [f"max_seq_len={seq}"])
    e = estimate(r, device_bytes=A100)
    cards = r["devices"]["gpus"] * r["devices"]["nodes"]
    return e, max(e.gpu_peak_bytes) * cards, cards


def test_profiles_run_the_rows_setup():
    want = {"qwen-1.8b-full": ("full", "zero2", 1, 1), "qwen-7b-full": ("full", "zero2", 2, 1),
            "qwen-7b-lora-multinode": ("lora", "zero2", 2, 2), "qwen-72b-lora": ("lora", "zero3", 4, 1)}
    for name, (method, sharding, gpus, nodes) in want.items():
        r = load_profile(name)
        assert (r["method"], r["sharding"], r["devices"]["gpus"], r["devices"]["nodes"]) == \
            (method, sharding, gpus, nodes), name
        assert r["train"]["precision"] == "bf16" and r["train"]["gradient_checkpointing"]


def test_within_15_percent_of_the_rows():
    bad = []
    for name in ("qwen-1.8b-full", "qwen-7b-lora-multinode"):
        for seq, m in zip(LENGTHS, ROWS[name]):
            # qwen-1.8b-full at 8192 tokens: +17% (docs/estimate.md, "Qwen's table")
            bound = 0.20 if (name, seq) == ("qwen-1.8b-full", 8192) else 0.15
            err = (_total(name, seq)[1] - m * GB) / (m * GB)
            if abs(err) > bound:
                bad.append(f"{name} s{seq}: {err:+.1%}")
    assert bad == []


def test_7b_full_gap_is_the_fp32_gradient_copy_and_adamw_temporaries():
    """Qwen's ds_config_zero2.json has an optimizer section (DeepSpeed's fused Adam, stepping in
    place); fttui's has none and the Trainer's torch AdamW makes a temporary per parameter of the
    fp32 partition (4 B), and the row stays below the fp32 gradient partition DeepSpeed makes
    for the step (4 B). Without those two the estimate is within 15% of every figure."""
    for seq, m in zip(LENGTHS, ROWS["qwen-7b-full"]):
        e, total, cards = _total("qwen-7b-full", seq)
        params = e.inputs["params"]
        assert total > m * GB  # the estimate is above the row, not below
        without = total - cards * (4 + 4) * params / cards
        assert abs(without - m * GB) / (m * GB) <= 0.15, (seq, without / GB, m)


def test_72b_lora_zero3_says_the_whole_model_comes_first():
    """fttui builds the model before DeepSpeed (no zero.Init): each card first holds the whole
    bf16 model, larger than the card. What the card holds once partitioned (the allocations,
    not the cached copy) is within 15% of the row at every length."""
    for seq, m in zip(LENGTHS, ROWS["qwen-72b-lora"]):
        e, _total_b, cards = _total("qwen-72b-lora", seq)
        assert any("zero.Init" in n and "GiB" in n for n in e.notes)
        whole = e.inputs["params"] * 2
        assert whole > A100
        allocated = max(e.gpu_peak_bytes) - e.breakdown["allocator"]
        err = (allocated * cards - m * GB) / (m * GB)
        assert abs(err) <= 0.15, (seq, allocated * cards / GB, m, f"{err:+.1%}")
