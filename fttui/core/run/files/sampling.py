"""One resource sample of a run's process tree, as every sampler of a run writes it (the
supervisor, a probe, a launched probe trial, a watch): the tree's host figures and its cards,
appended to ``samples.jsonl`` as its record (:class:`fttui.core.run.files.sample_records.Sample`);
and the per-card peak of the run's own memory over samples."""

from __future__ import annotations

import time
from pathlib import Path

from fttui.core.run.files.sample_records import Sample, append_sample
from fttui.monitor import GpuSnapshot, run_cards

__all__ = ["fold_card_peaks", "take_sample"]


def take_sample(host, gpu, samples_path: Path) -> tuple[Sample, GpuSnapshot]:
    """Sample ``host`` (a HostSampler) and, for the tree's pids, ``gpu``; append the sample to
    ``samples_path``; returns the sample record and the GPU snapshot."""
    h = host.sample()
    g = gpu.sample(host.tree_pids())
    sample = Sample(t=time.time(), gpu=g, host=h)
    append_sample(samples_path, sample)
    return sample, g


def fold_card_peaks(peaks: dict[int, float], g: GpuSnapshot, n_cards: int) -> None:
    """Raise ``peaks`` (card index -> MB) to the run's memory on each of its first ``n_cards``
    cards (the run's own processes when NVML lists them, else the card's used memory)."""
    if not g.available:
        return
    for info in run_cards(g)[:n_cards]:  # the run's cards only, not the machine's
        used = info.proc_mem_mb if info.proc_mem_mb is not None else info.mem_used_mb
        if used is not None:
            peaks[info.index] = max(peaks.get(info.index, 0.0), used)
