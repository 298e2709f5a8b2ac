"""The estimator's per-rank prediction under every sharding against the tensors each rank holds.

Two gloo ranks on CPU (torchrun), each building the worker's model and wrapping it in the real
DeepSpeed engine (ZeRO-2, ZeRO-2 offload, ZeRO-3, ZeRO-3 offload, with the worker's DeepSpeed
config) or in FSDP2 (with and without the CPU offload policy), and counting every storage it
holds during a training step (tests/worker/shard_ranks.py). The estimate's per-rank figure is
its host breakdown's model part (on CPU the "card" and the host are the same memory: weights,
gradients, optimizer states, LoRA, activations, buckets and the offloaded parts) over the ranks
of the node. Held to 15% on every rank (docs/estimate.md has the table).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("deepspeed")
from fttui.core.memory import estimate  # noqa: E402
from fttui.core.profiles import load_profile  # noqa: E402
from tests.helpers import profile_of  # noqa: E402

from .conftest import REPO, worker_env  # noqa: E402

#: states dominate: a 1.97M-parameter Llama at 2 x 64 tokens
STATES = ["model.arch_config.hidden_size=256", "model.arch_config.intermediate_size=688",
          "model.arch_config.num_attention_heads=4", "model.arch_config.num_key_value_heads=2",
          "data.source=synthetic", "batch_size=2", "max_seq_len=64"]
#: activations dominate: memtrace.SMALL_ARCH (hidden 128, 2 layers, 4 x 256 tokens)
ACTS = ["model.arch_config.hidden_size=128", "model.arch_config.intermediate_size=344",
        "model.arch_config.num_attention_heads=4", "model.arch_config.num_key_value_heads=2",
        "data.source=synthetic", "batch_size=4", "max_seq_len=256"]
BF16 = ["train.precision=bf16"]  # DeepSpeed's mixed precision (FSDP cases stay fp32 on CPU)
LORA = ["lora.target_modules=all-linear", "lora.r=16"]
CASES = [
    *[(f"full {sh}", "tiny-full", sh, STATES + BF16)
      for sh in ("zero2", "zero2-offload", "zero3", "zero3-offload")],
    ("full fsdp", "tiny-full", "fsdp", STATES),
    ("full fsdp-offload", "tiny-full", "fsdp-offload", STATES),
    ("lora zero2", "tiny-lora", "zero2", STATES + BF16 + LORA),
    ("lora zero3", "tiny-lora", "zero3", STATES + BF16 + LORA),
    ("lora fsdp", "tiny-lora", "fsdp", STATES + LORA),
    ("full zero3, activations", "tiny-full", "zero3", ACTS + BF16),
    ("full fsdp, activations", "tiny-full", "fsdp", ACTS),
    ("full fsdp, activations, checkpointing", "tiny-full", "fsdp",
     ACTS + ["train.gradient_checkpointing=true"]),
]
RANKS = 2
NOT_MODEL = ("process", "cuda_runtime", "model_load")


def predicted_per_rank(profile: str, sharding: str, sets: list[str]) -> float:
    r = load_profile(profile, [*sets, f"devices.cpu_processes={RANKS}"]).to_dict()
    r["sharding"] = sharding
    host = estimate(profile_of(r)).host_breakdown
    return sum(v for k, v in host.items() if k not in NOT_MODEL) / RANKS


def measure(tmp_path) -> dict[str, list[int]]:
    cases = [{"name": n, "profile": p, "sharding": sh, "overrides": sets} for n, p, sh, sets in CASES]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    out = tmp_path / "held.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(RANKS), "--standalone",
           str(REPO / "tests" / "worker" / "shard_ranks.py"), str(out), str(tmp_path / "cases.json")]
    env = {**worker_env(), "OMP_NUM_THREADS": "1"}
    res = subprocess.run(cmd, cwd=str(REPO), env=env, capture_output=True, text=True, timeout=600)
    if res.returncode != 0 and "terminate called without an active exception" in res.stderr:
        # Seen once in a clean-clone CI run on a busy machine (rank 1 aborted 40 s in, in C++;
        # the same launch passes alone and in every other run): not explained yet, so the launch
        # is tried once more and the abort is printed, never hidden when it repeats.
        print("per-rank launch aborted in C++, trying once more:\n" + res.stderr[-1500:])
        res = subprocess.run(cmd, cwd=str(REPO), env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return json.loads(out.read_text())


# DeepSpeed builds its CPU ops (shm comm, CPU Adam) on a machine's first use: same xdist group as
# the worker's DeepSpeed runs (tests/worker/test_sharding_runs.py), so that one build serves all
@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.xdist_group("deepspeed")
def test_per_rank_estimate_matches_each_ranks_tensors(tmp_path):
    held = measure(tmp_path)
    bad, rows = [], []
    for name, profile, sharding, sets in CASES:
        pred = predicted_per_rank(profile, sharding, sets)
        for rank, got in enumerate(held[name]):
            err = (pred - got) / got
            rows.append(f"{name} rank {rank}: held {got / 2**20:.2f} MiB, predicted {pred / 2**20:.2f} ({err:+.1%})")
            if abs(err) > 0.15:
                bad.append(rows[-1])
    assert not bad, "\n".join(bad + ["", *rows])
    # partitioning is what is measured: a ZeRO-2 rank holds less than a whole model's states
    # (2 bytes of weights + 18 of gradients and optimizer states per parameter, unpartitioned)
    P = estimate(load_profile("tiny-full", STATES)).inputs["params"]
    assert max(held["full zero2"]) < 20 * P
