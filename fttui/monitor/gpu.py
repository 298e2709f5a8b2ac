"""The real GPU sampler: ``GpuSampler`` reads every device through NVML (pynvml, imported lazily
on the first sample), and :func:`visible_indices` reads ``CUDA_VISIBLE_DEVICES``.

Contract (docs/architecture.md, "Monitor core"): ``sample()`` never raises; a value NVML cannot
give is ``None``; a missing driver gives ``GpuSnapshot(available=False, reason=NO_DRIVER_REASON)``.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable

from fttui.monitor.snapshots import MB, GpuInfo, GpuSnapshot, num, opt_str

__all__ = ["NO_DRIVER_REASON", "GpuSampler", "visible_indices"]

NO_DRIVER_REASON = "NVML library not found: no NVIDIA driver"


def visible_indices(value: str | None = None) -> list[int] | None:
    """Parse ``CUDA_VISIBLE_DEVICES`` (or ``value``) into NVML indices.

    ``None`` when the variable is unset (all devices visible) or names devices by UUID / MIG id
    (not resolved here). Like CUDA, parsing stops at the first invalid or negative entry, so
    ``""`` and ``"-1"`` give ``[]``; duplicates are dropped. Only informative: the samplers show
    every device NVML sees.
    """
    if value is None:
        value = os.environ.get("CUDA_VISIBLE_DEVICES")
        if value is None:
            return None
    out: list[int] = []
    for i, part in enumerate(value.split(",")):
        part = part.strip()
        try:
            n = int(part)
        except ValueError:
            if i == 0 and part:
                return None  # UUID or MIG syntax
            break
        if n < 0:
            break
        if n not in out:
            out.append(n)
    return out


class GpuSampler:
    """NVML sampler. NVML is initialised lazily on the first ``sample()`` (once); if that fails,
    every ``sample()`` returns ``available=False`` with the reason. Never raises."""

    visible_indices = staticmethod(visible_indices)

    def __init__(self) -> None:
        self._nvml: Any = None
        self._tried = False
        self._reason: str | None = None
        self._driver: str | None = None
        self._cuda: str | None = None
        self._handles: list[Any] = []
        self._static: list[tuple[str | None, str | None]] = []  # (name, uuid) per device

    # -- init / close
    def _init(self) -> None:
        self._tried = True
        try:
            import pynvml  # noqa: PLC0415 (lazy on purpose)
        except Exception as exc:  # ImportError and anything odd inside the module
            self._reason = f"NVML unavailable: pynvml cannot be imported ({exc})"
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound:
            self._reason = NO_DRIVER_REASON
            return
        except pynvml.NVMLError as exc:
            self._reason = f"NVML init failed: {exc}"
            return
        except Exception as exc:  # OSError from ctypes and the like
            self._reason = f"NVML init failed: {exc}"
            return
        self._nvml = pynvml
        self._driver = opt_str(self._call(pynvml.nvmlSystemGetDriverVersion))
        cuda = self._call(pynvml.nvmlSystemGetCudaDriverVersion)
        if isinstance(cuda, int) and cuda > 0:
            self._cuda = f"{cuda // 1000}.{(cuda % 1000) // 10}"
        count = self._call(pynvml.nvmlDeviceGetCount)
        if not isinstance(count, int):
            count = 0
        for i in range(count):
            handle = self._call(pynvml.nvmlDeviceGetHandleByIndex, i)
            self._handles.append(handle)
            if handle is None:
                self._static.append((None, None))
            else:
                self._static.append(
                    (
                        opt_str(self._call(pynvml.nvmlDeviceGetName, handle)),
                        opt_str(self._call(pynvml.nvmlDeviceGetUUID, handle)),
                    )
                )

    @staticmethod
    def _call(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:  # NVMLError, ctypes errors, missing symbols in old drivers
            return None

    def close(self) -> None:
        """Shut NVML down (if it was initialised). A later ``sample()`` initialises it again."""
        nvml, self._nvml = self._nvml, None
        if nvml is not None:
            self._call(nvml.nvmlShutdown)
        self._tried = False
        self._reason = None
        self._handles = []
        self._static = []

    def __enter__(self) -> "GpuSampler":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def reason(self) -> str | None:
        return self._reason

    # -- sampling
    def sample(self, pids: Iterable[int] = ()) -> GpuSnapshot:
        """Figures for every device NVML sees; ``proc_mem_mb`` sums the GPU memory that NVML
        reports for ``pids`` on that device (``None`` without pids or when not obtainable)."""
        try:
            if not self._tried:
                self._init()
            if self._nvml is None:
                return GpuSnapshot(available=False, reason=self._reason or "NVML not initialised", gpus=())
            wanted = {int(p) for p in pids}
            gpus = tuple(self._device(i, h, wanted) for i, h in enumerate(self._handles))
            return GpuSnapshot(available=True, reason=None, driver=self._driver, cuda=self._cuda, gpus=gpus)
        except Exception as exc:  # belt and braces: sampling never raises
            return GpuSnapshot(available=False, reason=f"NVML sampling failed: {exc}", gpus=())

    def _device(self, index: int, handle: Any, pids: set[int]) -> GpuInfo:
        name, uuid = self._static[index]
        if handle is None:
            return GpuInfo(index=index, name=name, uuid=uuid)
        nv = self._nvml
        used = total = None
        mem = self._call(nv.nvmlDeviceGetMemoryInfo, handle)
        if mem is not None:
            used = num(getattr(mem, "used", None))
            total = num(getattr(mem, "total", None))
            used = None if used is None else used / MB
            total = None if total is None else total / MB
        util = self._call(nv.nvmlDeviceGetUtilizationRates, handle)
        util_pct = num(getattr(util, "gpu", None)) if util is not None else None
        power = num(self._call(nv.nvmlDeviceGetPowerUsage, handle))
        temp = num(self._call(nv.nvmlDeviceGetTemperature, handle, getattr(nv, "NVML_TEMPERATURE_GPU", 0)))
        proc_mem = self._proc_mem(handle, pids) if pids else None
        return GpuInfo(
            index=index,
            name=name,
            uuid=uuid,
            mem_used_mb=used,
            mem_total_mb=total,
            util_pct=util_pct,
            power_w=None if power is None else power / 1000.0,
            temp_c=temp,
            proc_mem_mb=proc_mem,
        )

    def _proc_mem(self, handle: Any, pids: set[int]) -> float | None:
        procs = self._call(self._nvml.nvmlDeviceGetComputeRunningProcesses, handle)
        if procs is None:
            return None
        total = 0.0
        unknown = False
        for p in procs:
            if getattr(p, "pid", None) not in pids:
                continue
            used = num(getattr(p, "usedGpuMemory", None))
            if used is None:  # NVML_VALUE_NOT_AVAILABLE (e.g. without permission / in some VMs)
                unknown = True
            else:
                total += used
        if unknown and total == 0.0:
            return None
        return total / MB
