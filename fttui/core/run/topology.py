"""How many processes a resolved profile starts, on how many machines, through which launcher.

The figures are defined once, on :class:`fttui.core.profiles.Profile`; these take the resolved
dict (or a run folder's ``profile.json``, which may lack newer keys: they take their defaults).
"""

from __future__ import annotations

from fttui.core.profiles import Profile


def processes_per_node(resolved: dict) -> int:
    return Profile.from_partial(resolved).devices.processes_per_node()


def world_size(resolved: dict) -> int:
    return Profile.from_partial(resolved).world_size()


def choose_launcher(resolved: dict) -> str:
    return Profile.from_partial(resolved).launcher()


__all__ = ["processes_per_node", "world_size", "choose_launcher"]
