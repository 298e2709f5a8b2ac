"""Resource monitoring (NVML GPUs, host memory and the training process tree).

Imports only stdlib and psutil; pynvml is imported lazily by ``GpuSampler``.
"""

from fttui.monitor.samplers import (
    FAKE_GPUS_ENV,
    NO_DRIVER_REASON,
    FakeGpuSampler,
    GpuInfo,
    GpuSampler,
    GpuSnapshot,
    HostSampler,
    HostSnapshot,
    make_gpu_sampler,
    visible_indices,
)

__all__ = [
    "FAKE_GPUS_ENV",
    "NO_DRIVER_REASON",
    "FakeGpuSampler",
    "GpuInfo",
    "GpuSampler",
    "GpuSnapshot",
    "HostSampler",
    "HostSnapshot",
    "make_gpu_sampler",
    "visible_indices",
]
