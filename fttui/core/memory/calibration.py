"""Calibration: the activation coefficient fitted through measured rows of the results store.

Owns :func:`calibrate` (a least-squares fit of the per-token activation bytes through rows of
one profile, after the static terms of the model are subtracted, and this machine's CUDA
context from NVML "used" less torch's reserved peak) and :func:`calibration_from_store` (which
rows of the store match a profile). The result is a
:class:`fttui.core.memory.breakdown.Calibration` that :func:`fttui.core.memory.estimate.estimate`
takes in place of the formula's activation term.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from fttui.core.base import shardings
from fttui.core.base.errors import EstimateError
from fttui.core.base.units import MIB
from fttui.core.memory.breakdown import Calibration, Estimate
from fttui.core.memory.estimate import estimate
from fttui.core.memory.inputs import _with, sharding_of
from fttui.core.profiles.typed import Profile

__all__ = ["calibrate", "calibration_from_store"]


def _first(v: Any) -> float | None:
    """A per-card figure (a list: its largest) or a number, as a float; None if absent."""
    if isinstance(v, (list, tuple)):
        v = max((x for x in v if isinstance(x, (int, float))), default=None)
    return None if v is None else float(v)


def _measured(row: Mapping[str, Any], metric: str) -> float | None:
    v = _first(row.get("peak_gpu_mem_mb" if metric == "gpu" else "peak_host_rss_mb"))
    return None if v is None else v * MIB


def _static_and_attention(e: Estimate, metric: str) -> tuple[float, float]:
    if metric == "gpu":
        total = sum(e.breakdown.values())
        dyn = e.breakdown["activations"] + e.breakdown["allocator"]
    else:
        total = e.host_peak_bytes
        dyn = e.host_breakdown["activations"]
    return total - dyn, e.activation_attention_bytes


def _context(rows: list[Mapping[str, Any]]) -> float | None:
    """This machine's CUDA context per card: NVML's "used" peak less torch's reserved peak
    (what the card holds outside PyTorch's caching allocator: the context, cuBLAS/cuDNN
    workspaces, and whatever the card shows used when idle), the median over the rows that
    carry both figures."""
    diffs = []
    for row in rows:
        used, res = _first(row.get("peak_gpu_mem_mb")), _first(row.get("peak_torch_reserved_mb"))
        if used is not None and res is not None and used > res:
            diffs.append((used - res) * MIB)
    if not diffs:
        return None
    diffs.sort()
    mid = len(diffs) // 2
    return diffs[mid] if len(diffs) % 2 else (diffs[mid - 1] + diffs[mid]) / 2


def calibrate(rows: Iterable[Mapping[str, Any]], resolved: Profile) -> Calibration:
    """Fit the per-token activation coefficient through measured rows of one profile.

    Each row needs ``batch_size``, ``max_seq_len`` and a measured peak: ``peak_gpu_mem_mb`` (a
    list per card, or a number), or on CPU ``peak_host_rss_mb``. For each row the static terms
    of the model (weights, states, context, ...) and the attention-matrix term are subtracted;
    the rest is fitted as ``k x tokens`` by least squares through the origin
    (``k = sum(x y) / sum(x^2)``). The allocator overhead on activations is part of ``k``."""
    metric = "gpu" if resolved.devices.gpus > 0 else "host"
    rows = list(rows)
    context = _context(rows) if metric == "gpu" else None
    xs: list[float] = []
    ys: list[float] = []
    for row in rows:
        m = _measured(row, metric)
        b, s = row.get("batch_size"), row.get("max_seq_len")
        if m is None or not b or not s:
            continue
        r = _with(_with(resolved, "batch_size", int(b)), "max_seq_len", int(s))
        e = estimate(r)
        static, att = _static_and_attention(e, metric)
        if context is not None:
            static += context - e.breakdown["cuda_context"]
        xs.append(float(int(b) * int(s)))
        ys.append(m - static - att)
    if not xs:
        raise EstimateError("calibration needs measured rows with batch_size, max_seq_len and a peak memory figure")
    k = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    k = max(k, 0.0)
    rel = [((k * x) - y) / (y + 1) for x, y in zip(xs, ys)]
    rms = math.sqrt(sum(v * v for v in rel) / len(rel))
    return Calibration(per_token_bytes=k, rows=len(xs), metric=metric, residual_rel=rms, context_bytes=context)


def calibration_from_store(resolved: Profile, store_rows: Iterable[Mapping[str, Any]]) -> Calibration | None:
    """Calibrate from the results-store rows (runs, probe trials, sweep cells) of the same model,
    method, sharding, precision and gradient checkpointing as ``resolved`` that finished without
    running out of memory and carry a memory figure; ``None`` when there is none. A row without
    a sharding ran unsharded; method ``full-zero3-offload`` is ``full`` with ``zero3-offload``."""
    method, sharding = sharding_of(resolved)
    want = {
        "model": resolved.model.name_or_path,
        "method": method,
        "precision": resolved.train.precision,
        "gradient_checkpointing": int(resolved.train.gradient_checkpointing),
    }
    metric = "gpu" if resolved.devices.gpus > 0 else "host"
    picked = []
    for row in store_rows:
        if row.get("status") in ("oom", "failed", "cancelled"):
            continue
        row = dict(row)
        # a row stored before sharding was its own key names a legacy method
        row["method"], row["sharding"] = shardings.of(row.get("method"), row.get("sharding"))
        if row["sharding"] != sharding:
            continue
        if any(row.get(k) is not None and row.get(k) != v for k, v in want.items() if k != "gradient_checkpointing"):
            continue
        gc = row.get("gradient_checkpointing")
        if gc is not None and int(gc) != want["gradient_checkpointing"]:
            continue
        if metric == "gpu" and not (row.get("num_gpus") or 0):
            continue
        if metric == "host" and (row.get("num_gpus") or 0):
            continue
        if _measured(row, metric) is None:
            continue
        picked.append(row)
    if not picked:
        return None
    return calibrate(picked, resolved)
