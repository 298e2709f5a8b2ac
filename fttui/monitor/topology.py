"""How the GPUs are linked: :func:`gpu_topology` asks NVML for each card's active NVLink links and
the farthest common PCIe ancestor over card pairs (for the run summary). Never raises.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["gpu_topology"]

_TOPO = {0: "INTERNAL", 10: "SINGLE", 20: "MULTIPLE", 30: "HOSTBRIDGE", 40: "NODE", 50: "SYSTEM"}


def gpu_topology(indices: Iterable[int] | None = None) -> dict[str, Any] | None:
    """How the cards are linked: ``{"nvlink_links": [active links per card], "common_ancestor":
    farthest NVML topology level over card pairs}``; None without NVML or with fewer than 2 cards.
    Never raises."""
    try:
        import pynvml  # lazy on purpose

        pynvml.nvmlInit()
    except Exception:  # ImportError, NVMLError, OSError from ctypes: no NVML, no topology
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
        return {"nvlink_links": links, "common_ancestor": _TOPO.get(max(levels), str(max(levels))) if levels else None}
    except Exception:  # NVMLError and ctypes errors from any call above: never raises
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # shutting down is best effort
            pass
