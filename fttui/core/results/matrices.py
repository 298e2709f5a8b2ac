"""The matrix tables: two settings against each other, ``peak GB / s per step`` in the cells.

Owns the settings a matrix can be drawn over (:data:`MATRIX_DIMS`), the pairs tried
(:data:`MATRIX_PAIRS`), which row fills a cell (:func:`pick`: the latest completed, else the
latest OOM) and :func:`matrix_tables`, which builds one table per group of rows that share everything
but the pair (like the Llama-2 reference table), each row covered once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from fttui.core.base import fmt
from fttui.core.results.document import Table
from fttui.core.results.labels import dim_text, sort_key
from fttui.core.results.rows import gpu_name, peak_gb, s_per_step, short_gpu

__all__ = ["MATRIX_DIMS", "MATRIX_PAIRS", "matrix_tables", "pick"]

# Settings a matrix can be drawn over, and the pairs tried (rows x columns), in order.
MATRIX_DIMS = ("method", "sharding", "precision", "batch_size", "grad_accum", "max_seq_len")
MATRIX_PAIRS = (
    ("method", "max_seq_len"),
    ("batch_size", "max_seq_len"),
    ("method", "batch_size"),
    ("batch_size", "grad_accum"),
)


RowT = TypeVar("RowT", bound=Mapping[str, Any])


def pick(rows: Sequence[RowT]) -> RowT:
    """Of several rows for one cell: the latest completed, else the latest OOM, else the latest."""
    for want in ("completed", "oom"):
        hit = [r for r in rows if r.get("status") == want]
        if hit:
            return hit[-1]
    return rows[-1]


def _matrix_cell(row: Mapping | None) -> str:
    if row is None:
        return ""
    st = row.get("status")
    if st == "oom":
        return "OOM"
    if st != "completed":
        return str(st or "?")
    gb, _ = peak_gb(row)
    sps = s_per_step(row)
    return f"{'' if gb is None else f'{gb:.2f}'} GB / {'' if sps is None else f'{sps:.3f}'} s"


def _context_title(row: Mapping, fixed: Sequence[str]) -> str:
    g = short_gpu(gpu_name(row)) or "?"
    n = int(row.get("num_gpus") or 0)
    parts = [str(row.get("model") or "?"), f"{g} x{n}" if n > 1 else g, str(row.get("dataset") or "")]
    for k in fixed:
        v = row.get(k)
        if v is None or v == "":
            continue
        parts.append(
            {
                "method": fmt.method_label(v),
                "sharding": fmt.sharding_label(v),
                "precision": str(v),
                "batch_size": f"batch {v}",
                "grad_accum": f"accum {v}",
                "max_seq_len": f"seq {v}",
            }[k]
        )
    return " · ".join(p for p in parts if p)


def matrix_tables(rows: Sequence[dict], group_by: str | None) -> list[Table]:
    pairs = list(MATRIX_PAIRS)
    if group_by in MATRIX_DIMS:
        first = [p if p[0] == group_by else (p[1], p[0]) for p in pairs if group_by in p]
        pairs = first + [p for p in pairs if group_by not in p]
    covered: set[int] = set()
    tables: list[Table] = []
    for rk, ck in pairs:
        fixed = [d for d in MATRIX_DIMS if d not in (rk, ck)]
        groups: dict[tuple, list[dict]] = {}
        for r in rows:
            if r.get(rk) is None or r.get(ck) is None:
                continue
            key = (r.get("model"), r.get("dataset"), gpu_name(r), r.get("num_gpus"), *(r.get(d) for d in fixed))
            groups.setdefault(key, []).append(r)
        for members in groups.values():
            rvals = sorted({m.get(rk) for m in members}, key=lambda v: sort_key(rk, v))
            cvals = sorted({m.get(ck) for m in members}, key=lambda v: sort_key(ck, v))
            cells = {(m.get(rk), m.get(ck)) for m in members}
            ids = {id(m) for m in members}
            if len(rvals) < 2 or len(cvals) < 2 or len(cells) < 3 or ids <= covered:
                continue
            covered |= ids
            by: dict[tuple, list[dict]] = {}
            for m in members:
                by.setdefault((m.get(rk), m.get(ck)), []).append(m)
            body = [
                [dim_text(rk, a), *(_matrix_cell(pick(by[(a, b)]) if (a, b) in by else None) for b in cvals)]
                for a in rvals
            ]
            which = next((peak_gb(m)[1] for m in members if m.get("status") == "completed"), "GPU")
            tables.append(
                Table(
                    slug=f"matrix-{len(tables) + 1}",
                    title=f"{rk} x {ck}: {_context_title(members[0], fixed)}",
                    headers=[f"{rk} \\ {ck}", *(str(v) for v in cvals)],
                    cells=body,
                    level=3,
                    note=f"cells: peak {which} memory in GB (largest card) / seconds per training step; "
                    "OOM: ran out of memory; empty: not run",
                )
            )
    return tables
