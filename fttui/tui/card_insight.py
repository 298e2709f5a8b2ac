"""The GPU card's lines of issue 25 (docs/performance.md): the rank's memory picture (torch
allocated, reserved, the rest of the run's NVML memory), the estimate and which of those figures
it predicts, and the card's speed (SM clock against its maximum, the throttle reasons in red,
PCIe). Display only: the figures are the snapshot's and the estimate's."""

from __future__ import annotations

from rich.text import Text

from fttui.core.base import fmt
from fttui.core.run.fold.insight import memory_picture, picture_text, speed_text, throttle_text
from fttui.core.run.fold.perf import mfu_text
from fttui.core.run.fold.snapshot import CardPerf, RunSnapshot
from fttui.monitor import GpuInfo

__all__ = ["estimate_peaks_mb", "insight_lines", "perf_line", "perf_subtitle"]


def estimate_peaks_mb(config: dict | None) -> tuple[float, ...] | None:
    """The estimate's peak per card (MB, the formula's: NVML's figure of the run's processes) of
    the run's resolved profile (its start event's ``config``); ``None`` when it cannot be made (a
    command run, a CPU run, a profile the estimator cannot express)."""
    if not isinstance(config, dict):
        return None
    try:
        from fttui.core.memory import MIB, estimate
        from fttui.core.profiles.stored import stored_profile

        peaks = estimate(stored_profile(config)).gpu_peak_bytes  # the event's JSON, read as profile.json is
    except Exception:  # EstimateError and whatever a partial profile trips on: no estimate line
        return None
    return tuple(p / MIB for p in peaks) or None


def insight_lines(s: RunSnapshot, g, slot: int | None, estimate_mb: float | None) -> list[Text]:
    """Three lines: the memory picture of the card's rank, the estimate, the card's speed."""
    pic = memory_picture(s, g, slot)
    mem = picture_text(pic) if pic is not None and pic.reserved is not None else ""
    est = (
        f"estimate {estimate_mb / 1024:.1f} GB: predicts run (NVML)"
        if estimate_mb is not None and slot is not None
        else ""
    )
    speed = speed_text(g) or ""
    return [
        Text(mem, no_wrap=True, overflow="ellipsis"),
        Text(est, style="dim", no_wrap=True, overflow="ellipsis"),
        Text(speed, style="bold red" if throttle_text(g) else "", no_wrap=True, overflow="ellipsis"),
    ]


def perf_line(g: GpuInfo, p: CardPerf | None) -> Text:
    """A card's last line: ``MFU 41%  free 18.7 GB  retries 0`` on the run's cards (red when near
    an OOM), ``free 40.0 GB`` on the others."""
    free = None if g.mem_total_mb is None or g.mem_used_mb is None else g.mem_total_mb - g.mem_used_mb
    if p is None:
        return Text(f"free {fmt.mb(free)}", style="dim", no_wrap=True, overflow="ellipsis")
    text = f"MFU {mfu_text(p.mfu)}  free {fmt.mb(free)}"
    if p.alloc_retries is not None:
        text += f"  retries {p.alloc_retries}"
    return Text(text, style="bold red" if p.near_oom else "", no_wrap=True, overflow="ellipsis")


def perf_subtitle(s: RunSnapshot) -> str:
    """The GPU table's subtitle: the run's cards' MFU and the near-OOM warning."""
    if not s.cards:
        return ""
    text = "MFU " + " ".join(mfu_text(p.mfu) for p in s.cards)
    if s.near_oom:
        text += f"  NEAR OOM {s.near_oom_reason}"
    return text
