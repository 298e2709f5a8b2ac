"""The words every view uses for issue 25's figures: a card's speed (SM clock against its maximum,
power against its cap, the throttle reasons, PCIe / NVLink), one rank's memory picture (the run's
NVML memory on its card, torch allocated and reserved, the rest), the memory creep warning in
short, and the why-slow line. Pure: reads snapshots and GPU records."""

from __future__ import annotations

from dataclasses import dataclass

from fttui.core.run.fold.snapshot import RunSnapshot
from fttui.core.run.fold.whyslow import SLOWING
from fttui.monitor import GpuInfo

__all__ = [
    "MemoryPicture",
    "memory_picture",
    "power_text",
    "speed_text",
    "throttle_text",
    "warning_short",
    "picture_text",
    "ESTIMATE_PREDICTS",
]

#: which figure of the memory picture the estimate predicts (docs/estimate.md, docs/performance.md)
ESTIMATE_PREDICTS = "run"


def power_text(g: GpuInfo) -> str:
    """``249/250 W`` (draw against the enforced cap), ``249 W`` without the cap, ``-`` without both."""
    if g.power_w is None:
        return "-"
    return f"{g.power_w:.0f}/{g.power_cap_w:.0f} W" if g.power_cap_w else f"{g.power_w:.0f} W"


def throttle_text(g: GpuInfo) -> str | None:
    """The reasons that slow the card (``power cap, thermal (software)``); ``None`` when none does
    (idle and application-clock reasons are not slowdowns)."""
    slow = [r for r in g.throttle if r in SLOWING or r.startswith("0x")]
    return ", ".join(slow) if slow else None


def speed_text(g: GpuInfo) -> str | None:
    """``SM 1095/1410 MHz  power cap  PCIe 0.3/1.2 GB/s`` (PCIe out/in), whatever of it NVML gave;
    ``None`` when it gave none of it."""
    parts = []
    if g.sm_clock_mhz is not None:
        parts.append(
            f"SM {g.sm_clock_mhz:.0f}/{g.sm_clock_max_mhz:.0f} MHz"
            if g.sm_clock_max_mhz
            else f"SM {g.sm_clock_mhz:.0f} MHz"
        )
    held = throttle_text(g)
    if held:
        parts.append(held)
    if g.pcie_tx_mbs is not None and g.pcie_rx_mbs is not None:
        parts.append(f"PCIe {g.pcie_tx_mbs / 1024:.1f}/{g.pcie_rx_mbs / 1024:.1f} GB/s")
    if g.nvlink_tx_mbs is not None and g.nvlink_rx_mbs is not None:
        parts.append(f"NVLink {g.nvlink_tx_mbs / 1024:.1f}/{g.nvlink_rx_mbs / 1024:.1f} GB/s")
    return "  ".join(parts) if parts else None


@dataclass(frozen=True)
class MemoryPicture:
    """One rank's memory on its card now (MB): ``run`` is NVML's memory of the run's processes on
    the card (what nvidia-smi lists for them), ``reserved`` and ``allocated`` torch's caching
    allocator's, ``rest`` = run - reserved: the CUDA context, NCCL's buffers and whatever else
    allocates outside torch. The estimate predicts the peak of ``run`` (its breakdown: the
    tensors are ``allocated``, its allocator term the gap, its CUDA context the rest)."""

    rank: int
    run: float | None
    reserved: float | None
    allocated: float | None

    @property
    def rest(self) -> float | None:
        return None if self.run is None or self.reserved is None else max(0.0, self.run - self.reserved)


def memory_picture(snap: RunSnapshot, card: GpuInfo, slot: int | None) -> MemoryPicture | None:
    """The memory picture of the rank on ``card`` (``slot``: its CUDA device number in the run,
    the k-th lowest rank's); ``None`` when neither NVML nor torch said anything of it."""
    if slot is None:
        return None
    ranks = sorted(snap.rank_memory) or sorted(snap.ranks)
    rank = ranks[slot] if slot < len(ranks) else slot
    m = snap.rank_memory.get(rank)
    pic = MemoryPicture(rank, card.proc_mem_mb, m.reserved_mb if m else None, m.alloc_mb if m else None)
    return None if pic.run is None and pic.reserved is None else pic


def _gb(mb: float | None) -> str:
    return "-" if mb is None else f"{mb / 1024:.1f}"


def picture_text(p: MemoryPicture) -> str:
    """``alloc 8.1 rsv 9.4 rest 1.2 GB``: torch allocated, reserved and the rest of the run's NVML
    memory on the card (which adds up to the ``run`` figure of the card's bar)."""
    return f"alloc {_gb(p.allocated)} rsv {_gb(p.reserved)} rest {_gb(p.rest)} GB"


def warning_short(message: str | None) -> str | None:
    """The creep warning without its parenthesis: ``rank 0 reserved +40 MiB/step: out of memory in
    ~120 steps`` (lists and briefs)."""
    if not message:
        return None
    cut = message.find(" (")
    return message if cut < 0 else message[:cut]
