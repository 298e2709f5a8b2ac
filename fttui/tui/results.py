"""Results: the stored summary rows in the reference columns; sort, filter, export."""

from __future__ import annotations

import time

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Label, Select, Static

from fttui.core import fmt, tables
from fttui.core.viewmodel import distinct, filter_rows, sort_rows

# (reference-table header, label shown): the columns people compare runs by. Exports keep
# every reference column.
SHOWN = [
    ("model", "model"),
    ("dataset", "dataset"),
    ("gpu", "GPU"),
    ("num_gpus", "GPUs"),
    ("method", "method"),
    ("batch_size", "batch"),
    ("samples_per_s", "samples/s"),
    ("tokens_per_s", "tokens/s"),
    ("duration", "time"),
    ("gpu_mem_mb", "GPU MB"),
    ("host_rss_mb", "host MB"),
    ("status", "status"),
]


def _short_gpu(name: str) -> str:
    for prefix in ("NVIDIA GeForce ", "NVIDIA "):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def _mem(row: dict, cell: str) -> str:
    if cell == "OOM":
        return cell
    peaks = row.get("peak_gpu_mem_mb") or []
    return " ".join(f"{p:.0f}" for p in peaks if isinstance(p, (int, float)))


def display_cells(rows: list[dict]) -> list[list[str]]:
    """The shown columns of each row (reference-table cells, a little shorter)."""
    headers, body = tables.reference_table(rows)
    idx = {h: i for i, h in enumerate(headers)}
    out = []
    for row, cells in zip(rows, body):
        line = []
        for h, _label in SHOWN:
            c = cells[idx[h]]
            if h == "model":
                c = c.rsplit("/", 1)[-1] or c  # the hub organisation is in the filter and exports
            elif h == "gpu":
                c = _short_gpu(c)
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
        Binding("escape", "back", "Back"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.all_rows: list[dict] = []
        self.shown_rows: list[dict] = []
        self.sort_header: str | None = None
        self.sort_reverse = False
        self.headers = [h for h, _ in SHOWN]

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

    def load(self) -> None:
        from fttui.core.store import Store

        try:
            with Store() as store:
                self.all_rows = store.rows()
        except Exception as e:  # a broken store must not take the app down
            self.all_rows = []
            self.notify(f"results store: {e}", severity="error")
        models = distinct(self.all_rows, "model")
        methods = distinct(self.all_rows, "method")
        self.query_one("#f-model", Select).set_options([(m, m) for m in models])
        self.query_one("#f-method", Select).set_options([(fmt.method_label(m), m) for m in methods])
        self.fill()

    def _filter_value(self, sel_id: str) -> str | None:
        v = self.query_one(sel_id, Select).value
        return None if v is Select.NULL else str(v)

    def fill(self) -> None:
        rows = filter_rows(self.all_rows, self._filter_value("#f-model"), self._filter_value("#f-method"))
        rows = sort_rows(rows, self.sort_header, self.sort_reverse)
        self.shown_rows = list(rows)
        body = display_cells(self.shown_rows)
        t = self.query_one(DataTable)
        cursor = t.cursor_coordinate
        t.clear(columns=True)
        for h, label in SHOWN:
            if h == self.sort_header:
                label += " v" if self.sort_reverse else " ^"
            t.add_column(label, key=h)
        for r, cells in zip(self.shown_rows, body):
            styled = [Text(c, style="bold red") if (c == "OOM" or c.startswith("oom")) else c for c in cells]
            t.add_row(*styled, key=str(r.get("run_id")))
        if self.shown_rows:
            t.cursor_coordinate = t.validate_cursor_coordinate(cursor)
        info = f"{len(self.shown_rows)} of {len(self.all_rows)} rows"
        if self.sort_header:
            info += f", sorted by {self.sort_header}" + (" (descending)" if self.sort_reverse else "")
        if not self.all_rows:
            info = "no results yet: finished runs add a row here"
        self.query_one("#results-info", Static).update(info)

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
        from fttui.core import paths

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
            self.notify(f"export failed: {e}", severity="error")
            return
        self.last_export = path
        self.notify(f"{len(body)} rows written to {path}", title="export")

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
