"""A run that needs a missing extra says which one, before launch (issue 16, packaging)."""

from __future__ import annotations

import pytest

from fttui.core.run.launching.extras import EXTRAS, MissingExtraError, check_extras, needed_extras


def _without(*names: str):
    return lambda name: name not in names


@pytest.mark.parametrize("method, sharding, extras", [
    ("lora", "none", ["train"]),
    ("qlora", "none", ["train", "qlora"]),
    ("lora-int8", "zero2", ["train", "qlora", "zero3"]),
    ("full", "zero3-offload", ["train", "zero3"]),
    ("full-zero3-offload", "none", ["train", "zero3"]),
    ("full", "fsdp", ["train"]),
])
def test_needed_extras(method, sharding, extras):
    assert needed_extras(method, sharding) == extras


def test_a_gptq_or_awq_checkpoint_needs_the_gptq_extra():
    """Issue 22: GPTQ / AWQ checkpoints load through GPT-QModel (and optimum): fttui[gptq]."""
    assert needed_extras("lora", "none", prequant="gptq") == needed_extras("lora", "none", prequant="awq") == [
        "train", "gptq"]
    assert needed_extras("lora", "none", prequant="bitsandbytes") == ["train"]
    with pytest.raises(MissingExtraError, match=r"pip install 'fttui\[gptq\]'"):
        check_extras("lora", "none", prequant="gptq", installed=_without("gptqmodel"))


@pytest.mark.parametrize("method, sharding, missing, extra", [
    ("lora", "none", ("torch",), "train"),
    ("qlora", "none", ("bitsandbytes",), "qlora"),
    ("full", "zero2", ("deepspeed",), "zero3"),
])
def test_missing_extra_is_one_line_naming_the_extra(method, sharding, missing, extra):
    with pytest.raises(MissingExtraError) as e:
        check_extras(method, sharding, installed=_without(*missing))
    msg = str(e.value)
    assert "\n" not in msg and f"pip install 'fttui[{extra}]'" in msg and missing[0] in msg


def test_everything_installed_here_passes():
    check_extras("qlora", "zero3")  # this environment is [dev] = [all]
    assert set(EXTRAS) == {"train", "qlora", "zero3", "gptq"}  # gptq: not in [all] (pyproject.toml)


def test_preflight_names_the_missing_extra_before_launch(monkeypatch, fttui_home):
    from fttui.core.base.errors import ProfileError
    from fttui.core.profiles import load_profile
    from fttui.core.run.launching import extras, launch

    monkeypatch.setattr(extras, "_installed", lambda name: name != "bitsandbytes")
    with pytest.raises(ProfileError) as e:
        launch.launch(load_profile("tiny-qlora"))
    msg = str(e.value)
    assert "needs fttui[qlora] (bitsandbytes not installed)" in msg and "pip install 'fttui[qlora]'" in msg
    assert not (fttui_home / "runs").exists() or not list((fttui_home / "runs").iterdir())  # nothing launched
