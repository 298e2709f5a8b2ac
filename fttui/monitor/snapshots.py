"""What one sample holds: the frozen ``GpuInfo`` / ``GpuSnapshot`` / ``HostSnapshot`` records and
the tolerant number helpers that read them back.

A snapshot is plain data: figures in MB, percent, watts and degrees, ``None`` where a value could
not be read. ``to_dict`` gives the dict written to ``samples.jsonl``; ``from_dict`` reads such a
dict back and never raises (missing or malformed values become ``None``). :func:`num` is that
tolerant number parser, public for the readers of sample lines. Only stdlib.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, overload

__all__ = [
    "MB",
    "GpuInfo",
    "GpuSnapshot",
    "HostSnapshot",
    "THROTTLE_NAMES",
    "num",
    "opt_int",
    "opt_str",
    "throttle_names",
]

MB = float(2**20)  # bytes per MB: the snapshots hold MB figures


def num(value: Any) -> float | None:
    """A finite float, or ``None`` for anything else (bool, str, NaN, missing)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


@overload
def opt_int(value: Any, default: int) -> int: ...
@overload
def opt_int(value: Any, default: None = None) -> int | None: ...
def opt_int(value: Any, default: int | None = None) -> int | None:
    """``int(value)``, or ``default`` for ``None``, a bool or anything ``int()`` refuses."""
    if value is None or isinstance(value, bool):
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def opt_str(value: Any) -> str | None:
    """``str(value)`` (bytes decoded as UTF-8), or ``None`` for ``None``."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str | None = None
    uuid: str | None = None
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None
    util_pct: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    proc_mem_mb: float | None = None
    mig_uuids: tuple[str, ...] = ()  # UUIDs of the card's MIG devices (MIG mode only)
    # why a card is slow (docs/performance.md, "Why slow"): SM clock now and its maximum (MHz),
    # the enforced power limit (W), NVML's clock event (throttle) reasons now, in words
    # (THROTTLE_NAMES), PCIe and NVLink throughput (MB/s, both directions) where NVML gives them
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    power_cap_w: float | None = None
    throttle: tuple[str, ...] = ()
    pcie_tx_mbs: float | None = None
    pcie_rx_mbs: float | None = None
    nvlink_tx_mbs: float | None = None
    nvlink_rx_mbs: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.mig_uuids:
            d["mig_uuids"] = list(self.mig_uuids)
        else:
            del d["mig_uuids"]  # the common case: sample lines stay as they were
        for key in _SPEED_KEYS:  # figures a driver may not give: left out rather than null
            if d[key] is None:
                del d[key]
        if self.throttle:
            d["throttle"] = list(self.throttle)
        else:
            del d["throttle"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], index: int = 0) -> GpuInfo:
        """Tolerant: missing or malformed values become ``None``; ``index`` is the fallback."""
        if not isinstance(d, dict):
            return cls(index=index)
        return cls(
            index=opt_int(d.get("index"), index),
            name=opt_str(d.get("name")),
            uuid=opt_str(d.get("uuid")),
            mem_used_mb=num(d.get("mem_used_mb")),
            mem_total_mb=num(d.get("mem_total_mb")),
            util_pct=num(d.get("util_pct")),
            power_w=num(d.get("power_w")),
            temp_c=num(d.get("temp_c")),
            proc_mem_mb=num(d.get("proc_mem_mb")),
            mig_uuids=_str_tuple(d.get("mig_uuids")),
            throttle=_str_tuple(d.get("throttle")),
            **{k: num(d.get(k)) for k in _SPEED_KEYS},
        )


_SPEED_KEYS = (
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "power_cap_w",
    "pcie_tx_mbs",
    "pcie_rx_mbs",
    "nvlink_tx_mbs",
    "nvlink_rx_mbs",
)
#: NVML's clock event (throttle) reason bits (nvmlClocksEventReason*), in words
THROTTLE_NAMES: dict[int, str] = {
    0x1: "idle",
    0x2: "applications clocks",
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "thermal (software)",
    0x40: "thermal (hardware)",
    0x80: "power brake",
    0x100: "display clock",
    0x200: "board limit",
    0x400: "reliability",
}


def throttle_names(mask: Any) -> tuple[str, ...]:
    """The words of an NVML clock event reason bit mask (unknown bits as ``0x...``)."""
    if not isinstance(mask, int) or isinstance(mask, bool) or mask <= 0:
        return ()
    out = [name for bit, name in THROTTLE_NAMES.items() if mask & bit]
    rest = mask & ~sum(THROTTLE_NAMES)
    return tuple(out + ([hex(rest)] if rest else []))


def _str_tuple(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(str(v) for v in value if isinstance(v, str) and v)


def _int_tuple(value: Any) -> tuple[int, ...] | None:
    """A tuple of non-negative ints from a list, ``None`` for anything that is not a list."""
    if not isinstance(value, (list, tuple)):
        return None
    out = [opt_int(v) for v in value]
    return tuple(v for v in out if v is not None and v >= 0)


@dataclass(frozen=True)
class GpuSnapshot:
    """One GPU sample. ``gpus`` holds every card NVML sees, in NVML order. ``visible`` is what the
    sampling process's ``CUDA_VISIBLE_DEVICES`` names, as NVML indices in CUDA order (``None``:
    unset or not resolvable, every card; ``()``: none), ``mig`` the visible cards named through a
    MIG instance. ``used_api`` says which NVML memory call gave ``mem_used_mb``: ``"v2"`` (as
    nvidia-smi shows it, without the driver's reserved memory) or ``"v1"`` (with it)."""

    available: bool
    reason: str | None = None
    driver: str | None = None
    cuda: str | None = None
    gpus: tuple[GpuInfo, ...] = field(default_factory=tuple)
    visible: tuple[int, ...] | None = None
    mig: tuple[int, ...] = ()
    used_api: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "reason": self.reason,
            "driver": self.driver,
            "cuda": self.cuda,
            "gpus": [g.to_dict() for g in self.gpus],
            "visible": None if self.visible is None else list(self.visible),
            "mig": list(self.mig),
            "used_api": self.used_api,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> GpuSnapshot:
        if not isinstance(d, dict):
            return cls(available=False, reason="no GPU data")
        raw = d.get("gpus") or []
        gpus = (
            tuple(GpuInfo.from_dict(g, i) for i, g in enumerate(raw) if isinstance(g, dict))
            if isinstance(raw, list)
            else ()
        )
        return cls(
            available=bool(d.get("available", bool(gpus))),
            reason=opt_str(d.get("reason")),
            driver=opt_str(d.get("driver")),
            cuda=opt_str(d.get("cuda")),
            gpus=gpus,
            visible=_int_tuple(d.get("visible")),
            mig=_int_tuple(d.get("mig")) or (),
            used_api=opt_str(d.get("used_api")),
        )


@dataclass(frozen=True)
class HostSnapshot:
    ram_used_mb: float | None = None
    ram_total_mb: float | None = None
    swap_used_mb: float | None = None
    swap_total_mb: float | None = None
    tree_rss_mb: float | None = None
    tree_nprocs: int | None = None
    tree_cpu_pct: float | None = None
    build_rss_mb: float | None = None  # the tree's build tools (compilers, linkers, ninja), by name
    build_nprocs: int | None = None
    # each process ever seen in the tree, its own peak (VmHWM; its sampled RSS where that cannot be
    # read), summed: a spike between two samples is in it; hwm_unread: processes without VmHWM
    tree_hwm_mb: float | None = None
    hwm_unread: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> HostSnapshot:
        if not isinstance(d, dict):
            return cls()
        return cls(
            ram_used_mb=num(d.get("ram_used_mb")),
            ram_total_mb=num(d.get("ram_total_mb")),
            swap_used_mb=num(d.get("swap_used_mb")),
            swap_total_mb=num(d.get("swap_total_mb")),
            tree_rss_mb=num(d.get("tree_rss_mb")),
            tree_nprocs=opt_int(d.get("tree_nprocs")),
            tree_cpu_pct=num(d.get("tree_cpu_pct")),
            build_rss_mb=num(d.get("build_rss_mb")),
            build_nprocs=opt_int(d.get("build_nprocs")),
            tree_hwm_mb=num(d.get("tree_hwm_mb")),
            hwm_unread=opt_int(d.get("hwm_unread")),
        )
