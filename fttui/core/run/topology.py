"""How many processes a resolved profile starts, on how many machines, through which launcher."""

from __future__ import annotations

from fttui.core.base.constants import ZERO3_OFFLOAD


def processes_per_node(resolved: dict) -> int:
    dev = resolved["devices"]
    gpus = int(dev.get("gpus", 1))
    if gpus > 0:
        return gpus
    return max(1, int(dev.get("cpu_processes", 1) or 1))


def world_size(resolved: dict) -> int:
    return processes_per_node(resolved) * int(resolved["devices"].get("nodes", 1))


def choose_launcher(resolved: dict) -> str:
    dev = resolved["devices"]
    launcher = dev.get("launcher", "auto")
    if launcher != "auto":
        return launcher
    if resolved["method"] == ZERO3_OFFLOAD:
        return "deepspeed"
    if processes_per_node(resolved) > 1 or int(dev.get("nodes", 1)) > 1:
        return "torchrun"
    return "python"


__all__ = ["processes_per_node", "world_size", "choose_launcher"]
