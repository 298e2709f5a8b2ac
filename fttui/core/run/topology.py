"""How many processes a resolved profile starts, on how many machines, through which launcher.

The figures are defined once, on :class:`fttui.core.profiles.Profile`; these take a Profile or
a dict (a run folder's ``profile.json``, which may lack newer keys: they take their defaults),
read by :func:`fttui.core.profiles.stored.as_profile`.
"""

from __future__ import annotations

from typing import Any

from fttui.core.profiles.stored import as_profile


def processes_per_node(resolved: Any) -> int:
    return as_profile(resolved).devices.processes_per_node()


def world_size(resolved: Any) -> int:
    return as_profile(resolved).world_size()


def choose_launcher(resolved: Any) -> str:
    return as_profile(resolved).launcher()


__all__ = ["processes_per_node", "world_size", "choose_launcher"]
