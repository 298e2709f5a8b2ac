"""The estimator's activation model against the tensors a real training step keeps.

For each setting, one CPU step of the worker's model (fttui.worker.memtrace.measure_step: the
model built by fttui.worker.model, forward + loss + backward + AdamW step, every live storage
counted) is compared with what `fttui.core.estimate` puts in host memory for the model
(weights, gradients, optimizer states, LoRA, quantisation, activations: the process baseline
excluded). A model small enough to run in a fraction of a second, large enough that
activations dominate: hidden 128, intermediate 344, 2 layers, 4 heads over 2 KV heads (GQA),
batch 4 x 256 tokens.
"""

from __future__ import annotations

import pytest

from fttui.core.estimate import estimate
from fttui.core.profile import load_profile

torch = pytest.importorskip("torch")
from fttui.worker.memtrace import measure_step  # noqa: E402

ARCH = ["model.arch_config.hidden_size=128", "model.arch_config.intermediate_size=344",
        "model.arch_config.num_attention_heads=4", "model.arch_config.num_key_value_heads=2",
        "model.arch_config.num_hidden_layers=2", "data.source=synthetic", "batch_size=4",
        "max_seq_len=256"]

CASES = [
    ("tiny-lora", []),
    ("tiny-lora", ["train.gradient_checkpointing=true"]),
    ("tiny-lora", ["train.precision=bf16"]),
    ("tiny-lora", ["model.attn_implementation=eager"]),
    ("tiny-lora", ["lora.dropout=0.0", "lora.target_modules=all-linear"]),
    ("tiny-full", []),
    ("tiny-full", ["train.gradient_checkpointing=true"]),
    ("tiny-full", ["train.precision=bf16", "model.attn_implementation=eager"]),
    ("tiny-lora-emb", []),
    ("tiny-qlora", []),
    ("tiny-lora-int8", []),
]
MODEL_PARTS = ("weights", "gradients", "optimizer_states", "lora", "activations")


@pytest.mark.parametrize("profile,sets", CASES, ids=[f"{p}:{','.join(s) or 'default'}" for p, s in CASES])
def test_activation_model_matches_live_tensors(profile, sets):
    resolved = load_profile(profile, ARCH + sets)
    measured = measure_step(resolved)
    e = estimate(resolved)
    predicted = sum(e.host_breakdown[k] for k in MODEL_PARTS)
    err = (predicted - measured["total"]) / measured["total"]
    # measured within +-11% on every case when written (docs/estimate.md, bench/estimate_tensors.py)
    assert abs(err) <= 0.15, (f"{profile} {sets}: predicted {predicted / 2**20:.1f} MiB, live tensors "
                              f"{measured['total'] / 2**20:.1f} MiB ({err:+.1%}); top {measured['top'][:5]}")


def test_live_tensors_sees_activations_grow_with_tokens():
    small = measure_step(load_profile("tiny-lora", ARCH))
    big = measure_step(load_profile("tiny-lora", ARCH[:-2] + ["batch_size=8", "max_seq_len=256"]))
    assert big["params"] == small["params"]
    # twice the tokens: the dynamic peak about doubles (activations dominate it)
    assert 1.7 < big["dynamic_peak"] / small["dynamic_peak"] < 2.1
