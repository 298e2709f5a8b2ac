"""The end-of-run lines of issue 25's figures (``fttui run`` / ``attach`` print them after the
summary): why it was slow, the data wait and step-time outliers, the memory creep warning, and its
MFU against the store's earlier rows of the same model, method and card."""

from __future__ import annotations

from typing import Any

__all__ = ["insight_lines", "store_rows"]


def store_rows(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The store's rows of the row's model and card (none when the store cannot be read)."""
    from fttui.core.base.errors import FttuiError
    from fttui.core.results.store import Store

    if not row.get("model") or not row.get("gpu"):
        return []
    try:
        with Store() as store:
            return store.rows(where={"model": row["model"], "gpu": row["gpu"]})
    except (FttuiError, OSError):
        return []


def insight_lines(row: dict[str, Any], rows: list[dict[str, Any]] | None = None) -> list[str]:
    from fttui.core.results.compare import mfu_history_text

    lines = []
    speed = []
    if row.get("data_wait_pct") is not None:
        speed.append(f"data wait {row['data_wait_pct']:.0f}% of step time")
    if row.get("step_outliers"):
        speed.append(f"{row['step_outliers']} step-time outliers")
    if row.get("why_slow") or speed:
        lines.append(
            f"  why slow: {row.get('why_slow') or 'no leading cause'}" + (f" ({', '.join(speed)})" if speed else "")
        )
    if row.get("memory_warning"):
        lines.append(f"  memory creep warned: {row['memory_warning']}")
    history = mfu_history_text(row, store_rows(row) if rows is None else rows)
    if history:
        lines.append(f"  {history}")
    return lines
