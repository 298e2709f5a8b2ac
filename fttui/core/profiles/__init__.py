"""Profiles: TOML files describing one fine-tuning run (see docs/architecture.md, "Profiles").

Pure stdlib. The public API is here; the modules split it by concern:

- ``schema``: every key a profile may hold (:data:`SCHEMA`, aliases, meta keys)
- ``values``: checking one value (kinds, choices, ranges, sizes)
- ``discovery``: where profiles are found (:func:`discover`, :func:`find_profile`)
- ``files``: reading a file and its ``extends`` chain; ``overrides``: ``--set``
- ``resolve``: the resolved dict (:func:`load_profile`, :func:`apply_overrides`)
- ``typed``: the resolved dict as frozen dataclasses (:class:`Profile`) and its derived figures
- ``summary``: :func:`profile_summary`; ``fields``: the picker's override fields

Inside the package, modules import each other by module, never through this file.
"""

from __future__ import annotations

from fttui.core.base.errors import ProfileError, SizeError
from fttui.core.base.units import parse_size
from fttui.core.profiles.discovery import ProfileRef, discover, find_profile
from fttui.core.profiles.resolve import apply_overrides, load_profile
from fttui.core.profiles.schema import (
    ALIASES, ALL_KEYS, META_KEYS, METHODS, PATH_KEYS, SCHEMA, SECTIONS, Field)
from fttui.core.profiles.summary import profile_summary
from fttui.core.profiles.typed import (
    BatchFigures, DataSettings, DeepSpeedSettings, DeviceSettings, LimitSettings, LoraSettings, ModelSettings,
    MonitorSettings, Profile, QuantSettings, TrainSettings, Zero3Settings)
from fttui.core.profiles.values import SUPPORTED_METHODS

__all__ = [
    "ALIASES", "ALL_KEYS", "META_KEYS", "METHODS", "PATH_KEYS", "SCHEMA", "SECTIONS",
    "SUPPORTED_METHODS", "BatchFigures", "DataSettings", "DeepSpeedSettings", "DeviceSettings", "Field",
    "LimitSettings", "LoraSettings", "ModelSettings", "MonitorSettings", "Profile", "ProfileError",
    "ProfileRef", "QuantSettings", "SizeError", "TrainSettings", "Zero3Settings",
    "apply_overrides", "discover", "find_profile", "load_profile", "parse_size", "profile_summary",
]
