"""Results: the stored summary rows in the reference columns; sort, filter, export.

``b`` marks the row under the cursor as the baseline (again on it: clear): a ``rel`` column then
shows each row's samples/s relative to it, as ``fttui report --baseline`` computes it. ``w``
writes that report (tables, CSVs, charts) of the visible rows into ``exports/report-<time>/``.

While the screen is open it looks at the store file every :data:`REFRESH_S` seconds and, when
the file changed, reloads its rows (a row a finishing run adds shows up without reopening the
screen); the filters, the sort, the baseline and the row under the cursor stay.
"""

from __future__ import annotations

import sqlite3
import time
from concurrent.futures import CancelledError
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Label, Select, Static

from fttui.core.base import fmt
from fttui.core.base.errors import FttuiError
from fttui.core.results import tables
from fttui.core.results.rows import short_gpu
from fttui.core.results.views import distinct, filter_rows, sort_rows
from fttui.tui.host import host
from fttui.tui.plain import plain

REL = "rel"
REFRESH_S = 1.0  # how often the open screen looks whether the store file changed
BASE_MARK = "*"  # after the baseline's rel cell, and in the info line

# (reference-table header, label shown): the columns people compare runs by, the most compared
# first (the table scrolls sideways for the rest). Exports keep every reference column.
SHOWN = [
    ("name", "name"),  # the profile or command name
    ("model", "model"),
    ("method", "method"),
    ("world_size", "world"),  # a 2-rank row told from the others
    ("batch_size", "batch"),
    ("samples_per_s", "samples/s"),
    (REL, "rel"),  # only while a baseline is marked
    ("gpu_mem_mb", "GPU MB"),
    ("host_rss_mb", "host MB"),
    ("status", "status"),  # before the less compared columns: seen without scrolling at 100 columns
    ("tokens_per_s", "tokens/s"),
    ("duration", "time"),
    ("gpu", "GPU"),
    ("num_gpus", "GPUs"),
    ("dataset", "dataset"),
    ("run", "run"),  # the id attach, --resume and --baseline take
]
# Shown columns that are not reference-table columns: header -> cell of a row.
_OWN = {
    "name": lambda r: str(r.get("profile") or ""),
    "world_size": tables.setting_cell("world_size"),
    "run": lambda r: str(r.get("run_id") or ""),
}


def store_stamp(path: Path) -> tuple:
    """What changes when a row lands in (or leaves) the SQLite store at ``path``: the modification
    time and size of the file and of its write-ahead log (a commit appends to the log; a
    checkpoint writes the file). A cheap stat, no SQLite open."""
    out: list[tuple[int, int] | None] = []
    for p in (path, path.with_name(path.name + "-wal")):
        try:
            st = p.stat()
        except OSError:
            out.append(None)
        else:
            out.append((st.st_mtime_ns, st.st_size))
    return tuple(out)


def _mem(row: dict, cell: str) -> str:
    if cell == "OOM":
        return cell
    peaks = row.get("peak_gpu_mem_mb") or []
    return " ".join(f"{p:.0f}" for p in peaks if isinstance(p, (int, float)))


def relative_cells(rows: list[dict], baseline: dict) -> dict[str, str]:
    """run id -> the ``rel_throughput`` cell of ``fttui report`` (``"2.31x"``; ``""`` without
    samples/s) of each row against ``baseline``. FttuiError when the baseline has no throughput."""
    from fttui.core.results.report import build_report

    runs = build_report(rows, baseline=baseline).table("runs")
    if runs is None:
        return {}
    i, j = runs.headers.index("rel_throughput"), runs.headers.index("run")
    return {str(cells[j]): cells[i] for cells in runs.text_body()}


