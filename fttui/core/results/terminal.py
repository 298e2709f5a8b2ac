"""``fttui results`` on a terminal or a pipe: the stored rows in the columns that fit its width.

Every row is named (``run``: its id, as ``attach``, ``--resume`` and ``--baseline`` take it;
``name``: its profile or command name) and its world size is a column, so a 2-rank row is told
from the others. The width is the terminal's, ``COLUMNS`` when set, else 100 (a pipe). The
columns are kept in order of importance: the id and the status are never dropped nor cut; the
others go, least important first, until the table fits once the wide text columns (name, model,
GPU, dataset) are cut with an ellipsis to a few characters; those are then cut only as much as
needed, least important first. A wider terminal
shows every column at its full width. CSV, Markdown and JSON keep the reference tables' columns
(:mod:`fttui.core.results.tables`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from typing import NamedTuple

from fttui.core.base import fmt
from fttui.core.base.inert import inert
from fttui.core.results.rows import short_gpu
from fttui.core.results.tables import mem_cell, opt_cell, setting_cell, status_cell

__all__ = ["Column", "COLUMNS", "DEFAULT_WIDTH", "fit_table", "terminal_width"]

#: the width of a table written to a pipe without ``COLUMNS``
DEFAULT_WIDTH = 100


class Column(NamedTuple):
    header: str
    cell: Callable[[dict], str]
    keep: int  # 0: never dropped; higher: dropped sooner
    cut: int = 0  # > 0: may be cut down to this many characters when the kept columns do not fit


def _model(r: dict) -> str:
    m = str(r.get("model") or "")
    return m.rsplit("/", 1)[-1] or m  # the hub organisation is in JSON and the exports


def _not_oom(f: Callable[[dict], str]) -> Callable[[dict], str]:
    return lambda r: "" if r.get("status") == "oom" else f(r)


#: the table's columns, in the order shown
COLUMNS: list[Column] = [
    Column("run", lambda r: str(r.get("run_id") or ""), 0),
    Column("name", lambda r: str(r.get("profile") or ""), 3, cut=8),
    Column("model", _model, 4, cut=10),
    Column("dataset", lambda r: str(r.get("dataset") or ""), 9, cut=8),
    Column("GPU", lambda r: short_gpu(r.get("gpu")) or "", 6, cut=8),
    Column("GPUs", lambda r: str(r.get("num_gpus") or 0), 8),
    Column("method", lambda r: fmt.method_label(r.get("method"), r.get("sharding")), 1),
    Column("world", setting_cell("world_size"), 2),
    Column("batch", setting_cell("batch_size"), 3),
    Column("accum", setting_cell("grad_accum"), 7),
    Column("seq", setting_cell("max_seq_len"), 5),
    Column("samples/s", _not_oom(lambda r: opt_cell(r.get("samples_per_s"))), 2),
    Column("tokens/s", _not_oom(lambda r: opt_cell(r.get("tokens_per_s"), 0)), 6),
    Column("time", _not_oom(lambda r: fmt.duration(r.get("duration_s")) or ""), 5),
    Column("GPU MB", lambda r: mem_cell(r, 0), 3),
    Column("host MB", lambda r: opt_cell(r.get("peak_host_rss_mb"), 0), 3),
    Column("status", status_cell, 0),
]


def terminal_width(default: int = DEFAULT_WIDTH) -> int:
    """``COLUMNS`` when set, else the terminal's width, else ``default`` (output to a pipe)."""
    env = os.environ.get("COLUMNS", "")
    if env.strip().isdigit() and int(env) > 0:
        return int(env)
    return shutil.get_terminal_size((default, 24)).columns


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def fit_table(
    rows: Sequence[dict], width: int, columns: Sequence[Column] = COLUMNS, gap: int = 2
) -> tuple[list[str], list[list[str]]]:
    """The headers and cells of ``rows`` in the columns that fit ``width`` characters (``gap``
    between columns): the least important go first, then the cuttable ones are cut."""
    cells = {c.header: [inert(c.cell(r)) for r in rows] for c in columns}
    widths = {c.header: max([len(c.header), *(len(x) for x in cells[c.header])]) for c in columns}
    shown = list(columns)

    def total(cut: bool = False) -> int:
        return sum(
            min(widths[c.header], max(c.cut, len(c.header))) if cut and c.cut else widths[c.header] for c in shown
        ) + gap * (len(shown) - 1)

    while total(cut=True) > width:  # not even with the cuttable columns cut: drop one
        droppable = [c for c in shown if c.keep > 0]
        if not droppable:
            break
        worst = max(droppable, key=lambda c: (c.keep, shown.index(c)))
        shown.remove(worst)
    for c in sorted((c for c in shown if c.cut), key=lambda c: -c.keep):
        over = total() - width
        if over <= 0:
            break
        widths[c.header] = max(c.cut, len(c.header), widths[c.header] - over)
    headers = [c.header for c in shown]
    body = [[_cut(cells[c.header][i], widths[c.header]) for c in shown] for i in range(len(rows))]
    return headers, body
