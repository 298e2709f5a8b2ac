"""Results kept (issue 16, parts 2 and 3) without training: the profile keys, the store's schema 6,
the row's kept columns from the events, what ``--resume`` resumes and the one-line refusals."""

from __future__ import annotations

from dataclasses import replace

import json
import sqlite3

import pytest

from fttui.cli.main import main
from fttui.core.base.errors import FttuiError, ProfileError
from fttui.core.profiles import load_profile
from fttui.core.results import store as store_mod
from fttui.core.results.store import Store
from fttui.core.run.files import rundir
from fttui.core.results.row_inputs import Kept
from fttui.core.run.files.events import append_jsonl, parse_event
from fttui.core.run.launching.resume import plan_resume
from fttui.core.run.row.summary import kept_figures


# ------------------------------------------------------------------ profile keys


def test_keep_keys_defaults_and_normal_forms():
    train = load_profile("tiny-lora").train
    assert (train.save, train.save_steps, train.output_dir, train.eval_steps, train.report_to) == \
        ("end", 100, None, 0, [])
    assert load_profile("tiny-lora").data.eval_ratio == 0.0
    for given, want in (("tensorboard", ["tensorboard"]), ("tensorboard, mlflow,tensorboard", ["tensorboard", "mlflow"]),
                        ("none", []), ("[]", []), ('["wandb"]', ["wandb"])):
        assert load_profile("tiny-lora", [f"train.report_to={given}"]).train.report_to == want, given


@pytest.mark.parametrize("override,message", [
    ("train.save=always", "train.save: unknown value 'always' (one of: end, steps, none)"),
    ("train.save_steps=0", "train.save_steps: must be >= 1, got 0"),
    ("train.eval_steps=-1", "train.eval_steps: must be >= 0, got -1"),
    ("data.eval_ratio=1", "data.eval_ratio: must be < 1, got 1"),
    ("train.report_to=tensorbord", "train.report_to: unknown tracker 'tensorbord' (did you mean 'tensorboard'?)"),
    ("train.report_to=[1]", "train.report_to: expected a list of names or a string"),
])
def test_bad_keep_values_are_one_line(override, message):
    with pytest.raises(ProfileError) as err:
        load_profile("tiny-lora", [override])
    assert message in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------------ store


def test_schema_5_store_gains_the_kept_columns(tmp_path):
    path = tmp_path / "results.sqlite"
    conn = sqlite3.connect(path)
    for migration in store_mod.MIGRATIONS[:5]:
        for stmt in migration.split(";"):
            if stmt.strip():
                conn.execute(stmt)
    conn.execute("PRAGMA user_version = 5")
    conn.execute("INSERT INTO runs (run_id, kind, method, sharding, status) VALUES ('old', 'run', 'lora', 'none', 'completed')")
    conn.commit()
    conn.close()
    with Store(path) as store:
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == store_mod.SCHEMA_VERSION == 7
        old = store.get("old")
        assert all(old[c] is None for c in store_mod._ADDED[6])  # no run saved, resumed or evaluated before
        store.put({"run_id": "new", "resumed_from": "old", "resumed_step": 5, "eval_loss": 1.25, "eval_step": 10,
                   "output_dir": "/x/output", "checkpoint": "/x/output/checkpoint-10"})
        new = store.get("new")
    assert (new["resumed_from"], new["resumed_step"], new["eval_loss"], new["checkpoint"]) == \
        ("old", 5, 1.25, "/x/output/checkpoint-10")


# ------------------------------------------------------------------ the row's kept columns


def _run(name: str = "tiny-lora", *, status: str | None = "cancelled", kind: str = "run") -> rundir.RunDir:
    rd = rundir.create(load_profile(name).to_dict(), ["python", "-m", "fttui.worker.train"], {}, kind=kind)
    if status:
        rundir.write_json_atomic(rd.status_path, {"status": status})
    return rd


def _checkpoint(rd: rundir.RunDir, step: int, *, finished: bool = True, rank: int = 0) -> str:
    path = rd.path / "output" / f"checkpoint-{step}"
    path.mkdir(parents=True)
    if finished:
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    append_jsonl(rd.events_path, {"event": "save", "t": float(step), "rank": rank, "kind": "checkpoint",
                                  "step": step, "path": str(path)})
    return str(path)


