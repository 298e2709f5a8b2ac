"""The results view's rules: stored rows filtered and sorted as the app lists them (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

# Reference-table header -> the stored column it sorts by (numbers sort as numbers).
SORT_KEYS: dict[str, str] = {
    "run": "run_id",
    "name": "profile",
    "world_size": "world_size",
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


RowT = TypeVar("RowT", bound=Mapping[str, Any])  # the rows' own type (a dict stays a dict)


def distinct(rows: Iterable[Mapping[str, Any]], key: str) -> list[str]:
    """Sorted distinct non-empty values of a column (for filter choices)."""
    return sorted({str(r.get(key)) for r in rows if r.get(key) not in (None, "")})


def filter_rows(rows: Sequence[RowT], model: str | None = None, method: str | None = None) -> list[RowT]:
    """Rows whose model and method equal the given ones (None = any)."""
    return [
        r
        for r in rows
        if (model is None or str(r.get("model")) == model) and (method is None or str(r.get("method")) == method)
    ]


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


def sort_rows(rows: Sequence[RowT], header: str | None, reverse: bool = False) -> list[RowT]:
    """Rows sorted by a reference-table header (stable; missing values always last)."""
    if not header or header not in SORT_KEYS:
        return list(rows)
    column = SORT_KEYS[header]
    present = [r for r in rows if _sort_value(r, column)[0] != 2]
    missing = [r for r in rows if _sort_value(r, column)[0] == 2]
    present.sort(key=lambda r: _sort_value(r, column), reverse=reverse)
    return present + missing


__all__ = ["SORT_KEYS", "distinct", "filter_rows", "sort_rows"]
