"""A ``profile.json`` read back as a :class:`~fttui.core.profiles.typed.Profile`: the one place
where the shapes older runs wrote are normalised.

- a legacy method (``full-zero3-offload``, before schema 5) is ``full`` under its sharding kind
  (:func:`fttui.core.base.shardings.of`); a missing ``sharding`` is none;
- the ``[zero3]`` table (before sharding) is ``[deepspeed]``;
- a missing ``train.save`` (written before the key existed, or by hand) saves nothing, as runs did
  then; every other missing key takes the schema's default and keys that are no setting (a watch
  run's ``watch``, the old ``_kind``) are left out.

It is one of the edges where a dict becomes a Profile (with TOML resolution,
:mod:`fttui.core.profiles.resolve`, and the ``--from`` configs, :mod:`fttui.core.profiles.foreign`);
past them every function takes the Profile itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fttui.core.base import shardings
from fttui.core.profiles.schema import SCHEMA, TOP
from fttui.core.profiles.typed import Profile
from fttui.core.profiles.values import check_value

#: what a stored profile without the key meant (the schema's default otherwise)
OLD_DEFAULTS: dict[str, Any] = {"train.save": "none"}


def stored_profile(obj: Mapping[str, Any]) -> Profile:
    """``obj`` (a parsed ``profile.json``) as a Profile, older shapes normalised."""
    method, sharding = shardings.of(obj.get("method"), obj.get("sharding"))
    values = {**obj, "sharding": sharding}
    if method is not None:
        values["method"] = method
    if "deepspeed" not in obj and isinstance(obj.get(shardings.LEGACY_SECTION), Mapping):
        values["deepspeed"] = obj[shardings.LEGACY_SECTION]
    for dotted, value in OLD_DEFAULTS.items():
        section, key = dotted.split(".")
        given = obj.get(section)
        if not isinstance(given, Mapping) or key not in given:
            values[section] = {**(given if isinstance(given, Mapping) else {}), key: value}
    return Profile.from_partial(values)


def check_profile(profile: Profile, file: str) -> None:
    """Every value of ``profile`` through the schema's own check
    (:func:`~fttui.core.profiles.values.check_value`: kind, choices, range): what the worker
    refuses is exactly what a profile file may not hold. ProfileError (one line) naming ``file``
    and the key; an optional key left unset (``None``) passes."""
    flat = profile.to_dict()
    for section, fields in SCHEMA.items():
        values = flat if section == TOP else flat[section]
        for key, field in fields.items():
            if values[key] is None and field.default is None:
                continue
            check_value(section, key, values[key], file)


__all__ = ["OLD_DEFAULTS", "check_profile", "stored_profile"]
