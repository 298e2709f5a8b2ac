"""The launch's forecast in a run (issue 23): the ETA starts from it and hands over to the measured
rate once it is steady; the row keeps it beside the measured training time."""

from __future__ import annotations

import json

import pytest

from fttui.core.base import fmt
from fttui.core.experiments.quick_forecast import launch_forecast
from fttui.core.profiles import load_profile
from fttui.core.run.files import rundir
from fttui.core.run.control.brief import run_brief
from fttui.core.run.files.events import ForecastEvent, parse_event
from fttui.core.run.fold.state import RunState
from fttui.core.run.files.statusfile import FinalStatus
from fttui.core.run.row.summary import build_row
from tests.helpers import profile_of

FORECAST = {"event": "forecast", "t": 0.5, "rank": -1, "run_seconds": 11.0, "step_seconds": 0.5,
            "warmup_seconds": 1.0, "steps": 20, "calibrated": True, "mfu_source": "calibrated from 1 row"}


def _events(steps: int, step_s: float = 0.2) -> list[dict]:
    out = [FORECAST, {"event": "launch", "t": 1.0, "rank": -1},
           {"event": "start", "t": 2.0, "rank": 0, "total_steps": 20, "world_size": 1}]
    for s in range(1, steps + 1):
        out.append({"event": "step", "t": 2.0 + s * step_s, "rank": 0, "step": s, "total_steps": 20,
                    "samples": 8 * s, "train_time": s * step_s, "step_time": step_s})
    return out


def test_eta_from_the_forecast_until_the_rate_is_steady():
    snap = RunState(warmup_exclude_steps=1).replay(_events(0)).snapshot()
    assert snap.eta_source == "forecast" and snap.eta_s == pytest.approx(1.0 + 20 * 0.5)  # warm-up + 20 steps
    snap = RunState(warmup_exclude_steps=1).replay(_events(1)).snapshot()  # step 1 is the warm-up: not steady
    assert snap.eta_source == "forecast" and snap.eta_s == pytest.approx(19 * 0.5)
    snap = RunState(warmup_exclude_steps=1).replay(_events(5)).snapshot()
    assert snap.eta_source == "measured" and snap.eta_s == pytest.approx(15 * 0.2)  # the measured rate takes over
    assert fmt.eta(snap.eta_s, snap.eta_source) == "00:03"
    assert fmt.eta(11.0, "forecast") == "00:11 (forecast)"
    # without a forecast the first step's own time stands in, as before
    snap = RunState(warmup_exclude_steps=1).replay(_events(1)[1:]).snapshot()
    assert snap.eta_source == "measured" and snap.eta_s == pytest.approx(19 * 0.2)


def test_the_row_keeps_the_forecast_beside_the_measured_time(tmp_path):
    path = tmp_path / "run"
    path.mkdir()
    (path / "profile.json").write_text(json.dumps(load_profile("tiny-lora").to_dict()))
    (path / "command.json").write_text(json.dumps({"argv": ["x"], "env": {}, "kind": "run", "group": None}))
    events = _events(20) + [{"event": "end", "t": 9.0, "rank": 0, "step": 20, "train_time": 4.0, "samples": 160}]
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    rd = rundir.RunDir(path)
    snap = RunState(warmup_exclude_steps=1).replay(events).snapshot()
    row = build_row(rd, snap, FinalStatus(status="completed", returncode=0), t_launch=1.0, t_end=9.0)
    assert row["forecast_s"] == 11.0 and row["forecast_step_s"] == 0.5
    assert row["forecast_source"] == "calibrated from 1 row" and row["duration_s"] == 4.0
    assert isinstance(parse_event(FORECAST), ForecastEvent)


def test_launch_forecast_words_and_the_brief(fttui_home):
    fc = launch_forecast(load_profile("tiny-lora", ["train.max_steps=7"]))
    assert fc["steps"] == 7 and fc["run_seconds"] == pytest.approx(7 * fc["step_seconds"], rel=1e-4)
    assert fc["mfu_source"].startswith("uncalibrated") and fc["calibrated"] is False  # an empty store
    # a data file whose lengths are not measured: every sample at max_seq_len, said in words
    full = launch_forecast(load_profile("tiny-full", ["train.max_steps=3"]))
    assert full["steps"] == 3 and "data lengths not measured" in full["mfu_source"]
    assert launch_forecast(profile_of({"command": {"argv": ["python", "x.py"]}})) is None
    # fttui ls: a live run's ETA before its first step is the forecast's, marked
    path = rundir.paths.ensure_dir(rundir.paths.runs_dir()) / "20260101-000000-tiny-0001"
    path.mkdir()
    (path / "profile.json").write_text(json.dumps({"name": "tiny-lora", "train": {}}))
    (path / "command.json").write_text(json.dumps({"argv": ["x"], "created": 1.0, "kind": "run"}))
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in _events(0)))
    b = run_brief(rundir.RunDir(path), state="running")
    assert b.eta_source == "forecast" and b.eta_text() == "00:11 (forecast)"