def display_cells(
    rows: list[dict], rel: dict[str, str] | None = None, baseline_id: str | None = None
) -> list[list[str]]:
    """The shown columns of each row (reference-table cells, a little shorter); with ``rel``
    (see :func:`relative_cells`) the ``rel`` column too, the baseline's marked ``*``."""
    headers, body = tables.reference_table(rows)
    idx = {h: i for i, h in enumerate(headers)}
    out = []
    for row, cells in zip(rows, body):
        line = []
        for h, _label in SHOWN:
            if h == REL:
                if rel is not None:
                    c = rel.get(str(row.get("run_id")), "")
                    if baseline_id is not None and row.get("run_id") == baseline_id:
                        c = f"{c} {BASE_MARK}".strip()
                    line.append(c)
                continue
            c = _OWN[h](row) if h in _OWN else cells[idx[h]]
            if h == "model":
                c = c.rsplit("/", 1)[-1] or c  # the hub organisation is in the filter and exports
            elif h == "gpu":
                c = short_gpu(c)
            elif h == "gpu_mem_mb":
                c = _mem(row, c)
            elif h == "host_rss_mb" and row.get("peak_host_rss_mb") is not None:
                c = f"{row['peak_host_rss_mb']:.0f}"
            line.append(c)
        out.append(line)
    return out


