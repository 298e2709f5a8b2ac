"""End to end: a real tiny CPU run announces its startup phases, in order, before its first step.

The checks of two runs other tests make anyway (one run each, not two): :func:`tiny_phases_are_said`
on tests/e2e/test_run_cli.py's tiny-lora run, :func:`zero3_phases_are_said` (with building ops)
on tests/e2e/test_methods.py's ZeRO-3 run."""

from __future__ import annotations

from fttui.core.run.files.events import read_jsonl


def tiny_phases_are_said(run_dir, stdout: str) -> None:
    """A tiny CPU run (tiny-lora) announces its phases, in order, before its first step: in its
    events (rank 0, from the worker) and in its headless lines, before the progress lines.
    Checked on the tiny-lora run of tests/e2e/test_run_cli.py::test_headless_run_writes_a_row."""
    events = read_jsonl(run_dir / "events.jsonl")
    names = [e["event"] for e in events]
    first_step = names.index("step")
    phases = [e for e in events[:first_step] if e["event"] == "phase"]
    assert [e["phase"] for e in phases] == ["loading-model", "preparing-data", "first-step"]
    assert all(e["rank"] == 0 and e["source"] == "worker" for e in phases)
    ts = [e["t"] for e in phases]
    assert ts == sorted(ts)
    assert not [e for e in events[first_step:] if e["event"] == "phase"]
    # the headless view printed each change, in order, before the progress lines
    out = stdout.splitlines()
    lines = [ln for ln in out if ln.startswith("phase: ")]
    assert [ln.split(" (")[0] for ln in lines] == ["phase: loading the model", "phase: preparing data",
                                                   "phase: first step", "phase: training"]
    assert out.index(lines[-1]) < next(i for i, ln in enumerate(out) if ln.startswith("step "))


def zero3_phases_are_said(run_dir, stdout: str) -> None:
    """A ZeRO-3 run announces building ops between the data and the first step (DeepSpeed builds
    its CPU Adam then): in its events, and in its headless lines. Checked on the ZeRO-3 run of
    tests/e2e/test_methods.py::test_zero3_offload_runs_on_the_deepspeed_engine (one run for both)."""
    events = read_jsonl(run_dir / "events.jsonl")
    first_step = [e["event"] for e in events].index("step")
    assert [e["phase"] for e in events[:first_step] if e["event"] == "phase"] == [
        "loading-model", "preparing-data", "building-ops", "first-step"]
    # the headless lines: the worker's phases in order; where this checkout's DeepSpeed ops are not
    # built yet, the shared-memory collectives compile while the model loads (zero.Init starts
    # them), a "building ops" seen in the samples between "loading the model" and "preparing data"
    lines = [ln.split(" (")[0] for ln in stdout.splitlines() if ln.startswith("phase: ")]
    assert lines[0] == "phase: loading the model"
    data = lines.index("phase: preparing data")
    assert set(lines[1:data]) <= {"phase: building ops", "phase: loading the model"}
    assert lines[data + 1] == "phase: building ops"
    assert lines[-2:] == ["phase: first step", "phase: training"]
