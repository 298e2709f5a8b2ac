"""End to end: ``fttui probe --data`` on a data set with a long tail, and ``train.longest_first``.

The data set (made here) has 60 short samples (about 56 tokens) and 4 long ones (203 to 233
tokens) under ``max_seq_len = 512``: the synthetic probe's samples are all 512 tokens long, the
data's worst batch is padded to 233.

Its boundary is the probe screen's test (tests/tui/test_probe_screen.py::
test_probe_live_boundary_then_run_at_found_value, the form's data toggle): the probe under a
host budget, then, in fresh processes, the synthetic trial at the data's largest fit runs out of
memory (so the synthetic probe's answer is smaller), a run at that batch with the longest samples
first completes, one above it runs out of memory in its first step. Here: what the CLI says of a
``--data`` probe, on a range that all fits.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.conftest import run_fttui
from tests.e2e.test_oom_probe import PROBE_LIMIT, _no_process_left, _results

pytestmark = [pytest.mark.e2e]

PROFILE = """description = "tiny-lora on a data set with a long tail (probe --data test)"
extends = "tiny-lora"

[data]
source = "tail.jsonl"
format = "instruction"
max_seq_len = 512
num_samples = 0

[train]
max_steps = 2
"""


def _tail_profile(tmp_path, monkeypatch) -> Path:
    work = tmp_path / "cwd"
    (work / "profiles").mkdir(parents=True)
    rng = random.Random(0)
    rows = [{"instruction": "Say a word.", "input": "", "output": "w" * rng.randint(5, 15)} for _ in range(60)]
    rows += [{"instruction": "Write a long line.", "input": "", "output": "x" * (150 + 10 * i)} for i in range(4)]
    rng.shuffle(rows)
    (work / "profiles" / "tail.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (work / "profiles" / "tail-lora.toml").write_text(PROFILE)
    monkeypatch.chdir(work)
    return work


def _run(work: Path, batch: int):
    return run_fttui("run", "--profile", "tail-lora", "--headless", "--host-memory-limit", PROBE_LIMIT,
                     "--set", f"batch_size={batch}", "--set", "train.longest_first=true", "--set", "max_steps=2",
                     timeout=600, cwd=work)


def test_data_probe_cli_and_everything_fits(fttui_home, tmp_path, monkeypatch):
    """`fttui probe --data`: which samples it used, in its JSON, on stderr while it runs and in
    every trial's row. The range all fits (no budget), which is the other end of the probe: the
    climb in one process, then the top value checked in a fresh one, exit 0 with a note."""
    work = _tail_profile(tmp_path, monkeypatch)
    proc = run_fttui("probe", "--profile", "tail-lora", "--data", "--range", "1..4", "--steps", "1", "--json",
                     timeout=600, cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(proc.stdout)
    assert res["largest_fit"] == 4 and res["smallest_oom"] is None and res["exact"] is True, res
    assert res["model_loads"] == 2  # the climb, then the top value checked in a fresh process
    assert [t["value"] for t in res["trials"]] == [1, 2, 4, 4]
    assert [t["fresh"] for t in res["trials"]] == [True, False, False, True]
    assert "fits" in res["note"]
    assert res["samples"] == "data" and "longest 233 tokens" in res["samples_note"], res["samples_note"]
    assert "longest 233 tokens" in proc.stderr  # said while it runs too
    # every trial fed the longest sample (233 tokens, not max_seq_len's 512): its row says so
    assert {t["longest_seq"] for t in res["trials"]} == {233}
    rows = [r for r in _results("--kind", "probe") if r["group_id"] == res["probe_id"]]
    assert len(rows) == len(res["trials"]) and {r["longest_seq"] for r in rows} == {233}
    assert all(r["dataset"].endswith("(longest samples)") for r in rows)
    assert _results("--kind", "run") == []
    _no_process_left(fttui_home)