class ResultsScreen(Screen):
    BINDINGS = [
        Binding("s", "sort", "Sort"),
        Binding("m", "export('md')", "Markdown"),
        Binding("v", "export('csv')", "CSV"),
        Binding("b", "baseline", "Baseline"),
        Binding("w", "write_report", "Report"),
        Binding("delete", "delete_row", "Delete row"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.all_rows: list[dict] = []
        self.shown_rows: list[dict] = []
        self.sort_header: str | None = None
        self.sort_reverse = False
        self.headers = [h for h, _ in SHOWN if h != REL]  # the table's columns, in order
        self.baseline: dict | None = None  # the marked row
        self.rel: dict[str, str] | None = None  # run id -> rel cell, while a baseline is marked
        self.last_report: Path | None = None  # report.md of the last report written
        self._stamp: tuple | None = None  # the store file's stamp when its rows were last read

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="filters"):
            yield Label("model")
            yield Select([], id="f-model", prompt="any", compact=True)
            yield Label("method")
            yield Select([], id="f-method", prompt="any", compact=True)
        yield DataTable(id="results-table", zebra_stripes=True, cursor_type="cell")
        yield Static(id="results-info")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "results"
        self.load()
        self.query_one(DataTable).focus()
        self.set_interval(REFRESH_S, self._check_store)

    def _read_rows(self, quiet: bool = False) -> list[dict] | None:
        """The stored rows; None (with a notice unless ``quiet``) when the store cannot be read."""
        from fttui.core.base import paths
        from fttui.core.results.store import Store

        self._stamp = store_stamp(paths.store_path())  # before reading: a write during it is seen next time
        try:
            with Store() as store:
                return store.rows()
        except (FttuiError, sqlite3.Error, OSError) as e:  # a broken store must not take the app down
            if not quiet:
                self.notify(f"results store: {e}", severity="error", markup=False)
            return None

    def _check_store(self) -> None:
        """Reload when the store file changed since its rows were read, and the rows did."""
        from fttui.core.base import paths

        if store_stamp(paths.store_path()) == self._stamp:
            return
        rows = self._read_rows(quiet=True)  # a store that cannot be read was told when the screen opened
        if rows is not None and rows != self.all_rows:
            self.load(rows)

    def load(self, rows: list[dict] | None = None) -> None:
        """Show ``rows`` (default: read the store), keeping the filters, the sort, the baseline and
        the row under the cursor."""
        if rows is None:
            rows = self._read_rows()
        self.all_rows = rows or []
        t = self.query_one(DataTable)
        keep_row = None
        if self.shown_rows and t.row_count:
            keep_row = self.shown_rows[min(t.cursor_coordinate.row, len(self.shown_rows) - 1)].get("run_id")
        models = distinct(self.all_rows, "model")
        methods = distinct(self.all_rows, "method")
        for sel_id, options in (
            ("#f-model", [(plain(m), m) for m in models]),
            ("#f-method", [(plain(fmt.method_label(m)), m) for m in methods]),
        ):
            select = self.query_one(sel_id, Select)
            chosen = select.value
            select.set_options(options)  # this clears the choice: put it back while it is still offered
            if chosen is not Select.NULL and any(v == chosen for _, v in options):
                select.value = chosen
        if self.baseline is not None:
            base = next((r for r in self.all_rows if r.get("run_id") == self.baseline.get("run_id")), None)
            if base is None or not self._set_baseline(base):
                self._set_baseline(None)
        self.fill()
        if keep_row is not None:
            ids = [r.get("run_id") for r in self.shown_rows]
            if keep_row in ids:
                t.cursor_coordinate = t.cursor_coordinate._replace(row=ids.index(keep_row))

    def _filter_value(self, sel_id: str) -> str | None:
        v = self.query_one(sel_id, Select).value
        return None if v is Select.NULL else str(v)

    def fill(self) -> None:
        rows = filter_rows(self.all_rows, self._filter_value("#f-model"), self._filter_value("#f-method"))
        sort_header = "samples_per_s" if self.sort_header == REL else self.sort_header  # same order
        rows = sort_rows(rows, sort_header, self.sort_reverse)
        self.shown_rows = list(rows)
        base_id = None if self.baseline is None else self.baseline.get("run_id")
        body = display_cells(self.shown_rows, self.rel, base_id)
        t = self.query_one(DataTable)
        cursor = t.cursor_coordinate
        t.clear(columns=True)
        shown = [(h, label) for h, label in SHOWN if h != REL or self.rel is not None]
        self.headers = [h for h, _ in shown]
        for h, label in shown:
            if h == self.sort_header:
                label += " v" if self.sort_reverse else " ^"
            t.add_column(label, key=h)
        base_col = self.headers.index(REL) if REL in self.headers else -1
        for r, cells in zip(self.shown_rows, body):
            # every cell is text of a stored row: shown inert, never read as markup (issue 36)
            styled = [
                plain(c, "bold red")
                if (c == "OOM" or c.startswith("oom"))
                else plain(c, "bold")
                if i == base_col and c.endswith(BASE_MARK)
                else plain(c)
                for i, c in enumerate(cells)
            ]
            t.add_row(*styled, key=str(r.get("run_id")))
        if self.shown_rows:
            t.cursor_coordinate = t.validate_cursor_coordinate(cursor)
        info = f"{len(self.shown_rows)} of {len(self.all_rows)} rows"
        if self.sort_header:
            info += f", sorted by {self.sort_header}" + (" (descending)" if self.sort_reverse else "")
        if self.baseline is not None:
            hidden = not any(r.get("run_id") == base_id for r in self.shown_rows)
            info += f"; rel vs {BASE_MARK} baseline {base_id}" + (" (filtered out)" if hidden else "")
        if not self.all_rows:
            info = "no results yet: finished runs add a row here"
        self.query_one("#results-info", Static).update(plain(info))

    @on(Select.Changed)
    def _filter_changed(self, event: Select.Changed) -> None:
        self.fill()

    def _sort_by(self, header: str) -> None:
        if header == self.sort_header:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_header, self.sort_reverse = header, False
        self.fill()

    @on(DataTable.HeaderSelected)
    def _header(self, event: DataTable.HeaderSelected) -> None:
        self._sort_by(str(event.column_key.value))

    def action_sort(self) -> None:
        t = self.query_one(DataTable)
        col = t.cursor_coordinate.column if t.row_count else 0
        if 0 <= col < len(self.headers):
            self._sort_by(self.headers[col])

    def action_export(self, kind: str) -> None:
        from fttui.core.base import paths

        headers, body = tables.reference_table(self.shown_rows)
        text = tables.to_markdown(headers, body) if kind == "md" else tables.to_csv(headers, body)
        try:
            folder = paths.ensure_dir(paths.home() / "exports")
            path = folder / f"results-{time.strftime('%Y%m%d-%H%M%S')}.{kind}"
            n = 1
            while path.exists():
                n += 1
                path = folder / f"results-{time.strftime('%Y%m%d-%H%M%S')}-{n}.{kind}"
            path.write_text(text)
        except OSError as e:
            self.notify(f"export failed: {e}", severity="error", markup=False)
            return
        self.last_export = path
        self.notify(f"{len(body)} rows written to {path}", title="export", markup=False)

    # ------------------------------------------------------------------ baseline and report
    def _set_baseline(self, row: dict | None) -> bool:
        """Mark ``row`` as the baseline (None: clear); False, with a notice, when it cannot be one."""
        if row is None:
            self.baseline, self.rel = None, None
            if self.sort_header == REL:  # the column goes: the same order by samples/s
                self.sort_header = "samples_per_s"
            return True
        try:
            rel = relative_cells(self.all_rows, row)
        except FttuiError as e:
            self.notify(f"no baseline: {e}", severity="warning", markup=False)
            return False
        except Exception as e:  # a view: any row the report trips on must not take the screen down
            self.notify(f"no baseline: {type(e).__name__}: {e}", severity="error", markup=False)
            return False
        self.baseline, self.rel = row, rel
        return True

    def action_delete_row(self) -> None:
        """Delete the row under the cursor from the store, after a confirm (``fttui results delete``)."""
        from fttui.tui.dialogs import ConfirmScreen

        t = self.query_one(DataTable)
        if not self.shown_rows or not t.row_count:
            self.notify("no row to delete", severity="warning", markup=False)
            return
        run_id = str(self.shown_rows[min(t.cursor_coordinate.row, len(self.shown_rows) - 1)].get("run_id"))

        def answered(yes: bool | None) -> None:
            if not yes:
                return
            from fttui.core.results.store import Store

            try:
                with Store() as store:
                    store.delete(run_id)
            except FttuiError as e:
                self.notify(str(e), severity="error", markup=False)
                return
            self.notify(f"deleted the row of {run_id}", title="results", markup=False)
            self.load()

        self.app.push_screen(
            ConfirmScreen(
                f"Delete the stored row of {run_id}?", "The run directory stays; only the row leaves the results."
            ),
            answered,
        )

    def action_baseline(self) -> None:
        """The row under the cursor becomes the baseline; on the baseline itself: clear it."""
        t = self.query_one(DataTable)
        if not self.shown_rows or not t.row_count:
            self.notify("no row to mark", severity="warning", markup=False)
            return
        row = self.shown_rows[min(t.cursor_coordinate.row, len(self.shown_rows) - 1)]
        column = self.headers[t.cursor_coordinate.column] if t.cursor_coordinate.column < len(self.headers) else None
        if self.baseline is not None and row.get("run_id") == self.baseline.get("run_id"):
            self._set_baseline(None)
            self.notify("baseline cleared", title="baseline", markup=False)
        elif self._set_baseline(row):
            self.notify(f"baseline: {row.get('run_id')}", title="baseline", markup=False)
        else:
            return
        self.fill()
        # keep the cursor on the same column although the rel column came or went
        if column in self.headers and t.row_count:
            t.cursor_coordinate = t.validate_cursor_coordinate(
                t.cursor_coordinate._replace(column=self.headers.index(column))
            )

    def action_write_report(self) -> None:
        """The report of the visible rows (with the baseline) into exports/report-<time>/."""
        if not self.shown_rows:
            self.notify("no rows to report", severity="warning", markup=False)
            return
        self.notify(f"writing the report of {len(self.shown_rows)} rows...", title="report", markup=False)
        self._write_report(list(self.shown_rows), self.baseline)

    @work(thread=True, exclusive=True, group="report", exit_on_error=False)
    def _write_report(self, rows: list[dict], baseline: dict | None) -> None:
        try:
            from fttui.core.base import paths
            from fttui.core.results.report import build_report, write_report

            report = build_report(rows, baseline=baseline)
            folder = paths.ensure_dir(paths.home() / "exports")
            stamp = time.strftime("%Y%m%d-%H%M%S")
            out, n = folder / f"report-{stamp}", 1
            while out.exists():
                n += 1
                out = folder / f"report-{stamp}-{n}"
            md = write_report(report, paths.ensure_dir(out))[0]
        except Exception as e:  # a worker thread: FttuiError, OSError, whatever matplotlib raises
            msg = f"report failed: {(str(e).strip().splitlines() or [type(e).__name__])[0]}"
            self._from_thread(self.notify, msg, title="report", severity="error", markup=False)
            return
        self._from_thread(self._report_done, md)

    def _from_thread(self, fn, *args, **kwargs) -> None:
        try:
            self.app.call_from_thread(fn, *args, **kwargs)
        except (RuntimeError, CancelledError):  # the app is closing (or closed): nobody to tell
            pass

    def _report_done(self, md: Path) -> None:
        self.last_report = md
        self.notify(f"report written to {md}", title="report", markup=False)

    def action_back(self) -> None:
        if host(self).can_go_back():
            self.app.pop_screen()
