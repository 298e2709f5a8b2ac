"""End to end: a real tiny CPU run announces its startup phases, in order, before its first step."""

from __future__ import annotations

import importlib.util

import pytest

from fttui.core.run.events import read_jsonl
from tests.conftest import run_fttui
from tests.helpers import only_run_dir

pytestmark = pytest.mark.e2e


def test_a_tiny_cpu_run_announces_its_phases_before_the_first_step(fttui_home):
    proc = run_fttui("run", "--profile", "tiny-lora", "--headless", "--set", "max_steps=2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = read_jsonl(only_run_dir(fttui_home) / "events.jsonl")
    names = [e["event"] for e in events]
    first_step = names.index("step")
    phases = [e for e in events[:first_step] if e["event"] == "phase"]
    assert [e["phase"] for e in phases] == ["loading-model", "preparing-data", "first-step"]
    assert all(e["rank"] == 0 and e["source"] == "worker" for e in phases)
    ts = [e["t"] for e in phases]
    assert ts == sorted(ts)
    assert not [e for e in events[first_step:] if e["event"] == "phase"]
    # the headless view printed each change, in order, before the progress lines
    out = proc.stdout.splitlines()
    lines = [ln for ln in out if ln.startswith("phase: ")]
    assert [ln.split(" (")[0] for ln in lines] == ["phase: loading the model", "phase: preparing data",
                                                   "phase: first step", "phase: training"]
    assert out.index(lines[-1]) < next(i for i, ln in enumerate(out) if ln.startswith("step "))


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed")
def test_a_zero3_run_shows_building_ops_between_the_data_and_the_first_step(fttui_home):
    proc = run_fttui("run", "--profile", "tiny-full-zero3", "--headless", "--set", "max_steps=2", timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = read_jsonl(only_run_dir(fttui_home) / "events.jsonl")
    first_step = [e["event"] for e in events].index("step")
    assert [e["phase"] for e in events[:first_step] if e["event"] == "phase"] == [
        "loading-model", "preparing-data", "building-ops", "first-step"]
    # the headless lines: the worker's phases in order; where this checkout's DeepSpeed ops are not
    # built yet, the shared-memory collectives compile while the model loads (zero.Init starts
    # them), a "building ops" seen in the samples between "loading the model" and "preparing data"
    lines = [ln.split(" (")[0] for ln in proc.stdout.splitlines() if ln.startswith("phase: ")]
    assert lines[0] == "phase: loading the model"
    data = lines.index("phase: preparing data")
    assert set(lines[1:data]) <= {"phase: building ops", "phase: loading the model"}
    assert lines[data + 1] == "phase: building ops"
    assert lines[-2:] == ["phase: first step", "phase: training"]