def test_kept_figures_come_from_the_events_and_the_command():
    rd = _run()
    resume = {"run_id": "20260101-000000-tiny-lora-abcd", "checkpoint": "/c/checkpoint-4", "step": 4}
    rd.write_command(replace(rd.command(), resume=resume))
    events = [{"event": "eval", "rank": 0, "step": 6, "eval_loss": 2.5},
              {"event": "eval", "rank": 0, "step": 9, "eval_loss": 2.25},
              {"event": "save", "rank": 0, "kind": "checkpoint", "step": 6, "path": "/o/checkpoint-6"},
              {"event": "save", "rank": 0, "kind": "checkpoint", "step": 9, "path": "/o/checkpoint-9"},
              {"event": "save", "rank": 0, "kind": "model", "step": 9, "path": "/o"}]
    events = [parse_event(e) for e in events]
    assert kept_figures(rd, events) == Kept(
        resumed_from="20260101-000000-tiny-lora-abcd", resumed_step=4, eval_loss=2.25, eval_step=9,
        output_dir="/o", checkpoint="/o/checkpoint-9")
    # a run that saved checkpoints and was stopped before the end: the checkpoints' folder
    assert kept_figures(rd, events[:3]).output_dir == "/o"
    # nothing saved, nothing evaluated, not resumed
    plain = _run()
    assert kept_figures(plain, []) == Kept()


# ------------------------------------------------------------------ --resume


def test_resume_takes_the_last_finished_checkpoint():
    rd = _run()
    _checkpoint(rd, 5)
    last = _checkpoint(rd, 10)
    _checkpoint(rd, 15, finished=False)  # cut off while it was written: no trainer_state.json
    plan = plan_resume(rd.run_id[:-3])
    assert (plan.run_id, plan.checkpoint, plan.step) == (rd.run_id, last, 10)
    assert plan.profile == load_profile("tiny-lora")


def test_resume_refusals_are_one_line():
    with pytest.raises(FttuiError, match=r"--resume nothing: no run matches"):
        plan_resume("nothing")
    bare = _run()
    with pytest.raises(FttuiError, match=r'saved no checkpoint to continue from \(train.save = "end"'):
        plan_resume(bare.run_id)
    other = _run()
    with pytest.raises(FttuiError, match=r"2 runs match"):
        plan_resume(other.run_id[:8])
    live = _run(status=None)
    _checkpoint(live, 2)
    with pytest.raises(FttuiError, match="still running"):
        plan_resume(live.run_id)


def _runs(home) -> set[str]:
    runs = home / "runs"
    return {p.name for p in runs.iterdir()} if runs.is_dir() else set()


@pytest.mark.parametrize("argv,expect", [
    (["run", "--resume", "20991231"], "--resume 20991231: no run matches"),
    (["run", "--resume", "{bare}"], "saved no checkpoint"),
    (["run", "--resume", "{bare}", "--set", "lr=1"], "--resume runs the profile the run ran with; leave out --set"),
    (["run", "--resume", "{bare}", "-p", "tiny-lora"], "leave out --profile"),
    (["run", "-p", "tiny-lora", "--headless", "--set", "train.save=sometimes"], "train.save: unknown value 'sometimes'"),
])
def test_cli_refuses_in_one_line_and_writes_nothing(argv, expect, fttui_home, capsys):
    bare = _run()
    before = _runs(fttui_home)
    code = main([a.replace("{bare}", bare.run_id) for a in argv])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and expect in err, err
    assert _runs(fttui_home) == before
    assert not (fttui_home / "results.sqlite").exists()


def test_a_tracker_that_is_not_installed_is_named_before_launch(fttui_home, capsys, monkeypatch):
    from fttui.core.profiles import trackers

    monkeypatch.setattr(trackers, "_installed", lambda module: module != "wandb")
    code = main(["run", "-p", "tiny-lora", "--headless", "--set", "train.report_to=tensorboard,wandb"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "train.report_to: tracker 'wandb' not installed: pip install wandb" in err
    assert _runs(fttui_home) == set()
    assert trackers.missing_tracker(["tensorboard", "mlflow"]) is None
