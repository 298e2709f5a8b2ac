"""Profiles: TOML files describing one fine-tuning run (see docs/architecture.md, "Profiles").

Pure stdlib. The public API is here; the modules split it by concern:

- ``schema``: every key a profile may hold (:data:`SCHEMA`, aliases, meta keys)
- ``values``: checking one value (kinds, choices, ranges, sizes)
- ``discovery``: where profiles are found (:func:`discover`, :func:`find_profile`)
- ``files``: reading a file and its ``extends`` chain; ``overrides``: ``--set``
- ``resolve``: the resolved, typed profile (:func:`load_profile`, :func:`apply_overrides`)
- ``typed``: the profile as frozen dataclasses (:class:`Profile`) and its derived figures; ``frozen``: their
read-only values
- ``stored``: a ``profile.json`` read back as a Profile (older shapes normalised), checked
- ``summary``: :func:`profile_summary`; ``fields``: the picker's override fields
- ``foreign``: LLaMA-Factory and axolotl configs (``--from``)

Inside the package, modules import each other by module, never through this file. The names
below are imported on first use (PEP 562), so that importing one light module of the package
(the app's first frame needs only ``discovery``) does not load the resolver and the typed view.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "ProfileError": "fttui.core.base.errors",
    "SizeError": "fttui.core.base.errors",
    "parse_size": "fttui.core.base.units",
    "ProfileRef": ".discovery",
    "discover": ".discovery",
    "find_profile": ".discovery",
    "apply_overrides": ".resolve",
    "load_profile": ".resolve",
    "ALIASES": ".schema",
    "ALL_KEYS": ".schema",
    "META_KEYS": ".schema",
    "METHODS": ".schema",
    "PATH_KEYS": ".schema",
    "SCHEMA": ".schema",
    "SECTIONS": ".schema",
    "Field": ".schema",
    "profile_summary": ".summary",
    "BatchFigures": ".typed",
    "DataSettings": ".typed",
    "DeepSpeedSettings": ".typed",
    "DeviceSettings": ".typed",
    "LimitSettings": ".typed",
    "LoraSettings": ".typed",
    "ModelSettings": ".typed",
    "MonitorSettings": ".typed",
    "Profile": ".typed",
    "QuantSettings": ".typed",
    "TrainSettings": ".typed",
    "Zero3Settings": ".typed",
    "SUPPORTED_METHODS": ".values",
    "check_profile": ".stored",
    "stored_profile": ".stored",
}

__all__ = sorted(_WHERE)  # noqa: PLE0605  the names the lazy loader serves


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(where, __name__) if where.startswith(".") else importlib.import_module(where)
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
