"""End to end: ``fttui probe --data`` on a data set with a long tail, and ``train.longest_first``.

The data set (made here) has 60 short samples (about 56 tokens) and 4 long ones (203 to 233
tokens) under ``max_seq_len = 512``: the synthetic probe's samples are all 512 tokens long, the
data's worst batch is padded to 233. One probe run; then, in fresh processes: the synthetic
trial at the data's largest fit runs out of memory (so the synthetic probe's answer is smaller),
a run at that batch with the longest samples first completes, one above it runs out of memory in
its first step.
"""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fttui.core.profiles import load_profile
from tests.conftest import run_fttui
from tests.e2e.test_oom_probe import PROBE_LIMIT, _no_process_left, _results, fresh_trial

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(2400)]

PROFILE = """description = "tiny-lora on a data set with a long tail (probe --data test)"
extends = "tiny-lora"

[data]
source = "tail.jsonl"
format = "instruction"
max_seq_len = 512
num_samples = 0
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


def test_data_probe_beats_synthetic_and_holds_for_a_run(fttui_home, tmp_path, monkeypatch):
    work = _tail_profile(tmp_path, monkeypatch)
    proc = run_fttui("probe", "--profile", "tail-lora", "--data", "--range", "1..64", "--steps", "1",
                     "--host-memory-limit", PROBE_LIMIT, "--json", timeout=1500, cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(proc.stdout)
    lf, so = res["largest_fit"], res["smallest_oom"]
    assert res["exact"] and lf is not None and so == lf + 1, res
    assert res["samples"] == "data" and "longest 233 tokens" in res["samples_note"], res["samples_note"]
    assert "longest 233 tokens" in proc.stderr  # said while it runs too
    # every trial fed the longest sample (233 tokens, not max_seq_len's 512): its row says so
    assert {t["longest_seq"] for t in res["trials"]} == {233}
    rows = [r for r in _results("--kind", "probe") if r["group_id"] == res["probe_id"]]
    assert len(rows) == len(res["trials"]) and {r["longest_seq"] for r in rows} == {233}
    assert all(r["dataset"].endswith("(longest samples)") for r in rows)
    _no_process_left(fttui_home)

    # fresh processes, two at a time: the synthetic trial at lf (every sample 512 tokens), then
    # runs at lf (completes) and lf + 1 (runs out of memory in its first step)
    synthetic = load_profile("tail-lora", [f"limits.host_memory={json.dumps(PROBE_LIMIT)}"])
    with ThreadPoolExecutor(max_workers=2) as ex:
        synth, fit, oom = ex.submit(fresh_trial, synthetic, lf), ex.submit(_run, work, lf), ex.submit(_run, work, lf + 1)
        synth, fit, oom = synth.result(), fit.result(), oom.result()
    assert synth == "oom", "the synthetic probe's largest fit should be below the data's"
    assert fit.returncode == 0, fit.stdout + fit.stderr
    assert oom.returncode == 3, oom.stdout + oom.stderr
    runs = {r["batch_size"]: r for r in _results("--kind", "run")}
    assert runs[lf]["status"] == "completed" and runs[lf]["longest_seq"] == 233 and runs[lf]["steps"] == 2
    assert runs[lf + 1]["status"] == "oom" and runs[lf + 1]["oom_kind"] == "cpu"
    assert runs[lf + 1]["error_step"] == 0  # in its first step: the longest samples came first
