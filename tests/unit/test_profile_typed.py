"""The typed resolved profile: its dataclasses follow SCHEMA, it round-trips the resolved dict of
every shipped profile exactly, and its derived figures are the ones the launcher, the picker and
`fttui profiles` use."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from fttui.core.profiles import (
    META_KEYS,
    SCHEMA,
    SECTIONS,
    DeviceSettings,
    Profile,
    apply_overrides,
    load_profile,
    profile_summary,
)
from fttui.core.profiles.fields import effective_batch
from fttui.core.profiles.typed import SECTION_TYPES
from fttui.core.run.launching.topology import choose_launcher, processes_per_node, world_size

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = sorted((ROOT / "profiles").glob("*.toml"))

#: the annotation each schema kind is held as (a default of None adds "| None")
KIND_TYPES = {
    "str": "str", "int": "int", "float": "float", "bool": "bool", "size": "str",
    "table": "Mapping[str, Any]", "modules": "tuple[str, ...] | str", "names": "tuple[str, ...]",
    "argv": "tuple[str, ...]",
}  # fmt: skip


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No real user profiles, no ./profiles of the caller: only the bundled ones are found."""
    monkeypatch.setenv("FTTUI_HOME", str(tmp_path / "home"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)


def _expected_type(field) -> str:
    base = KIND_TYPES[field.kind]
    return f"{base} | None" if field.default is None else base


def _same_types(a, b, where="") -> None:
    """Equal and of the same types all the way down (a list stays a list, an int an int)."""
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _same_types(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same_types(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def test_section_fields_are_the_schema():
    assert tuple(SECTION_TYPES) == SECTIONS
    for section, cls in SECTION_TYPES.items():
        fields = dataclasses.fields(cls)
        assert [f.name for f in fields] == list(SCHEMA[section]), section
        for f in fields:
            assert f.type == _expected_type(SCHEMA[section][f.name]), f"{section}.{f.name}"


def test_profile_fields_are_the_resolved_keys():
    resolved = load_profile("tiny-lora")
    fields = dataclasses.fields(Profile)
    assert [f.name for f in fields] == list(resolved.to_dict())
    top = {f.name: f.type for f in fields}
    for key, field in SCHEMA[""].items():
        assert top[key] == _expected_type(field), key
    for section, cls in SECTION_TYPES.items():
        assert top[section] == cls.__name__
    assert set(top) == set(META_KEYS) | set(SCHEMA[""]) | set(SECTIONS)


@pytest.mark.parametrize("path", BUNDLED, ids=[p.stem for p in BUNDLED])
def test_bundled_profile_round_trips(path):
    resolved = load_profile(path.stem).to_dict()  # profile.json's content
    profile = Profile.from_dict(resolved)
    again = profile.to_dict()
    assert again == resolved
    _same_types(again, resolved)
    assert json.dumps(again) == json.dumps(resolved)  # profile.json is unchanged
    from_json = json.loads(json.dumps(resolved))  # as a run folder's profile.json reads back
    assert Profile.from_dict(from_json) == profile
    assert Profile.from_partial(resolved) == profile
    assert load_profile(path.stem) == profile
    assert isinstance(profile.devices, DeviceSettings) and profile.train.batch_size >= 1


def test_round_trip_after_overrides():
    resolved = apply_overrides(load_profile("tiny-lora"),
                               ["lora.target_modules=q_proj,k_proj", "model.arch_config.hidden_size=128",
                                "limits.gpu_memory=8GiB", "devices.gpus=0"]).to_dict()
    profile = Profile.from_dict(resolved)
    assert profile.lora.target_modules == ("q_proj", "k_proj")
    assert profile.model.arch_config["hidden_size"] == 128
    assert profile.overrides == tuple(resolved["overrides"])
    _same_types(profile.to_dict(), resolved)


def test_frozen():
    profile = Profile.from_dict(load_profile("tiny-lora").to_dict())
    with pytest.raises(dataclasses.FrozenInstanceError):
        profile.train.batch_size = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        profile.method = "full"  # type: ignore[misc]
    with pytest.raises(TypeError):
        profile.model.arch_config["hidden_size"] = 1  # type: ignore[index]
    resolved = profile.to_dict()
    resolved["model"]["arch_config"]["hidden_size"] = 1  # the dict is a copy
    assert profile.model.arch_config["hidden_size"] != 1


def test_from_dict_takes_exactly_the_resolved_keys():
    resolved = load_profile("tiny-lora").to_dict()
    with pytest.raises(ValueError, match="unknown _kind"):
        Profile.from_dict(resolved | {"_kind": "probe"})
    with pytest.raises(ValueError, match="missing derived"):
        Profile.from_dict({k: v for k, v in resolved.items() if k != "derived"})
    with pytest.raises(ValueError, match=r"\[train\]: missing seed"):
        Profile.from_dict(resolved | {"train": {k: v for k, v in resolved["train"].items() if k != "seed"}})


def test_from_partial_takes_defaults():
    partial = {"name": "demo", "method": "lora", "train": {"batch_size": 4, "grad_accum": 2},
               "devices": {"gpus": 2, "nodes": 1}, "limits": {}, "_kind": "sweep"}
    profile = Profile.from_partial(partial)
    assert profile.name == "demo" and profile.train.seed == SCHEMA["train"]["seed"].default
    assert profile.devices.cpu_processes == 1 and profile.derived == ()
    assert profile.effective_batch() == (4, 2, 2, 16)
    assert tuple(profile.effective_batch()) == (4, 2, 2, 16)


# the definitions these replaced, kept here as the reference the new ones must equal
def _old_processes_per_node(resolved):
    dev = resolved["devices"]
    gpus = int(dev.get("gpus", 1))
    return gpus if gpus > 0 else max(1, int(dev.get("cpu_processes", 1) or 1))


def _old_launcher(resolved):
    dev = resolved["devices"]
    if dev.get("launcher", "auto") != "auto":
        return dev["launcher"]
    if resolved["method"] == "full-zero3-offload" or resolved.get("sharding", "none").startswith("zero"):
        return "deepspeed"
    if resolved.get("sharding", "none").startswith("fsdp"):
        return "torchrun"
    if _old_processes_per_node(resolved) > 1 or int(dev.get("nodes", 1)) > 1:
        return "torchrun"
    return "python"


def _old_effective(resolved):
    train, dev = resolved["train"], resolved["devices"]
    micro, accum = int(train["batch_size"] or 1), int(train["grad_accum"] or 1)
    gpus = int(dev.get("gpus", 1) or 0)
    procs = (gpus if gpus > 0 else int(dev.get("cpu_processes", 1) or 1)) * int(dev.get("nodes", 1) or 1)
    return micro, accum, procs, micro * accum * procs


VARIANTS = [
    [],
    ["gpus=0", "cpu_processes=3"],
    ["gpus=4", "devices.nodes=2", "devices.node_rank=1", "batch_size=3", "grad_accum=5"],
    ["gpus=0", "devices.nodes=2"],
    ["method=full-zero3-offload"],
    ["method=full-zero3-offload", "devices.launcher=torchrun"],
    ["devices.launcher=accelerate", "gpus=2"],
]


@pytest.mark.parametrize("overrides", VARIANTS, ids=[",".join(v) or "as-is" for v in VARIANTS])
def test_derived_figures(overrides):
    for name in ("tiny-lora", "tiny-full"):
        resolved = load_profile(name, overrides)
        d = resolved.to_dict()  # the dict the old definitions read
        profile = Profile.from_dict(d)
        old = _old_effective(d)
        assert profile.effective_batch() == old == effective_batch(resolved)
        assert profile.devices.processes_per_node() == _old_processes_per_node(d) \
            == processes_per_node(resolved)
        assert profile.world_size() == old[2] == world_size(resolved)
        assert profile.launcher() == _old_launcher(d) == choose_launcher(resolved)
        assert profile_summary(resolved)["effective_batch"] == old[3]


def test_size_of_another_type_names_the_size_grammar():
    """Not about the typed profile: the split once lost the size hint here (a NameError)."""
    from fttui.core.base.errors import ProfileError

    with pytest.raises(ProfileError, match=r"expected a size string, got a boolean true \(write a number"):
        apply_overrides(load_profile("tiny-lora"), ["limits.gpu_memory=true"])
