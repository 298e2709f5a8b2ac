"""Small pure helpers for the views (the Textual app): no I/O, no Rich, no Textual.

They turn what the user typed into profile overrides, and stored rows into what a results view
lists (filtered, sorted), so the app itself only displays and forwards.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# The settings people change between runs: (field id, dotted profile key, label).
OVERRIDE_FIELDS: list[tuple[str, str, str]] = [
    ("batch_size", "train.batch_size", "batch"),
    ("grad_accum", "train.grad_accum", "accum"),
    ("max_seq_len", "data.max_seq_len", "seq len"),
    ("gpus", "devices.gpus", "GPUs"),
    ("method", "method", "method"),
]

METHODS = ["full", "full-zero3-offload", "lora", "lora-emb", "qlora", "lora-int8"]


def profile_value(resolved: Mapping[str, Any], dotted: str) -> Any:
    """``resolved["train"]["batch_size"]`` for ``"train.batch_size"`` (None if absent)."""
    cur: Any = resolved
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


def field_values(resolved: Mapping[str, Any]) -> dict[str, str]:
    """The override fields' current values in a resolved profile, as text."""
    out = {}
    for fid, dotted, _label in OVERRIDE_FIELDS:
        v = profile_value(resolved, dotted)
        out[fid] = "" if v is None else str(v)
    return out


def overrides_from_fields(resolved: Mapping[str, Any], values: Mapping[str, str]) -> dict[str, str]:
    """Dotted overrides (``{"train.batch_size": "16"}``) for the fields whose text differs from
    the resolved profile. Empty fields mean "as in the profile". Values stay text: the profile
    loader parses them (TOML literals) and reports bad ones as one-line errors."""
    base = field_values(resolved)
    out: dict[str, str] = {}
    for fid, dotted, _label in OVERRIDE_FIELDS:
        text = str(values.get(fid, "") or "").strip()
        if text and text != base.get(fid, ""):
            out[dotted] = text
    return out


def effective_batch(resolved: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """(micro batch, grad accumulation, processes, effective batch)."""
    train = resolved.get("train", {}) or {}
    dev = resolved.get("devices", {}) or {}
    micro = int(train.get("batch_size", 1) or 1)
    accum = int(train.get("grad_accum", 1) or 1)
    gpus = int(dev.get("gpus", 1) or 0)
    procs = (gpus if gpus > 0 else int(dev.get("cpu_processes", 1) or 1)) * int(dev.get("nodes", 1) or 1)
    return micro, accum, procs, micro * accum * procs


# Results view -------------------------------------------------------------------------------

# Reference-table header -> the stored column it sorts by (numbers sort as numbers).
SORT_KEYS: dict[str, str] = {
    "model": "model",
    "dataset": "dataset",
    "gpu": "gpu",
    "num_gpus": "num_gpus",
    "method": "method",
    "batch_size": "batch_size",
    "grad_accum": "grad_accum",
    "max_seq_len": "max_seq_len",
    "samples_per_s": "samples_per_s",
    "tokens_per_s": "tokens_per_s",
    "duration": "duration_s",
    "gpu_mem_mb": "peak_gpu_mem_mb",
    "host_rss_mb": "peak_host_rss_mb",
    "status": "status",
}


def distinct(rows: Iterable[Mapping[str, Any]], key: str) -> list[str]:
    """Sorted distinct non-empty values of a column (for filter choices)."""
    return sorted({str(r.get(key)) for r in rows if r.get(key) not in (None, "")})


def filter_rows(rows: Sequence[Mapping[str, Any]], model: str | None = None,
                method: str | None = None) -> list[Mapping[str, Any]]:
    """Rows whose model and method equal the given ones (None = any)."""
    return [r for r in rows
            if (model is None or str(r.get("model")) == model)
            and (method is None or str(r.get("method")) == method)]


def _sort_value(row: Mapping[str, Any], column: str) -> tuple[int, Any]:
    v = row.get(column)
    if isinstance(v, (list, tuple)):
        nums = [x for x in v if isinstance(x, (int, float))]
        v = max(nums) if nums else None
    if v is None or v == "":
        return (2, 0)  # missing values last
    if isinstance(v, bool):
        return (0, int(v))
    if isinstance(v, (int, float)):
        return (0, v)
    return (1, str(v).lower())


def sort_rows(rows: Sequence[Mapping[str, Any]], header: str | None,
              reverse: bool = False) -> list[Mapping[str, Any]]:
    """Rows sorted by a reference-table header (stable; missing values always last)."""
    if not header or header not in SORT_KEYS:
        return list(rows)
    column = SORT_KEYS[header]
    present = [r for r in rows if _sort_value(r, column)[0] != 2]
    missing = [r for r in rows if _sort_value(r, column)[0] == 2]
    present.sort(key=lambda r: _sort_value(r, column), reverse=reverse)
    return present + missing


def fraction(used: float | None, total: float | None) -> float | None:
    if used is None or not total or total <= 0:
        return None
    return max(0.0, min(1.0, used / total))


__all__ = [
    "OVERRIDE_FIELDS", "METHODS", "profile_value", "field_values", "overrides_from_fields",
    "effective_batch", "SORT_KEYS", "distinct", "filter_rows", "sort_rows", "fraction",
]
