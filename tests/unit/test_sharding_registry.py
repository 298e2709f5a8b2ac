"""The sharding registry (fttui.core.base.shardings, issue 21): every fact of a kind is read off
its one entry, the facts are the ones the code stated by hand before, and the views follow it."""

from __future__ import annotations

import pytest

from fttui.core.base import fmt, shardings
from fttui.core.base.constants import METHODS, SHARDINGS
from fttui.core.profiles import load_profile
from fttui.core.run.launching.extras import needed_extras

# (family, stage, offload, needs CUDA, launchers, label): what the code said before the registry
BEFORE = {
    "none": ("ddp", 0, False, False, (), ""),
    "zero2": ("deepspeed", 2, False, False, ("deepspeed", "torchrun"), "ZeRO-2"),
    "zero2-offload": ("deepspeed", 2, True, False, ("deepspeed", "torchrun"), "ZeRO-2 offload"),
    "zero3": ("deepspeed", 3, False, False, ("deepspeed", "torchrun"), "ZeRO-3"),
    "zero3-offload": ("deepspeed", 3, True, False, ("deepspeed", "torchrun"), "ZeRO-3 offload"),
    "fsdp": ("fsdp", 0, False, False, ("torchrun", "accelerate"), "FSDP"),
    "fsdp-offload": ("fsdp", 0, True, True, ("torchrun", "accelerate"), "FSDP offload"),
}


def test_the_kinds_are_the_ones_stated_before():
    assert SHARDINGS == tuple(BEFORE) == shardings.NAMES
    for name, (family, stage, offload, cuda, launchers, label) in BEFORE.items():
        k = shardings.get(name)
        assert (k.family, k.stage, k.offload, k.needs_cuda, k.launchers, k.label) == (
            family, stage, offload, cuda, launchers, label), name
        assert fmt.sharding_label(name) == label
        assert set(k.methods) <= set(METHODS)


def test_the_legacy_method_is_full_under_zero3_offload():
    assert dict(shardings.LEGACY_METHODS) == {"full-zero3-offload": shardings.get("zero3-offload")}
    assert shardings.of("full-zero3-offload", None) == ("full", "zero3-offload")
    assert shardings.of("full-zero3-offload", "none") == ("full", "zero3-offload")
    assert shardings.of("lora", None) == ("lora", "none")
    assert fmt.method_label("full-zero3-offload") == "full (ZeRO-3 offload)"


@pytest.mark.parametrize("name", SHARDINGS)
def test_a_read_back_engine_names_its_kind(name):
    k = shardings.get(name)
    assert shardings.from_engine(k.family, k.stage, k.offload) is k
    assert not k.without_offload().offload and k.without_offload().family == k.family


def test_unknown_names():
    assert shardings.find("zero9") is None and shardings.find(None) is shardings.NONE
    with pytest.raises(KeyError):
        shardings.get("zero9")
    assert shardings.from_engine(shardings.DEEPSPEED, 1) is None


@pytest.mark.parametrize("name", SHARDINGS)
def test_launcher_and_extra_follow_the_entry(name):
    k = shardings.get(name)
    method = k.methods[0]
    prof = load_profile("tiny-lora", [f"method={method}", f"sharding={name}", "devices.gpus=0",
                                      "devices.cpu_processes=2"])
    assert prof.sharding_kind() is k
    assert prof.launcher() == (k.launchers[0] if k.launchers else "torchrun")
    assert needed_extras(method, name) == ["train", *([k.extra] if k.extra else [])]  # method is full
