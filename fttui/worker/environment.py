"""The environment a run records in its ``start`` event (versions, cards, CPU, memory, host).

The run's events themselves are written by fttui's one Trainer callback,
:class:`fttui.integrations.hf.FttuiCallback`, the same for a script and for this worker."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
from typing import Any

__all__ = ["environment"]


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "processor\t: ")) and ":" in line:
                    val = line.split(":", 1)[1].strip()
                    if val and not val.isdigit():
                        return val
    except OSError:
        pass
    return platform.processor() or platform.machine() or None


def _ram_total_mb() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _driver() -> str | None:
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
            first = f.readline()
        for tok in first.split():
            if tok[:1].isdigit() and "." in tok:
                return tok
    except OSError:
        pass
    return None


def environment() -> dict[str, Any]:
    import torch

    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": p.name, "mem_total_mb": int(p.total_memory // (1024 * 1024))})
    return {
        "python": platform.python_version(),
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "peft": _version("peft"),
        "accelerate": _version("accelerate"),
        "bitsandbytes": _version("bitsandbytes"),
        "deepspeed": _version("deepspeed"),
        "cuda": torch.version.cuda,
        "gpus": gpus,
        "gpu_names": [g["name"] for g in gpus],
        "driver": _driver(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "ram_total_mb": _ram_total_mb(),
        "hostname": socket.gethostname(),
    }
