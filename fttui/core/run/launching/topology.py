"""How many processes a resolved profile starts, on how many machines, through which launcher.

The figures are defined once, on :class:`fttui.core.profiles.Profile`; these read them.
"""

from __future__ import annotations

from fttui.core.profiles.typed import Profile


def processes_per_node(resolved: Profile) -> int:
    return resolved.devices.processes_per_node()


def world_size(resolved: Profile) -> int:
    return resolved.world_size()


def choose_launcher(resolved: Profile) -> str:
    return resolved.launcher()


__all__ = ["processes_per_node", "world_size", "choose_launcher"]
