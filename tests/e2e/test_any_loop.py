"""End to end: any training loop reports (issue 42) under the real `fttui run -- CMD`.

- a plain PyTorch loop with one `fttui.report_step` call per step: the row equals the loop's own
  counts (steps, samples, non-padding tokens, loss); on one process and on two torchrun ranks;
- Lightning's own `BoringModel` fitted by Lightning's `Trainer`, library and script untouched by
  fttui: the callback comes from the automatic hook; the row has the Trainer's 50 steps, a
  samples/s and the loss its training step returned; on one process and on two (DDP on CPU);
- Lightning's own `LightningLSTM` on a generated `data/wikitext-2.txt`: its logged `train_loss`
  is the row's loss (one process).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fttui.core.run.files.events import read_jsonl
from tests.conftest import fttui_env, run_fttui
from tests.helpers import only_run_dir, wikitext_folder

pytestmark = pytest.mark.e2e

SCRIPTS = Path(__file__).resolve().parent / "command_scripts"


def _fttui_run(tmp_path, script: str, *launcher: str, **env_extra: str):
    cwd = tmp_path / "work"
    cwd.mkdir(exist_ok=True)
    return _fttui_run_in(tmp_path, cwd, script, *launcher, **env_extra)


def _fttui_run_in(tmp_path, cwd: Path, script: str, *launcher: str, **env_extra: str):
    env = fttui_env(STATE_FILE=str(tmp_path / "state.json"), **env_extra)
    argv = [sys.executable, *launcher, str(SCRIPTS / script)]
    proc = run_fttui("run", "--headless", "--", *argv, cwd=cwd, env=env, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(run_fttui("results", "--format", "json", check=True).stdout)
    assert len(rows) == 1, rows
    return proc, rows[0]


def _events(run_dir: Path) -> list[dict]:
    return list(read_jsonl(run_dir / "events.jsonl"))


def test_plain_loop_reporting_each_step_gives_the_loops_own_counts(tmp_path, fttui_home):
    _proc, row = _fttui_run(tmp_path, "report_loop_script.py", STEPS="12")
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["api"] == "1.0"
    assert row["kind"] == "command" and row["status"] == "completed" and row["error"] is None
    assert row["steps"] == row["total_steps"] == state["steps"] == 12
    assert row["samples"] == state["samples"] == 48
    assert row["tokens"] == state["tokens"]
    assert row["loss"] == pytest.approx(state["loss"], rel=1e-5)
    assert row["samples_per_s"] > 0 and row["tokens_per_s"] > 0
    assert row["model"] == "tiny-loop" and row["world_size"] is not None
    run_dir = only_run_dir(fttui_home)
    events = [e for e in _events(run_dir) if e.get("source") == "report"]
    kinds = [e["event"] for e in events]
    assert kinds[:2] == ["phase", "start"] and kinds[-1] == "end" and kinds.count("step") == 12
    assert {e["rank"] for e in events} == {0} and len({e["pid"] for e in events}) == 1
    start = events[1]
    assert start["params_total"] > 0 and start["model_shape"]["hidden"] == 8
    assert [e["step"] for e in events if e["event"] == "step"] == list(range(1, 13))
    assert json.loads((run_dir / "callback.json").read_text())["via"] == "report"
    assert not (run_dir / "integration.log").exists()


@pytest.mark.slow
def test_plain_loop_under_torchrun_reports_each_rank_from_the_launchers_environment(tmp_path, fttui_home):
    _proc, row = _fttui_run(tmp_path, "report_loop_script.py", "-m", "torch.distributed.run", "--standalone",
                            "--nproc-per-node=2", STEPS="6")
    states = [json.loads((tmp_path / f"state.json.{r}").read_text()) for r in (0, 1)]
    assert row["status"] == "completed" and row["world_size"] == 2
    assert row["steps"] == row["total_steps"] == 6
    assert row["samples"] == sum(s["samples"] for s in states) == 2 * 6 * 4
    assert row["tokens"] == sum(s["tokens"] for s in states)
    assert row["loss"] == pytest.approx(states[0]["loss"], rel=1e-5)  # the lowest rank's
    events = [e for e in _events(only_run_dir(fttui_home)) if e.get("source") == "report"]
    for r in (0, 1):
        mine = [e for e in events if e["rank"] == r]
        assert [e["event"] for e in mine][:2] == ["phase", "start"] and mine[-1]["event"] == "end"
        assert mine[1]["world_size"] == 2 and len({e["pid"] for e in mine}) == 1
        assert mine[-1]["samples"] == states[r]["samples"] and mine[-1]["tokens"] == states[r]["tokens"]


def _lightning_state(tmp_path, rank: int = 0) -> dict:
    return json.loads((tmp_path / f"state.json.{rank}").read_text())


@pytest.mark.parametrize("package", ["lightning", "pytorch_lightning"])
def test_lightning_boring_model_reports_without_a_line_of_fttui(tmp_path, fttui_home, package):
    pytest.importorskip(package)
    proc, row = _fttui_run(tmp_path, "lightning_fit.py", STEPS="50", PACKAGE=package)
    state = _lightning_state(tmp_path)
    assert state["global_step"] == 50 and "FttuiLightningCallback" in state["callbacks"]
    assert row["status"] == "completed" and row["error"] is None
    assert row["steps"] == row["total_steps"] == 50
    assert row["samples"] == state["samples"] == 50  # BoringModel's loader: one sample a batch
    assert row["samples_per_s"] > 0
    assert row["loss"] == pytest.approx(state["losses"][-1], rel=1e-5)
    assert row["world_size"] == 1 and row["model"] == "BoringModel" and row["precision"] == "fp32"
    run_dir = only_run_dir(fttui_home)
    steps = [e for e in _events(run_dir) if e.get("event") == "step"]
    assert {e["source"] for e in steps} == {"lightning"} and len(steps) == 50
    assert [e["loss"] for e in steps] == pytest.approx(state["losses"], rel=1e-6)
    assert not (run_dir / "integration.log").exists()
    assert "COMPLETED" in proc.stdout and "no training seen" not in proc.stdout


def test_lightning_lstm_logged_train_loss_is_the_rows_loss(tmp_path, fttui_home):
    """Lightning's LightningLSTM on a generated data/wikitext-2.txt: the train_loss it logs at
    each step is the step event's loss, and the last one the row's."""
    pytest.importorskip("lightning")
    cwd = wikitext_folder(tmp_path / "work")
    _proc, row = _fttui_run_in(tmp_path, cwd, "lightning_lstm_fit.py", STEPS="10", VOCAB="200")
    state = _lightning_state(tmp_path)
    assert state["global_step"] == 10 and len(state["logged"]) == 10
    assert row["status"] == "completed" and row["steps"] == row["total_steps"] == 10
    assert row["samples"] == state["samples"] == 10 * 20  # the demo's sampler: 20 sequences a batch
    assert row["loss"] == pytest.approx(state["logged"][-1], rel=1e-5)
    steps = [e for e in _events(only_run_dir(fttui_home)) if e.get("event") == "step"]
    assert [e["loss"] for e in steps] == pytest.approx(state["logged"], rel=1e-5)
    assert row["model"] == "LightningLSTM" and row["samples_per_s"] > 0


@pytest.mark.slow
def test_lightning_ddp_on_two_cpu_processes_reports_each_rank(tmp_path, fttui_home):
    pytest.importorskip("lightning")
    _proc, row = _fttui_run(tmp_path, "lightning_fit.py", STEPS="20", DEVICES="2")
    states = [_lightning_state(tmp_path, r) for r in (0, 1)]
    assert [s["global_step"] for s in states] == [20, 20] and [s["world_size"] for s in states] == [2, 2]
    assert row["status"] == "completed" and row["world_size"] == 2
    assert row["steps"] == row["total_steps"] == 20
    assert row["samples"] == sum(s["samples"] for s in states) == 40
    assert row["samples_per_s"] > 0
    assert row["loss"] == pytest.approx(states[0]["losses"][-1], rel=1e-5)  # the lowest rank's
    run_dir = only_run_dir(fttui_home)
    steps = [e for e in _events(run_dir) if e.get("event") == "step"]
    assert sorted({(e["rank"], e["pid"]) for e in steps}) and {e["rank"] for e in steps} == {0, 1}
    assert len({e["pid"] for e in steps}) == 2 and len(steps) == 40
    ends = [e for e in _events(run_dir) if e.get("event") == "end"]
    assert sorted(e["rank"] for e in ends) == [0, 1]
