"""The memory part of :class:`fttui.core.run.fold.state.RunState`: each rank's peaks from its step
events (the caching allocator's reserved and allocated memory, its retries and OOMs, the
process's peak RSS), each card's peaks from the GPU samples (device used, the run's own), the
host's peaks from the host samples, and the latest GPU and host samples. Pure."""

from __future__ import annotations

import math
from typing import Any

from fttui.core.base.event_records import MemoryWarningEvent, StepEvent
from fttui.core.run.files.sample_records import Sample
from fttui.core.run.fold.memtrend import DEFAULT_HORIZON, MemPoint, RankSeries, WarnedOnce, warnings
from fttui.core.run.fold.snapshot import to_int
from fttui.monitor import GpuSnapshot, HostSnapshot, num

__all__ = ["MemoryFold"]

#: step event key -> the snapshot field of its per-rank peaks
_RANK_PEAKS = {
    "torch_peak_reserved_mb": "torch_peak_reserved_mb",
    "torch_peak_alloc_mb": "torch_peak_alloc_mb",
    "peak_rss_mb": "rank_peak_rss_mb",
    "torch_alloc_retries": "rank_alloc_retries",
    "torch_ooms": "rank_ooms",
}
#: host sample key -> the snapshot field of its peak
_HOST_PEAKS = {
    "tree_rss_mb": "host_peak_tree_rss_mb",
    "ram_used_mb": "host_peak_ram_used_mb",
    "build_rss_mb": "host_peak_build_rss_mb",
    "tree_hwm_mb": "host_tree_hwm_mb",
    "hwm_unread": "host_hwm_unread",
}


class MemoryFold:
    """``horizon``: the steps ahead a memory trend is warned of (``monitor.oom_warn_steps``)."""

    def __init__(self, horizon: int = DEFAULT_HORIZON) -> None:
        self.horizon = horizon
        self.series = RankSeries()  # each rank's memory now, per step (fttui.core.run.fold.memtrend)
        self.warned: str | None = None  # the first memory_warning event's message
        self.announced = WarnedOnce()
        self.rank_peaks: dict[str, dict[int, float]] = {k: {} for k in _RANK_PEAKS}
        self.gpu_peak_used: dict[int, float] = {}
        self.gpu_peak_proc: dict[int, float] = {}
        self.host_peaks: dict[str, float] = {}  # host sample key -> its largest value
        self.gpu: GpuSnapshot | None = None  # the latest GPU sample
        self.host: HostSnapshot | None = None  # the latest host sample

    def on_step(self, ev: StepEvent, rank: int) -> None:
        for key, peaks in self.rank_peaks.items():
            v = num(getattr(ev, key))
            if v is not None and v > peaks.get(rank, -math.inf):
                peaks[rank] = v
        step = to_int(ev.step)
        now = [
            num(v)
            for v in (ev.torch_alloc_mb, ev.torch_reserved_mb, ev.cuda_free_mb, ev.rss_mb, ev.vm_mb, ev.vm_limit_mb)
        ]
        if step is not None and any(v is not None for v in now):
            self.series.add(rank, MemPoint(step, *now))

    def announce(self, found) -> list[dict[str, Any]]:
        """The ``memory_warning`` event fields of the warnings in ``found`` not announced before
        (the supervisor's: one event per rank and limit)."""
        return self.announced.new(found)

    def on_warning(self, ev: MemoryWarningEvent) -> None:
        if isinstance(ev.message, str) and self.warned is None:
            self.warned = ev.message  # the first: the row keeps the one warned of first

    def on_sample(self, sample: Sample) -> None:
        gpu, host = sample.gpu, sample.host
        if gpu is not None:
            self.gpu = gpu
            for g in gpu.gpus:
                for used, peaks in ((g.mem_used_mb, self.gpu_peak_used), (g.proc_mem_mb, self.gpu_peak_proc)):
                    if used is not None and used > peaks.get(g.index, -math.inf):
                        peaks[g.index] = used
        if host is not None:
            self.host = host
            for key in _HOST_PEAKS:
                v = num(getattr(host, key))
                if v is not None and v > self.host_peaks.get(key, -math.inf):
                    self.host_peaks[key] = v

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {field: dict(self.rank_peaks[key]) for key, field in _RANK_PEAKS.items()}
        out.update({field: self.host_peaks.get(key) for key, field in _HOST_PEAKS.items()})
        out["host_hwm_unread"] = to_int(out["host_hwm_unread"])
        out.update(
            gpu_peak_used_mb=dict(self.gpu_peak_used),
            gpu_peak_proc_mb=dict(self.gpu_peak_proc),
            gpu=self.gpu,
            host=self.host,
            rank_memory=self.series.ranks(),
        )
        return out

    def warnings(self, snap_fields: dict[str, Any], total_steps: int | None, step: int | None) -> dict[str, Any]:
        """The snapshot's memory warnings: the trends' (soonest first), else the first event's
        (the host memory left: the latest host sample's)."""
        host = self.host
        avail = None
        if host is not None and host.ram_total_mb is not None and host.ram_used_mb is not None:
            avail = host.ram_total_mb - host.ram_used_mb
        left = total_steps - step if total_steps is not None and step is not None else None
        found = tuple(warnings(snap_fields["rank_memory"], avail, self.horizon, left))
        return {"memory_warnings": found, "memory_warning": found[0].message if found else self.warned}
