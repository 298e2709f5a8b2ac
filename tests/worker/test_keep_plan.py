"""What a run keeps, by its kind: probe trials and sweep cells never save or evaluate (whatever
the profile says), probe trials report to no tracker; the held-out split."""

from __future__ import annotations

import json

import pytest

from fttui.core.base.errors import DataError
from fttui.worker.data import split_eval
from fttui.worker.trainer import plan

from tests.helpers import profile_of

from .conftest import make_profile


def _profile(**train):
    p = make_profile()
    p["train"].update({"save": "steps", "save_steps": 7, "output_dir": None, "eval_steps": 3,
                       "report_to": ["tensorboard"], **train})
    p["data"]["eval_ratio"] = 0.25
    return p


@pytest.mark.parametrize("kind,save,evaluates,report_to", [
    ("run", "steps", True, ["tensorboard"]),
    ("sweep", "none", False, ["tensorboard"]),
    ("probe", "none", False, []),
])
def test_plan_by_kind(tmp_path, kind, save, evaluates, report_to):
    (tmp_path / "command.json").write_text(json.dumps({"argv": [], "kind": kind}))
    keep = plan(profile_of(_profile()), str(tmp_path))
    assert (keep.kind, keep.save, keep.eval, keep.report_to) == (kind, save, evaluates, report_to)
    assert keep.output_dir == str(tmp_path / "output") and keep.save_steps == 7


def test_plan_of_a_profile_without_the_keys_saves_nothing(tmp_path):
    keep = plan(profile_of(make_profile()), str(tmp_path))  # no command.json: a run
    assert (keep.kind, keep.save, keep.eval, keep.report_to) == ("run", "none", False, [])
    assert plan(profile_of(_profile(output_dir="/elsewhere")), str(tmp_path)).output_dir == "/elsewhere"


def test_split_eval_holds_out_a_seeded_fraction():
    data = list(range(40))
    train, held = split_eval(data, 0.2, seed=42)
    assert len(held) == 8 and len(train) == 32
    assert sorted([*train, *held]) == data  # every sample once
    assert [held[i] for i in range(len(held))] == [split_eval(data, 0.2, seed=42)[1][i] for i in range(8)]
    assert [held[i] for i in range(8)] != [split_eval(data, 0.2, seed=7)[1][i] for i in range(8)]
    assert split_eval(data, 0.0, seed=42) == (data, None)
    assert len(split_eval(data[:3], 0.01, seed=1)[1]) == 1  # at least one sample
    with pytest.raises(DataError, match="leaves none to train on"):
        split_eval(data[:1], 0.5, seed=1)


@pytest.mark.parametrize("kind,save,on_oom,recovery", [
    ("run", "end", "shrink", True),  # checkpoints for the recovery alone
    ("run", "none", "shrink", True),
    ("run", "steps", "shrink", False),  # kept anyway, every save_steps
    ("run", "end", "fail", False),
    ("probe", "end", "shrink", False),  # a probe looks for the OOM: it never saves
    ("sweep", "end", "shrink", False),
])
def test_recovery_checkpoints_under_on_oom_shrink(tmp_path, kind, save, on_oom, recovery):
    """train.on_oom = "shrink" saves a resumable checkpoint every save_steps for the next attempt
    (fttui.core.run.launching.oomretry): the latest only when the run would keep none."""
    from fttui.worker.arguments import training_args

    (tmp_path / "command.json").write_text(json.dumps({"argv": [], "kind": kind}))
    prof = _profile(save=save, on_oom=on_oom, eval_steps=0)
    prof["data"]["eval_ratio"] = 0.0
    keep = plan(profile_of(prof), str(tmp_path))
    assert keep.recovery is recovery
    args = training_args(profile_of(prof), str(tmp_path), 1, False)
    saves = recovery or (save == "steps" and kind == "run")
    assert (str(args.save_strategy.value), args.save_steps, args.save_total_limit) == \
        ("steps" if saves else "no", 7, 1 if recovery else None)
