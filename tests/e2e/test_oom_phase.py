"""End to end: real CPU out-of-memory runs under --host-memory-limit that fail in the forward, the
backward and the optimizer step, each row naming its phase and the estimate's term that grew.

Measured on this project's 2-core CPU machine (tiny-full, one thread, the limit on top of the
imported stack; docs/reliability.md, "Out of memory"):

- forward: tiny-full at micro batch 232 (the whole shipped data set in one step) under 64 MiB: the
  activations the estimate predicts are 451 MiB; the forward of step 1 fails.
- the wider tiny-full (hidden 512, intermediate 1024: 5.8M parameters, 22 MiB of fp32 weights) at
  micro batch 1: under 28 MiB its forward fails, under 32 to 44 MiB its backward (where the
  gradients, 22 MiB, are made), under 52 to 90 MiB its optimizer step (AdamW's two states, 44 MiB,
  made in the first step), and 100 MiB completes (measured again after issue 44's second part; the
  first measurement put the windows at 40-55 and 65-95 MiB: what the worker maps before the limit
  moves them). 40 and 70 MiB lie inside both measurements' windows.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_fttui
from tests.helpers import only_run_dir

pytestmark = pytest.mark.e2e

WIDE = ["--set", "model.arch_config.hidden_size=512", "--set", "model.arch_config.intermediate_size=1024",
        "--set", "batch_size=1"]


def _oom_row(home, limit: str, *sets: str) -> tuple[dict, str]:
    proc = run_fttui("run", "--profile", "tiny-full", "--headless", "--host-memory-limit", limit,
                     "--set", "max_steps=2", *sets)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    rows = json.loads(run_fttui("results", "--format", "json", check=True).stdout)
    assert len(rows) == 1 and rows[0]["run_id"] == only_run_dir(home).name
    row = rows[0]
    assert row["status"] == "oom" and row["oom_kind"] == "cpu"
    return row, proc.stdout


def test_forward_oom_names_the_activations(fttui_home):
    row, out = _oom_row(fttui_home, "64MiB", "--set", "batch_size=232")
    assert row["oom_phase"] == "forward"
    text = row["oom_explained"]
    assert text.startswith("forward of step 1, longest sequence 128: activations ")
    assert "predicted where" in text and "were left after weights (of limits.host_memory 64MiB)" in text
    # the change that fits by the estimate: the micro batch --on-oom shrink would come to
    assert "would fit by the estimate (activations" in text and "as --on-oom shrink would run it" in text
    assert f"out of memory in the {text}" in out  # the headless end summary
    assert ": oom (cpu, forward)" in out
    table = run_fttui("results", check=True, env=None).stdout
    assert "oom (cpu, forward)" in table


def test_backward_oom_names_the_gradients(fttui_home):
    row, out = _oom_row(fttui_home, "40MiB", *WIDE)
    assert row["oom_phase"] == "backward"
    text = row["oom_explained"]
    assert text.startswith("backward of step 1, longest sequence ")
    # the backward makes the gradients (22 MiB, larger than the activations of micro batch 1)
    assert ": gradients 22 MiB predicted where " in text and "left after weights and activations" in text
    assert "a budget of " in text and "would fit this phase by the estimate" in text
    assert f"out of memory in the {text}" in out


def test_optimizer_step_oom_names_the_optimizer_states(fttui_home, tmp_path):
    row, out = _oom_row(fttui_home, "70MiB", *WIDE)
    assert row["oom_phase"] == "optimizer"
    text = row["oom_explained"]
    assert text.startswith("optimizer of step 1, longest sequence ")
    # AdamW's two fp32 states, made in the first step, beside the weights and the gradients
    assert ": optimizer states 44 MiB predicted where " in text
    assert "left after weights, gradients and the optimizer step's temporaries (of limits.host_memory 70MiB)" in text
    assert f"out of memory in the {text}" in out
    # the report's table of the rows that ran out of memory
    rep = run_fttui("report", "--out", str(tmp_path / "rep"), check=True)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Out of memory" in md and "optimizer states 44 MiB predicted" in md, rep.stdout
