"""The real GPU sampler: ``GpuSampler`` reads every device through NVML (pynvml, imported lazily
on the first sample); each sample also says which cards this process's ``CUDA_VISIBLE_DEVICES``
names (:mod:`fttui.monitor.visible`).

Contract (docs/architecture.md, "Monitor core"): ``sample()`` never raises; a value NVML cannot
give is ``None``; a missing driver gives ``GpuSnapshot(available=False, reason=NO_DRIVER_REASON)``.

Device memory: ``mem_used_mb`` comes from NVML's v2 memory call (``nvmlDeviceGetMemoryInfo(h,
version=nvmlMemory_v2)``, nvidia-ml-py >= 12.535 and a driver that has it), whose ``used`` leaves
out the memory the driver reserves, as nvidia-smi shows it; where the binding or the driver lacks
it, the v1 call's ``used`` (reserved memory included, ~0.5 GB on an idle H100). The snapshot's
``used_api`` says which. ``proc_mem_mb`` is the run's own: NVML's per-process memory of the pids
given (the run's process tree).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from fttui.monitor.snapshots import MB, GpuInfo, GpuSnapshot, num, opt_str, throttle_names
from fttui.monitor.visible import resolve_visible, visible_indices

__all__ = ["NO_DRIVER_REASON", "GpuSampler", "visible_indices"]

NO_DRIVER_REASON = "NVML library not found: no NVIDIA driver"
# pynvml's errors saying the v2 memory call is not there (the driver predates it)
_NO_V2_ERRORS = ("NVMLError_FunctionNotFound", "NVMLError_NotSupported", "NVMLError_ArgumentVersionMismatch")


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
        self._static: list[tuple[str | None, str | None, tuple[str, ...]]] = []  # (name, uuid, MIG uuids)
        self._mem_v2 = True  # try the v2 memory call until the binding or the driver lacks it
        self._v1_used = False  # a card of the current sample fell back to the v1 call
        self._nvlink_prev: dict[int, tuple[float, float, float]] = {}  # index -> (t, tx KiB, rx KiB)
        self._no_nvlink = False

    # -- init / close
    def _init(self) -> None:
        self._tried = True
        try:
            import pynvml  # lazy on purpose
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
                self._static.append((None, None, ()))
            else:
                self._static.append(
                    (
                        opt_str(self._call(pynvml.nvmlDeviceGetName, handle)),
                        opt_str(self._call(pynvml.nvmlDeviceGetUUID, handle)),
                        self._mig_uuids(handle),
                    )
                )

    def _mig_uuids(self, handle: Any) -> tuple[str, ...]:
        """The UUIDs of the card's MIG devices; ``()`` outside MIG mode or without the calls."""
        nv = self._nvml
        mode = self._call(getattr(nv, "nvmlDeviceGetMigMode", None), handle)
        if not isinstance(mode, (list, tuple)) or not mode or mode[0] != getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1):
            return ()
        count = self._call(getattr(nv, "nvmlDeviceGetMaxMigDeviceCount", None), handle)
        out = []
        for j in range(count if isinstance(count, int) else 0):
            # an empty slot raises: None
            mig = self._call(getattr(nv, "nvmlDeviceGetMigDeviceHandleByIndex", None), handle, j)
            uuid = opt_str(self._call(nv.nvmlDeviceGetUUID, mig)) if mig is not None else None
            if uuid:
                out.append(uuid)
        return tuple(out)

    @staticmethod
    def _call(fn: Callable[..., Any] | None, *args: Any, **kwargs: Any) -> Any:
        if fn is None:  # a call this pynvml or driver lacks
            return None
        try:
            return fn(*args, **kwargs)
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
        self._mem_v2 = True

    def __enter__(self) -> GpuSampler:
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
            self._v1_used = False
            gpus = tuple(self._device(i, h, wanted) for i, h in enumerate(self._handles))
            vis = resolve_visible(None, gpus)
            api = None if not gpus else ("v1" if self._v1_used else "v2")
            return GpuSnapshot(
                available=True,
                reason=None,
                driver=self._driver,
                cuda=self._cuda,
                gpus=gpus,
                visible=vis.indices,
                mig=vis.mig,
                used_api=api,
            )
        except Exception as exc:  # belt and braces: sampling never raises
            return GpuSnapshot(available=False, reason=f"NVML sampling failed: {exc}", gpus=())

    def _device(self, index: int, handle: Any, pids: set[int]) -> GpuInfo:
        name, uuid, migs = self._static[index]
        if handle is None:
            return GpuInfo(index=index, name=name, uuid=uuid, mig_uuids=migs)
        nv = self._nvml
        used = total = None
        mem = self._memory(handle)
        if mem is not None:
            used = num(getattr(mem, "used", None))
            total = num(getattr(mem, "total", None))
            used = None if used is None else used / MB
            total = None if total is None else total / MB
        util = self._call(getattr(nv, "nvmlDeviceGetUtilizationRates", None), handle)
        util_pct = num(getattr(util, "gpu", None)) if util is not None else None
        power = num(self._call(getattr(nv, "nvmlDeviceGetPowerUsage", None), handle))
        temp = num(
            self._call(getattr(nv, "nvmlDeviceGetTemperature", None), handle, getattr(nv, "NVML_TEMPERATURE_GPU", 0))
        )
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
            mig_uuids=migs,
            **self._speed(index, handle),
        )

    def _speed(self, index: int, handle: Any) -> dict[str, Any]:
        """What slows a card: SM clock against its maximum, the enforced power limit, the clock
        event (throttle) reasons (``nvmlDeviceGetCurrentClocksEventReasons``, the older
        ``...ThrottleReasons`` where the binding predates it), PCIe throughput (NVML's KB/s over
        its last 20 ms) and NVLink throughput (its cumulative KiB counters, differenced between
        two samples). What the card or driver does not give is ``None``."""
        nv = self._nvml
        sm = getattr(nv, "NVML_CLOCK_SM", 1)
        cap = num(self._call(getattr(nv, "nvmlDeviceGetEnforcedPowerLimit", None), handle))
        reasons = self._call(
            getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None),
            handle,
        )
        tx, rx = (num(self._call(getattr(nv, "nvmlDeviceGetPcieThroughput", None), handle, c)) for c in (0, 1))
        out = {
            "sm_clock_mhz": num(self._call(getattr(nv, "nvmlDeviceGetClockInfo", None), handle, sm)),
            "sm_clock_max_mhz": num(self._call(getattr(nv, "nvmlDeviceGetMaxClockInfo", None), handle, sm)),
            "power_cap_w": None if cap is None else cap / 1000.0,
            "throttle": throttle_names(reasons),
            "pcie_tx_mbs": None if tx is None else tx / 1024.0,  # KB/s -> MB/s (MiB, as every figure here)
            "pcie_rx_mbs": None if rx is None else rx / 1024.0,
        }
        out.update(self._nvlink(index, handle))
        return out

    def _nvlink(self, index: int, handle: Any) -> dict[str, Any]:
        nv = self._nvml
        ids = (
            getattr(nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", None),
            getattr(nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", None),
        )
        if None in ids or self._no_nvlink:
            return {}
        values = self._call(getattr(nv, "nvmlDeviceGetFieldValues", None), handle, list(ids))
        read = []
        for v in values or ():
            if getattr(v, "nvmlReturn", 1) != 0:
                break
            read.append(num(getattr(getattr(v, "value", None), "ullVal", None)))
        kib = [k for k in read if k is not None]
        if len(read) != 2 or len(kib) != 2 or (kib == [0, 0] and index not in self._nvlink_prev):
            self._no_nvlink = self._no_nvlink or values is None  # no field values call at all: stop asking
            return {}
        now = time.monotonic()
        prev = self._nvlink_prev.get(index)
        self._nvlink_prev[index] = (now, kib[0], kib[1])
        if prev is None or now <= prev[0] or kib[0] < prev[1] or kib[1] < prev[2]:
            return {}
        dt = now - prev[0]
        return {
            "nvlink_tx_mbs": (kib[0] - prev[1]) * 1024 / MB / dt,
            "nvlink_rx_mbs": (kib[1] - prev[2]) * 1024 / MB / dt,
        }

    def _memory(self, handle: Any) -> Any:
        """NVML's v2 memory info (``used`` as nvidia-smi shows it) or, where the binding has no
        ``nvmlMemory_v2`` or the driver no ``nvmlDeviceGetMemoryInfo_v2``, the v1 info."""
        nv = self._nvml
        version = getattr(nv, "nvmlMemory_v2", None)
        if self._mem_v2 and version is not None:
            try:
                return nv.nvmlDeviceGetMemoryInfo(handle, version=version)
            except Exception as exc:  # TypeError (an old binding), NVMLError_FunctionNotFound, ...
                if isinstance(exc, TypeError) or type(exc).__name__ in _NO_V2_ERRORS:
                    self._mem_v2 = False  # this binding or driver never has it: stop asking
        self._v1_used = True
        return self._call(nv.nvmlDeviceGetMemoryInfo, handle)

    def _proc_mem(self, handle: Any, pids: set[int]) -> float | None:
        procs = self._call(getattr(self._nvml, "nvmlDeviceGetComputeRunningProcesses", None), handle)
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
