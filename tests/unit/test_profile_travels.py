"""One typed, frozen Profile travels: load_profile and apply_overrides return it, profile.json is
its serialisation, RunDir.profile() reads it back, and an old run directory's profile.json (the
shapes written before sharding, ``[deepspeed]``, ``train.save`` and ``[command]``) reads back
normalised in that one place."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fttui.core.profiles import Profile, apply_overrides, load_profile
from fttui.core.profiles.stored import stored_profile
from fttui.core.run.files import rundir


@pytest.fixture(autouse=True)
def no_local_profiles(tmp_path, monkeypatch):
    """Only the bundled profiles are found (FTTUI_HOME is the suite's own, tests/conftest.py)."""
    monkeypatch.chdir(tmp_path)


def test_load_profile_returns_the_frozen_profile():
    prof = load_profile("tiny-lora", ["batch_size=3"])
    assert type(prof) is Profile
    assert prof.train.batch_size == 3 and prof.overrides == ("train.batch_size=3",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        prof.train.batch_size = 4  # type: ignore[misc]
    again = apply_overrides(prof, ["grad_accum=2"])
    assert type(again) is Profile
    assert (again.train.batch_size, again.train.grad_accum) == (3, 2)
    assert prof.train.grad_accum == 1  # the original is unchanged
    # its dict (profile.json), read back at the edge, takes the same overrides to the same profile
    assert apply_overrides(stored_profile(prof.to_dict()), ["grad_accum=2"]) == again


def test_profile_json_is_its_serialisation(tmp_path):
    prof = load_profile("tiny-lora", ["lora.target_modules=q_proj,k_proj"])
    rd = rundir.create(prof.to_dict(), ["python", "-c", "pass"], {}, run_id="r1")
    written = json.loads(rd.profile_path.read_text())
    assert written == json.loads(json.dumps(prof.to_dict()))
    assert written["lora"]["target_modules"] == ["q_proj", "k_proj"]
    back = rd.profile()
    assert type(back) is Profile and back == prof
    assert back.lora.target_modules == ("q_proj", "k_proj")


def test_an_old_profile_json_reads_back_normalised(fttui_home):
    """A run directory written before schema 5: the legacy method, ``[zero3]``, no sharding,
    no ``train.save``, no ``[command]``, the launch's kind kept as ``_kind``."""
    prof = load_profile("tiny-full").to_dict()
    old = {k: v for k, v in prof.items() if k not in ("sharding", "deepspeed", "command")}
    old["method"] = "full-zero3-offload"
    old["zero3"] = {"offload_optimizer": True, "offload_params": False, "pin_memory": False}
    old["train"] = {k: v for k, v in prof["train"].items() if k != "save"}
    old["_kind"], old["_group"] = "probe", "p-1"
    path = fttui_home / "runs" / "20240101-000000-old-abcd"
    path.mkdir(parents=True)
    (path / "profile.json").write_text(json.dumps(old))
    rd = rundir.RunDir(path)
    back = rd.profile()
    assert type(back) is Profile
    assert (back.method, back.sharding) == ("full", "zero3-offload")
    assert (back.deepspeed.offload_optimizer, back.deepspeed.offload_params, back.deepspeed.pin_memory) == \
        (True, False, False)
    assert back.deepspeed.zero3_init is True  # not written then: the schema's default
    assert back.train.save == "none"  # what a run without the key did
    assert back.command.argv is None
    assert back.train.batch_size == prof["train"]["batch_size"] and back.model == Profile.from_dict(prof).model
    assert rd.kind_and_group() == ("probe", "p-1")
    assert rd.watch_spec() == {}


def test_a_watch_runs_spec_stays_readable(tmp_path):
    rd = rundir.create({"name": "pid-1-x", "source": "pid 1", "origin": "watch", "method": None,
                        "watch": {"pid": 1, "record": True}}, ["x"], {}, run_id="w1", kind="watch")
    assert rd.watch_spec() == {"pid": 1, "record": True}
    assert rd.profile().name == "pid-1-x"
    assert rundir.RunDir(rd.path / "missing").profile() is None
