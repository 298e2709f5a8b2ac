"""Resource monitoring (NVML GPUs, host memory and the training process tree).

Split by concern: :mod:`.snapshots` (the sample records and their number helpers), :mod:`.gpu`
(NVML), :mod:`.visible` (``CUDA_VISIBLE_DEVICES`` resolved to NVML indices, the run's cards first),
:mod:`.fake` (recorded GPUs and the sampler factory), :mod:`.host` (RAM, swap, process tree),
:mod:`.topology` (NVLink / PCIe links). Callers import from the package.
Imports only stdlib and psutil; pynvml is imported lazily by ``GpuSampler`` and ``gpu_topology``.
"""

from fttui.monitor.fake import FAKE_GPUS_ENV, FakeGpuSampler, make_gpu_sampler
from fttui.monitor.gpu import NO_DRIVER_REASON, GpuSampler
from fttui.monitor.host import HostSampler
from fttui.monitor.snapshots import GpuInfo, GpuSnapshot, HostSnapshot, num
from fttui.monitor.topology import gpu_topology
from fttui.monitor.visible import (
    CUDA_VISIBLE_ENV,
    Card,
    Visible,
    cards_run_first,
    resolve_visible,
    run_cards,
    visible_indices,
)

__all__ = [
    "CUDA_VISIBLE_ENV",
    "Card",
    "FAKE_GPUS_ENV",
    "NO_DRIVER_REASON",
    "FakeGpuSampler",
    "GpuInfo",
    "GpuSampler",
    "GpuSnapshot",
    "HostSampler",
    "HostSnapshot",
    "Visible",
    "cards_run_first",
    "gpu_topology",
    "make_gpu_sampler",
    "num",
    "resolve_visible",
    "run_cards",
    "visible_indices",
]
