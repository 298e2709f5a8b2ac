"""End to end on CPU (issue 14): a real tiny-lora run reports its model's shape and no allocator
figures (CPU: null, never 0), and its row has FLOPs per token (the formula, computed again here
from the row's own numbers) and no per-card figures."""

from __future__ import annotations

import pytest

from fttui.core.run.files.events import read_jsonl


def cpu_perf_is_reported(run_dir, stdout: str, row: dict) -> None:
    """Checked on the tiny-lora run of tests/e2e/test_run_cli.py::test_headless_run_writes_a_row
    (one run for both)."""
    assert "MFU" not in stdout and "NEAR OOM" not in stdout  # no card, nothing to show
    assert "FLOPs/token" in stdout  # the summary lines: a property of the model
    events = read_jsonl(run_dir / "events.jsonl")
    start = next(e for e in events if e.get("event") == "start")
    # tiny-lora's Llama: hidden 64, 2 layers, 4 heads of 16, vocab 512, untied
    assert start["model_shape"] == {"vocab": 512, "hidden": 64, "layers": 2, "attn_dim": 64, "tied": False}
    steps = [e for e in events if e.get("event") == "step"]
    assert steps and all(e["torch_alloc_retries"] is None and e["torch_ooms"] is None for e in steps)
    # LoRA: 4 N_base + 6 N_adapter + 12 L a s, N_base without the input embedding
    seq = row["tokens"] / row["samples"]
    n_base = row["params_total"] - row["params_trainable"] - 512 * 64
    expect = 4 * n_base + 6 * row["params_trainable"] + 12 * 2 * 64 * seq
    assert row["flops_per_token"] == pytest.approx(expect, abs=1)
    assert row["mfu"] is None and row["alloc_retries"] is None and row["min_headroom_mb"] is None
    assert row["near_oom"] is None and row["recorded_by"] == "supervisor"
