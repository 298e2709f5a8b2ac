"""Resource samplers: GPUs through NVML (pynvml, imported lazily) and the host through psutil.

Contract (docs/architecture.md, "Monitor core"): nothing here raises while sampling; a value that
cannot be read is ``None``; a missing driver gives ``GpuSnapshot(available=False, reason=...)``.
Only stdlib, psutil and (lazily) pynvml are imported.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Sequence

import psutil

__all__ = [
    "GpuInfo",
    "GpuSnapshot",
    "HostSnapshot",
    "GpuSampler",
    "FakeGpuSampler",
    "HostSampler",
    "make_gpu_sampler",
    "visible_indices",
    "FAKE_GPUS_ENV",
    "NO_DRIVER_REASON",
]

FAKE_GPUS_ENV = "FTTUI_FAKE_GPUS"
NO_DRIVER_REASON = "NVML library not found: no NVIDIA driver"
_MB = float(2**20)


# --------------------------------------------------------------------------------------------
# value helpers


def _num(value: Any) -> float | None:
    """A finite float, or ``None`` for anything else (bool, str, NaN, missing)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _int(value: Any, default: int | None = None) -> int | None:
    if value is None or isinstance(value, bool):
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


# --------------------------------------------------------------------------------------------
# snapshots


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], index: int = 0) -> "GpuInfo":
        """Tolerant: missing or malformed values become ``None``; ``index`` is the fallback."""
        if not isinstance(d, dict):
            return cls(index=index)
        return cls(
            index=_int(d.get("index"), index),
            name=_str(d.get("name")),
            uuid=_str(d.get("uuid")),
            mem_used_mb=_num(d.get("mem_used_mb")),
            mem_total_mb=_num(d.get("mem_total_mb")),
            util_pct=_num(d.get("util_pct")),
            power_w=_num(d.get("power_w")),
            temp_c=_num(d.get("temp_c")),
            proc_mem_mb=_num(d.get("proc_mem_mb")),
        )


