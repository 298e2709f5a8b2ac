"""The report as a document: :class:`Table` and :class:`Report`, with their Markdown and CSV forms.

Owns the report's data model (tables of raw cell values with a formatter per column, charts,
summary lines) and the cell formatters the tables use (:func:`fmt_num`, :func:`fmt_sig`,
:func:`fmt_rel`, :func:`fmt_gb`, :func:`cell_text`). The tables themselves are built by
:mod:`fttui.core.results.run_tables` and :mod:`fttui.core.results.matrices`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fttui.core.base import fmt
from fttui.core.base.inert import inert
from fttui.core.results.charts import ChartSpec
from fttui.core.results.prices import Prices
from fttui.core.results.tables import to_csv, to_markdown

__all__ = ["Report", "Table", "cell_text", "fmt_gb", "fmt_num", "fmt_rel", "fmt_sig"]


def fmt_num(nd: int) -> Callable[[Any], str]:
    return lambda v: "" if v is None else fmt.num(v, nd)


def fmt_sig(v: Any) -> str:
    if v is None:
        return ""
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def fmt_rel(v: Any) -> str:
    return "" if v is None else f"{v:.2f}x"


def fmt_gb(v: Any) -> str:
    if v is None:
        return ""
    return f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def cell_text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _csv_cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


@dataclass
class Table:
    slug: str  # CSV file stem
    title: str
    headers: list[str]
    cells: list[list[Any]]  # raw values (numbers stay numbers)
    formats: dict[str, Callable[[Any], str]] = field(default_factory=dict)
    note: str = ""
    level: int = 2

    def text_body(self) -> list[list[str]]:
        fs = [self.formats.get(h, cell_text) for h in self.headers]
        return [[f(v) for f, v in zip(fs, row)] for row in self.cells]

    def to_markdown(self) -> str:
        out = "#" * self.level + f" {inert(self.title)}\n"
        if self.headers:
            out += "\n" + to_markdown(self.headers, self.text_body())
        if self.note:
            out += f"\n{inert(self.note, lines=True)}\n"
        return out

    def to_csv(self) -> str:
        return to_csv(self.headers, [[_csv_cell(v) for v in row] for row in self.cells])

    def column(self, header: str) -> list[Any]:
        i = self.headers.index(header)
        return [row[i] for row in self.cells]


@dataclass
class Report:
    rows: list[dict]
    tables: list[Table]
    charts: list[ChartSpec]
    summary: list[str]
    group_by: str | None = None
    baseline: dict | None = None
    prices: Prices | None = None

    def table(self, slug: str) -> Table | None:
        return next((t for t in self.tables if t.slug == slug), None)

    def to_json_obj(self) -> dict[str, Any]:
        """The report as data (``fttui report --json``): the summary lines, and each table with its
        raw cells (numbers stay numbers) and the cells as the Markdown shows them."""
        return {
            "summary": self.summary,
            "rows": len(self.rows),
            "group_by": self.group_by,
            "charts": [c.name for c in self.charts],
            "tables": [
                {
                    "slug": t.slug,
                    "title": t.title,
                    "headers": t.headers,
                    "cells": t.cells,
                    "text": t.text_body(),
                    "note": t.note,
                }
                for t in self.tables
                if t.headers
            ],
        }

    def to_markdown(self, images: Mapping[str, str] | None = None) -> str:
        """The report as Markdown; ``images`` maps chart names to image paths (set by
        :func:`write_report`); without it the charts are only mentioned."""
        parts = ["# fttui report\n", "\n".join(f"- {s}" for s in self.summary) + "\n"]
        if images:
            parts.append("## Charts\n")
            for c in self.charts:
                if c.name in images:
                    parts.append(f"![{c.title}]({images[c.name]})\n")
        elif self.charts:
            parts.append(
                "Charts (" + ", ".join(c.name for c in self.charts) + "): run with `--out DIR` to draw them.\n"
            )
        parts += [t.to_markdown() for t in self.tables]
        return inert("\n".join(parts), lines=True)  # row text in the summary lines and titles
