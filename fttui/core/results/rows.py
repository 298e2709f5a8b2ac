"""Reading one stored row: its GPU, card memory, peaks, versions, interconnect and speed.

Owns the accessors every report table and chart reads a results-store row through (the row's
columns may be JSON text or decoded values): :func:`gpu_name` and :func:`short_gpu` (the one
definition of a GPU's short label, used by the report and the results screen),
:func:`card_memory_mb`, :func:`peaks_mb`, :func:`peak_gb`, :func:`versions`, :func:`s_per_step`,
and the interconnect between a run's cards (:func:`interconnect_label` from NVML's topology,
:func:`row_interconnect` from a row). Pure; no I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "card_memory_mb",
    "gpu_name",
    "interconnect_label",
    "is_oom",
    "num",
    "peak_gb",
    "peaks_mb",
    "row_interconnect",
    "s_per_step",
    "short_gpu",
    "versions",
]


def is_oom(row: Mapping) -> bool:
    return row.get("status") == "oom"


def num(v: Any) -> float | None:
    if v is None or isinstance(v, bool) or v == "":
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def _json(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def _dict(v: Any) -> dict:
    v = _json(v)
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list:
    v = _json(v)
    return v if isinstance(v, list) else []


def short_gpu(name: str | None) -> str:
    """``NVIDIA GeForce RTX 4090`` -> ``RTX 4090`` (for labels)."""
    if not name:
        return ""
    words = [w for w in str(name).split() if w.lower() not in ("nvidia", "geforce", "tesla")]
    return " ".join(words) or str(name)


def gpu_name(row: Mapping) -> str:
    """The row's (first) GPU name, from the row, else its environment; ``cpu`` for CPU rows."""
    if row.get("gpu"):
        return str(row["gpu"])
    names = _list(row.get("gpu_names")) or _dict(row.get("env")).get("gpu_names") or []
    if names:
        return str(names[0])
    cards = _gpus(row)
    if cards and cards[0].get("name"):
        return str(cards[0]["name"])
    return ""


def _gpus(row: Mapping) -> list[dict]:
    return [g for g in _list(_dict(row.get("env")).get("gpus")) if isinstance(g, dict)]


def card_memory_mb(row: Mapping, index: int = 0) -> float | None:
    """Total memory of card ``index`` (MiB) as the worker recorded it (``env.gpus``), or None."""
    cards = _gpus(row)
    if index >= len(cards):
        return None
    g = cards[index]
    for key in ("mem_total_mb", "memory_mb", "total_memory_mb", "memory_total_mb"):
        x = num(g.get(key))
        if x:
            return x
    return None


def peaks_mb(row: Mapping) -> list[float]:
    return [x for x in (num(p) for p in _list(row.get("peak_gpu_mem_mb"))) if x is not None]


def versions(row: Mapping) -> dict:
    out = dict(_dict(row.get("env")))
    out.update(_dict(row.get("versions")))
    return out


# Topology levels of nvmlDeviceGetTopologyCommonAncestor (NVML_TOPOLOGY_*), nearest first,
# and the short names `nvidia-smi topo -m` prints for them.
_TOPOLOGY = {0: "INTERNAL", 10: "SINGLE", 20: "MULTIPLE", 30: "HOSTBRIDGE", 40: "NODE", 50: "SYSTEM"}
_TOPO_ALIASES = {
    "PIX": "SINGLE",
    "PXB": "MULTIPLE",
    "PHB": "HOSTBRIDGE",
    "SYS": "SYSTEM",
    "SOC": "SYSTEM",
    "X": "INTERNAL",
}
_TOPO_RANK = {name: level for level, name in _TOPOLOGY.items()}


def interconnect_label(
    num_gpus: int | None = None,
    nvlink_links: Iterable[int] | int | None = None,
    common_ancestor: int | str | None = None,
) -> str:
    """The interconnect between a run's cards, as the reference tables name it.

    ``nvlink_links``: active NVLink links per card (``nvmlDeviceGetNvLinkState`` over the links,
    counted) or their total; ``common_ancestor``: the farthest ``nvmlDeviceGetTopologyCommonAncestor``
    level over the card pairs (an ``NVML_TOPOLOGY_*`` number, its name ``SYSTEM`` / ``NODE`` /
    ``HOSTBRIDGE`` / ``MULTIPLE`` / ``SINGLE`` / ``INTERNAL``, or the ``nvidia-smi topo -m`` short
    name ``SYS`` / ``PHB`` / ``PXB`` / ``PIX`` / ``NV#``).

    ``NVLink`` when any card has an active NVLink; ``QPI/UPI`` when the path crosses the CPU
    sockets' interconnect (``SYSTEM``); ``PCIe`` otherwise; ``""`` for one card (or none) and when
    nothing is known.
    """
    if num_gpus is not None and num_gpus < 2:
        return ""
    links = nvlink_links
    total = sum(int(x or 0) for x in links) if isinstance(links, Iterable) else int(links or 0)
    if total > 0:
        return "NVLink"
    level = common_ancestor
    if isinstance(level, str):
        name = level.strip().upper().replace("NVML_TOPOLOGY_", "")
        if name.startswith("NV") and name[2:].isdigit():
            return "NVLink"
        name = _TOPO_ALIASES.get(name, name)
        level = _TOPO_RANK.get(name)
    if level is None:
        return ""
    return "QPI/UPI" if int(level) >= 50 else "PCIe"


def row_interconnect(row: Mapping) -> str:
    """The row's interconnect label: its ``interconnect`` column when the store has one, else the
    environment's ``interconnect`` / ``topology`` (``{"nvlink_links", "common_ancestor"}``)."""
    n = row.get("num_gpus")
    if row.get("interconnect"):
        return "" if n is not None and int(n or 0) < 2 else str(row["interconnect"])
    env = _dict(row.get("env"))
    if env.get("interconnect"):
        return "" if n is not None and int(n or 0) < 2 else str(env["interconnect"])
    topo = _dict(env.get("topology"))
    if not topo:
        return ""
    return interconnect_label(None if n is None else int(n or 0), topo.get("nvlink_links"), topo.get("common_ancestor"))


def s_per_step(row: Mapping) -> float | None:
    """Seconds per training step: loop time / steps (as the sweep table), else the probe's."""
    d, steps = num(row.get("duration_s")), num(row.get("steps"))
    if d is not None and steps:
        return d / steps
    return num(row.get("step_time_s"))


def peak_gb(row: Mapping) -> tuple[float | None, str]:
    """(peak memory in GB, which): the largest card's NVML peak, or the host RSS on CPU."""
    p = peaks_mb(row)
    if p:
        return max(p) / 1024, "GPU"
    rss = num(row.get("peak_host_rss_mb"))
    return (None if rss is None else rss / 1024), "host RSS"