@dataclass(frozen=True)
class GpuSnapshot:
    available: bool
    reason: str | None = None
    driver: str | None = None
    cuda: str | None = None
    gpus: tuple[GpuInfo, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "reason": self.reason,
            "driver": self.driver,
            "cuda": self.cuda,
            "gpus": [g.to_dict() for g in self.gpus],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "GpuSnapshot":
        if not isinstance(d, dict):
            return cls(available=False, reason="no GPU data")
        raw = d.get("gpus") or []
        gpus = tuple(GpuInfo.from_dict(g, i) for i, g in enumerate(raw) if isinstance(g, dict)) if isinstance(raw, list) else ()
        return cls(
            available=bool(d.get("available", bool(gpus))),
            reason=_str(d.get("reason")),
            driver=_str(d.get("driver")),
            cuda=_str(d.get("cuda")),
            gpus=gpus,
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "HostSnapshot":
        if not isinstance(d, dict):
            return cls()
        return cls(
            ram_used_mb=_num(d.get("ram_used_mb")),
            ram_total_mb=_num(d.get("ram_total_mb")),
            swap_used_mb=_num(d.get("swap_used_mb")),
            swap_total_mb=_num(d.get("swap_total_mb")),
            tree_rss_mb=_num(d.get("tree_rss_mb")),
            tree_nprocs=_int(d.get("tree_nprocs")),
            tree_cpu_pct=_num(d.get("tree_cpu_pct")),
        )


# --------------------------------------------------------------------------------------------
# GPUs


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
        self._driver = _str(self._call(pynvml.nvmlSystemGetDriverVersion))
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
                        _str(self._call(pynvml.nvmlDeviceGetName, handle)),
                        _str(self._call(pynvml.nvmlDeviceGetUUID, handle)),
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
            used = _num(getattr(mem, "used", None))
            total = _num(getattr(mem, "total", None))
            used = None if used is None else used / _MB
            total = None if total is None else total / _MB
        util = self._call(nv.nvmlDeviceGetUtilizationRates, handle)
        util_pct = _num(getattr(util, "gpu", None)) if util is not None else None
        power = _num(self._call(nv.nvmlDeviceGetPowerUsage, handle))
        temp = _num(self._call(nv.nvmlDeviceGetTemperature, handle, getattr(nv, "NVML_TEMPERATURE_GPU", 0)))
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
            used = _num(getattr(p, "usedGpuMemory", None))
            if used is None:  # NVML_VALUE_NOT_AVAILABLE (e.g. without permission / in some VMs)
                unknown = True
            else:
                total += used
        if unknown and total == 0.0:
            return None
        return total / _MB


class FakeGpuSampler:
    """Replays recorded GPU figures cyclically (for tests and demos on machines without GPUs).

    ``source`` is a list of frames (each a list of ``GpuInfo`` dicts), a dict
    ``{"driver", "cuda", "frames"}``, or the path of a JSON file holding that dict. An unreadable
    file does not raise: ``sample()`` then reports ``available=False`` with the reason.
    """

    def __init__(
        self,
        source: Sequence[Sequence[dict[str, Any]]] | dict[str, Any] | str | os.PathLike[str],
        driver: str | None = None,
        cuda: str | None = None,
    ) -> None:
        self._error: str | None = None
        data: Any = source
        if isinstance(source, (str, os.PathLike)):
            try:
                with open(source, encoding="utf-8") as f:
                    data = json.load(f)
            except (OSError, ValueError) as exc:
                self._error = f"fake GPU file {os.fspath(source)!r} unreadable: {exc}"
                data = {}
        if isinstance(data, dict):
            driver = driver if driver is not None else _str(data.get("driver"))
            cuda = cuda if cuda is not None else _str(data.get("cuda"))
            frames = data.get("frames") or []
        else:
            frames = data
        self.driver = driver
        self.cuda = cuda
        self.frames: list[tuple[GpuInfo, ...]] = [
            tuple(GpuInfo.from_dict(g, i) for i, g in enumerate(frame) if isinstance(g, dict))
            for frame in (frames if isinstance(frames, (list, tuple)) else [])
            if isinstance(frame, (list, tuple))
        ]
        if not self.frames and self._error is None:
            self._error = "fake GPU data has no frames"
        self._pos = 0

    def sample(self, pids: Iterable[int] = ()) -> GpuSnapshot:
        if self._error is not None:
            return GpuSnapshot(available=False, reason=self._error, gpus=())
        frame = self.frames[self._pos % len(self.frames)]
        self._pos += 1
        return GpuSnapshot(available=True, reason=None, driver=self.driver, cuda=self.cuda, gpus=frame)

    def close(self) -> None:
        pass

    def __enter__(self) -> "FakeGpuSampler":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_gpu_sampler() -> GpuSampler | FakeGpuSampler:
    """``FakeGpuSampler`` when ``FTTUI_FAKE_GPUS`` names a JSON file, else ``GpuSampler``."""
    path = os.environ.get(FAKE_GPUS_ENV, "").strip()
    if path:
        return FakeGpuSampler(path)
    return GpuSampler()


# --------------------------------------------------------------------------------------------
# host


_PROC_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


class HostSampler:
    """System RAM and swap, plus the process tree rooted at ``root_pid`` (root and all recursive
    children): summed RSS, process count and summed CPU percent (``psutil.cpu_percent`` with
    ``interval=None`` on ``Process`` objects cached between calls; the first sample of a new
    process counts 0 %). A dead root gives an empty tree (0 processes, 0 MB, 0 %); without a
    root the tree figures are ``None``. Never raises.

    The tree is found through ``/proc/<pid>/task/<tid>/children`` where the kernel offers it
    (cheap: only the tree is read), with a full ``psutil`` scan every ``full_scan_s`` seconds to
    catch anything those files missed; elsewhere ``psutil.Process.children(recursive=True)``.
    """

    def __init__(self, root_pid: int | None = None, full_scan_s: float = 10.0) -> None:
        self.root_pid = root_pid
        self.full_scan_s = full_scan_s
        self._procs: dict[int, psutil.Process] = {}
        self._pids: list[int] | None = None
        self._last_full = -math.inf

    # -- tree discovery
    def _walk_proc(self, root: int) -> list[int]:
        out = [root]
        seen = {root}
        i = 0
        while i < len(out):
            pid = out[i]
            i += 1
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                        kids = f.read().split()
                except OSError:
                    continue
                for k in kids:
                    try:
                        c = int(k)
                    except ValueError:
                        continue
                    if c not in seen:
                        seen.add(c)
                        out.append(c)
        return out

    def _walk_psutil(self, root: int) -> list[int]:
        try:
            proc = self._procs.get(root) or psutil.Process(root)
            kids = proc.children(recursive=True)
        except (psutil.Error, OSError):
            return []
        return [root] + [k.pid for k in kids]

    def _discover(self) -> list[int]:
        root = self.root_pid
        if root is None:
            return []
        if not psutil.pid_exists(root):
            return []
        now = time.monotonic()
        if not _PROC_CHILDREN or now - self._last_full >= self.full_scan_s:
            self._last_full = now
            pids = self._walk_psutil(root)
            if _PROC_CHILDREN:
                # union with the cheap walk: either may miss a process born during the scan
                known = set(pids)
                pids.extend(p for p in self._walk_proc(root) if p not in known)
            return pids
        return self._walk_proc(root)

    def tree_pids(self, refresh: bool = False) -> list[int]:
        """PIDs of the tree as of the latest ``sample()`` (found now if never sampled or
        ``refresh``). Empty without a root or with a dead root."""
        try:
            if refresh or self._pids is None:
                self._pids = self._discover()
            return list(self._pids)
        except Exception:
            return []

    # -- sampling
    def sample(self) -> HostSnapshot:
        ram_used = ram_total = swap_used = swap_total = None
        try:
            vm = psutil.virtual_memory()
            ram_total = vm.total / _MB
            ram_used = (vm.total - vm.available) / _MB
        except Exception:
            pass
        try:
            sw = psutil.swap_memory()
            swap_total = sw.total / _MB
            swap_used = sw.used / _MB
        except Exception:
            pass
        rss = nprocs = cpu = None
        if self.root_pid is not None:
            try:
                rss, nprocs, cpu = self._sample_tree()
            except Exception:
                rss, nprocs, cpu = None, None, None
        return HostSnapshot(
            ram_used_mb=ram_used,
            ram_total_mb=ram_total,
            swap_used_mb=swap_used,
            swap_total_mb=swap_total,
            tree_rss_mb=rss,
            tree_nprocs=nprocs,
            tree_cpu_pct=cpu,
        )

    def _sample_tree(self) -> tuple[float, int, float]:
        pids = self._discover()
        alive: list[int] = []
        procs: dict[int, psutil.Process] = {}
        rss = 0.0
        cpu = 0.0
        for pid in pids:
            proc = self._procs.get(pid)
            try:
                if proc is None:
                    proc = psutil.Process(pid)
                with proc.oneshot():
                    r = proc.memory_info().rss
                    c = proc.cpu_percent(interval=None)
                    if proc.status() == psutil.STATUS_ZOMBIE:
                        continue
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
            except (psutil.AccessDenied, OSError):
                if proc is not None:  # keep counting it, without figures
                    procs[pid] = proc
                    alive.append(pid)
                continue
            procs[pid] = proc
            alive.append(pid)
            rss += r
            cpu += c
        self._procs = procs  # dead ones dropped
        self._pids = alive
        return rss / _MB, len(alive), cpu


_TOPO = {0: "INTERNAL", 10: "SINGLE", 20: "MULTIPLE", 30: "HOSTBRIDGE", 40: "NODE", 50: "SYSTEM"}


def gpu_topology(indices=None) -> dict | None:
    """How the cards are linked: ``{"nvlink_links": [active links per card], "common_ancestor":
    farthest NVML topology level over card pairs}``; None without NVML or with fewer than 2 cards.
    Never raises."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        idx = list(indices) if indices is not None else list(range(pynvml.nvmlDeviceGetCount()))
        if len(idx) < 2:
            return None
        hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in idx]
        links = []
        for h in hs:
            n = 0
            for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
                try:
                    n += pynvml.nvmlDeviceGetNvLinkState(h, link) == pynvml.NVML_FEATURE_ENABLED
                except pynvml.NVMLError:
                    break  # not supported: no NVLink on this card
            links.append(n)
        levels = []
        for a in range(len(hs)):
            for b in range(a + 1, len(hs)):
                try:
                    levels.append(int(pynvml.nvmlDeviceGetTopologyCommonAncestor(hs[a], hs[b])))
                except pynvml.NVMLError:
                    pass
        return {"nvlink_links": links,
                "common_ancestor": _TOPO.get(max(levels), str(max(levels))) if levels else None}
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
