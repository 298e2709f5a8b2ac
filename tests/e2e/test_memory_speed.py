"""End to end on CPU (issue 25 parts 2 and 3): a worker that leaks 16 MiB a step (the test hook
FTTUI_TEST_LEAK_MB) under a host memory limit is warned of before it runs out of memory, with the
rate and the steps left that the run then keeps to; a data loader slowed by a test hook
(FTTUI_TEST_SLOW_DATA_S) is named as the cause, with the share the events give, and such a steady
run is never warned of its memory. tiny-lora, short sequences."""

from __future__ import annotations

import json

import pytest

from fttui.core.run.files.events import read_jsonl
from tests.conftest import fttui_env, run_fttui
from tests.helpers import only_run_dir

pytestmark = pytest.mark.e2e


def _row() -> dict:
    return json.loads(run_fttui("results", "--format", "json", check=True).stdout)[0]


def test_a_leak_is_warned_of_before_its_oom(fttui_home):
    proc = run_fttui("run", "--profile", "tiny-lora", "--headless", "--set", "max_steps=120",
                     "--set", "data.max_seq_len=32", "--host-memory-limit", "700MiB",
                     env=fttui_env(FTTUI_TEST_LEAK_MB="16"))
    assert proc.returncode != 0, proc.stdout + proc.stderr
    events = read_jsonl(only_run_dir(fttui_home) / "events.jsonl")
    warned = [e for e in events if e.get("event") == "memory_warning"]
    error = next(e for e in events if e.get("event") == "error")
    assert error["kind"] == "oom" and warned, proc.stdout
    first = warned[0]
    assert first["figure"] == "address space" and first["slope_mb"] == pytest.approx(16.0, abs=0.5)
    # warned while it still had steps to go, and it ran out about when it said
    assert first["step"] < error["step"] and first["steps_left"] >= 5
    assert abs(first["step"] + first["steps_left"] - error["step"]) <= 3, (first, error["step"])
    assert events.index(first) < events.index(error)
    assert "MEMORY CREEP: rank 0 address space +16 MiB/step: out of memory in ~" in proc.stdout
    assert _row()["memory_warning"] == first["message"]


def test_a_slow_data_loader_is_named_and_a_steady_run_never_warns(fttui_home):
    proc = run_fttui("run", "--profile", "tiny-lora", "--headless", "--set", "max_steps=8",
                     env=fttui_env(FTTUI_TEST_SLOW_DATA_S="0.2"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = read_jsonl(only_run_dir(fttui_home) / "events.jsonl")
    steps = [e for e in events if e.get("event") == "step" and e["step"] > 1]  # warm-up step left out
    assert len(steps) == 7 and all(e["data_wait_s"] >= 0.2 for e in steps)  # each batch slept 0.2 s
    share = sum(e["data_wait_s"] for e in steps) / sum(e["step_time"] for e in steps)
    row = _row()
    assert row["why_slow"] == f"input pipeline: {100 * share:.0f}% of step time waiting for data"
    assert row["data_wait_pct"] == pytest.approx(100 * share, abs=0.1)
    assert "why slow: input pipeline:" in proc.stdout
    assert not [e for e in events if e.get("event") == "memory_warning"] and row["memory_warning"] is None
