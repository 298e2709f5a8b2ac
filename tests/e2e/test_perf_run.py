"""End to end on CPU (issue 14): a real tiny-lora run reports its model's shape and no allocator
figures (CPU: null, never 0), and its row has FLOPs per token (the formula, computed again here
from the row's own numbers) and no per-card figures."""

from __future__ import annotations

import json

import pytest

from fttui.core.run.events import read_jsonl
from tests.conftest import run_fttui
from tests.helpers import only_run_dir

pytestmark = pytest.mark.e2e


def test_cpu_run_reports_flops_per_token_and_no_card_figures(fttui_home):
    proc = run_fttui("run", "--profile", "tiny-lora", "--headless", "--set", "max_steps=4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MFU" not in proc.stdout and "NEAR OOM" not in proc.stdout  # no card, nothing to show
    assert "FLOPs/token" in proc.stdout  # the summary lines: a property of the model
    events = read_jsonl(only_run_dir(fttui_home) / "events.jsonl")
    start = next(e for e in events if e.get("event") == "start")
    # tiny-lora's Llama: hidden 64, 2 layers, 4 heads of 16, vocab 512, untied
    assert start["model_shape"] == {"vocab": 512, "hidden": 64, "layers": 2, "attn_dim": 64, "tied": False}
    steps = [e for e in events if e.get("event") == "step"]
    assert steps and all(e["torch_alloc_retries"] is None and e["torch_ooms"] is None for e in steps)
    rows = json.loads(run_fttui("results", "--format", "json", check=True).stdout)
    row = rows[0]
    # LoRA: 4 N_base + 6 N_adapter + 12 L a s, N_base without the input embedding
    seq = row["tokens"] / row["samples"]
    n_base = row["params_total"] - row["params_trainable"] - 512 * 64
    expect = 4 * n_base + 6 * row["params_trainable"] + 12 * 2 * 64 * seq
    assert row["flops_per_token"] == pytest.approx(expect, abs=1)
    assert row["mfu"] is None and row["alloc_retries"] is None and row["min_headroom_mb"] is None
    assert row["near_oom"] is None and row["recorded_by"] == "supervisor"
