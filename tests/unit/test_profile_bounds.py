"""Whatever the schema accepts, the worker runs (issue 21): every key with a range or a set of
values, at its bounds and just past them, goes through the profile schema (``apply_overrides``)
and through the worker's own check of ``profile.json`` (``fttui.worker.startup.check_profile``,
no training); both must accept or both refuse. Before, ``max_seq_len = 1`` passed the schema
and failed the run after launch."""

from __future__ import annotations

import copy
import math

import pytest

from fttui.core.base.errors import FttuiError, ProfileError
from fttui.core.profiles import apply_overrides, load_profile
from fttui.core.profiles.schema import SCHEMA, TOP, dotted
from fttui.worker.startup import check_profile
from tests.helpers import profile_of


def _cases():
    for section, fields in SCHEMA.items():
        for key, f in fields.items():
            dk = dotted(section, key)
            if f.lo is not None:
                step = 1 if f.kind == "int" else 0.5
                yield dk, f.lo, True
                yield dk, f.lo - step, False
            if f.hi is not None:
                step = 1 if f.kind == "int" else 0.5
                yield dk, f.hi, not f.hi_open
                yield dk, f.hi + step, False
                if f.hi_open:
                    yield dk, math.nextafter(f.hi, -math.inf), True
            for choice in f.choices:
                yield dk, choice, True
            if f.choices:
                yield dk, f"{f.choices[-1]}x", False
            if f.kind == "size":
                yield dk, "24GiB", True
                yield dk, "24 parsecs", False


CASES = list(_cases())
#: what another key must say for a value to pass the cross-checks (not bounds) of resolution
ALSO = {("model.init", "pretrained"): {"model.name_or_path": "some-org/some-model"}}


@pytest.fixture(scope="module")
def base():
    # max_steps > 0: epochs = 0 is then a valid bound, not the cross-check "epochs or max_steps"
    return load_profile("tiny-lora", ["train.max_steps=10", "devices.gpus=0"]).to_dict()  # profile.json


def test_every_bounded_key_is_walked():
    walked = {dk for dk, _v, _ok in CASES}
    bounded = {dotted(s, k) for s, fs in SCHEMA.items() for k, f in fs.items()
               if f.lo is not None or f.hi is not None or f.choices or f.kind == "size"}
    assert walked == bounded and "data.max_seq_len" in walked and len(CASES) > 60


@pytest.mark.parametrize("dk, value, ok", CASES, ids=[f"{dk}={v!r}" for dk, v, _ in CASES])
def test_schema_and_worker_agree(base, dk, value, ok):
    changes = {**ALSO.get((dk, value), {}), dk: value}
    try:
        apply_overrides(profile_of(base), changes)
        schema_ok = True
    except ProfileError:
        schema_ok = False
    stored = copy.deepcopy(base)
    for k, v in changes.items():
        section, _, key = k.rpartition(".")
        (stored if section == TOP else stored[section])[key] = v
    try:
        check_profile(stored)
        worker_ok = True
    except FttuiError:
        worker_ok = False
    assert (schema_ok, worker_ok) == (ok, ok)


def test_max_seq_len_one_is_refused_before_launch(base):
    with pytest.raises(ProfileError, match=r"data.max_seq_len: must be >= 2, got 1"):
        apply_overrides(profile_of(base), {"data.max_seq_len": 1})
