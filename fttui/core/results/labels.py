"""How a row is named and ordered in the report: bar labels, full labels and sort keys.

Owns the ordering of setting values (:func:`sort_key`: methods in their display order, numbers
as numbers), the order of a chart's bars (:func:`chart_key`), a row's label from chosen settings,
:func:`full_label` (a row on its own) and :func:`bar_labels` (only the settings that vary, a
run-id suffix where two labels would still be equal). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fttui.core.base import fmt, shardings
from fttui.core.results.columns import LABEL_KEYS
from fttui.core.results.document import cell_text
from fttui.core.results.rows import gpu_name, num, short_gpu

__all__ = ["METHOD_ORDER", "bar_labels", "chart_key", "dim_text", "full_label", "sort_key"]

METHOD_ORDER = list(fmt.METHOD_LABELS)
SHARDING_ORDER = list(fmt.SHARDING_LABELS)
_LABEL_KEYS = LABEL_KEYS  # declared with the row (fttui.core.results.columns)


def chart_key(r: Mapping) -> tuple:
    """Order of the bars: model, kind, GPU, cards, method, sharding, precision, batch, sequence, accumulation."""
    return (
        str(r.get("model") or ""),
        str(r.get("kind") or ""),
        short_gpu(gpu_name(r)),
        int(r.get("num_gpus") or 0),
        sort_key("method", r.get("method")),
        sort_key("sharding", r.get("sharding")),
        str(r.get("precision") or ""),
        sort_key("batch_size", r.get("batch_size")),
        sort_key("max_seq_len", r.get("max_seq_len")),
        sort_key("grad_accum", r.get("grad_accum")),
    )


def _label_value(r: Mapping, key: str) -> str:
    return short_gpu(gpu_name(r)) if key == "gpu" else str(r.get(key))


def _row_label(row: Mapping, fields: Sequence[str]) -> str:
    parts = []
    for key in fields:
        v = row.get(key)
        if key == "model":
            parts.append(str(v or "?"))
        elif key == "method":
            parts.append(fmt.method_label(v, row.get("sharding")) or "?")
        elif key == "sharding" and "method" not in fields:
            parts.append(fmt.sharding_label(v) or "no sharding")
        elif key == "precision":
            parts.append(str(v or ""))
        elif key == "batch_size":
            parts.append(f"bs {v}")
        elif key == "grad_accum":
            parts.append(f"accum {v}")
        elif key == "max_seq_len":
            parts.append(f"seq {v}")
        elif key == "gpu":
            g = short_gpu(gpu_name(row))
            n = int(row.get("num_gpus") or 0)
            parts.append(f"{n}x {g}" if n > 1 and g else g)
        elif key == "kind" and v not in (None, "run"):
            parts.append(f"({v})")
    return " · ".join(p for p in parts if p)


def full_label(row: Mapping) -> str:
    """A row described on its own: model · method · batch · sequence · GPU."""
    return _row_label(row, ["model", "method", "batch_size", "max_seq_len", "gpu"])


def bar_labels(rows: Sequence[Mapping]) -> list[str]:
    """Short bar labels: the model (when several), then only the settings that vary among the
    rows of the same model; a run id suffix where two labels would still be equal."""
    models = {str(r.get("model")) for r in rows}
    by_model: dict[str, list[Mapping]] = {}
    for r in rows:
        by_model.setdefault(str(r.get("model")), []).append(r)
    varying: dict[str, list[str]] = {}
    for m, members in by_model.items():
        keys = [k for k in _LABEL_KEYS if len({_label_value(r, k) for r in members}) > 1]
        if "num_gpus" in keys and "gpu" not in keys:
            keys.append("gpu")
        keys = [k for k in keys if k != "num_gpus"]
        varying[m] = keys or ["method"]
    labels = [_row_label(r, (["model"] if len(models) > 1 else []) + varying[str(r.get("model"))]) for r in rows]
    seen: dict[str, int] = {}
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
    return [f"{lab} ({str(r.get('run_id'))[-4:]})" if seen[lab] > 1 else lab for lab, r in zip(labels, rows)]


def sort_key(key: str, v: Any) -> tuple:
    if v is None:
        return (2, 0, "")
    if key == "method" and v in METHOD_ORDER:
        return (0, METHOD_ORDER.index(v), "")
    if key == "sharding" and v in SHARDING_ORDER:
        return (0, SHARDING_ORDER.index(v), "")
    x = num(v)
    return (0, x, "") if x is not None else (1, 0, str(v))


def dim_text(key: str, v: Any) -> str:
    if key == "method":
        return fmt.method_label(v)
    if key == "sharding":
        return fmt.sharding_label(v) or shardings.NONE.name
    return cell_text(v)
