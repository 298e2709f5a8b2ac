"""A real run on fake shared GPUs: CUDA_VISIBLE_DEVICES=2,3 reaches the supervisor's samples, and
the progress line shows cards 2 and 3 first, marked, with the run's memory apart from the other
user's (tests/data/fake_gpus_shared.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import fttui_env, run_fttui

pytestmark = pytest.mark.e2e

SHARED = Path(__file__).resolve().parents[1] / "data" / "fake_gpus_shared.json"


def test_progress_line_and_samples_with_visible_cards(fttui_home):
    env = fttui_env(FTTUI_FAKE_GPUS=str(SHARED), CUDA_VISIBLE_DEVICES="2,3")
    # long enough for a progress line while the training lives (4 steps ended before the first on a quick machine)
    proc = run_fttui("run", "--profile", "tiny-lora", "--set", "max_steps=200", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    parts = [ln.split("gpu run/dev/total MB ", 1)[1].split() for ln in proc.stdout.splitlines()
             if ln.startswith("step ") and "gpu run/dev/total MB" in ln]
    # a line whose sample saw the training alive (a sample after it ended has no pids: "-")
    known = [p for p in parts if not p[1].startswith("-")]
    assert known, proc.stdout
    gpu = known[-1]
    # *2 and *3 first (the run's, marked), then 0 and 1; the run's figure leaves the other user out
    assert gpu[0::2] == ["*2", "*3", "0", "1"]
    run2, dev2, total2 = (float(x) for x in gpu[1].split("/"))
    assert total2 == 40960.0 and dev2 - run2 >= 12000.0
    samples = [json.loads(ln) for ln in next((fttui_home / "runs").iterdir()).joinpath("samples.jsonl")
               .read_text().splitlines()]
    assert samples and all(s["gpu"]["visible"] == [2, 3] for s in samples)
    assert all(s["gpu"]["used_api"] == "v2" for s in samples)
