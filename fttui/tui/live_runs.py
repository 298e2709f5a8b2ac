"""The live runs pane of the picker: every live run found on disk (this app's, and those of other
fttui processes or an earlier session), newest first, with its profile, state, step of total,
ETA and start time. Enter (or `a` anywhere on the picker) attaches: the run screen of that run.

The pane is mounted only when there is a live run, after the picker's first frame; the listing
(``fttui.core.run.control.brief.live_briefs``: a ``stat`` per finished run, both ends of events.jsonl
per live one) runs in a thread worker.
"""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable

from fttui.core.run.control.brief import RunBrief
from fttui.tui.plain import plain

COLUMNS = ("run", "profile", "state", "step", "ETA", "started")


def started_short(b: RunBrief, now: float | None = None) -> str:
    """``HH:MM`` for a run started today, ``MM-DD HH:MM`` before; ``-`` when unknown."""
    if b.started is None:
        return "-"
    t = time.localtime(b.started)
    today = time.localtime(time.time() if now is None else now)
    same_day = (t.tm_year, t.tm_yday) == (today.tm_year, today.tm_yday)
    return time.strftime("%H:%M" if same_day else "%m-%d %H:%M", t)


def brief_cells(b: RunBrief, now: float | None = None) -> tuple[str, ...]:
    """The row of one live run, in the order of ``COLUMNS``."""
    state = "unsupervised" if b.state == "running (unsupervised)" else b.state_text()
    profile = b.profile if b.kind == "run" else f"{b.profile} ({b.kind})"
    return (b.run_id, profile, state, b.step_text(), b.eta_text(), started_short(b, now))


class LiveRunTable(DataTable):
    """The live runs, one row each; Enter attaches (the picker's ``attach`` action)."""

    BINDINGS = [Binding("enter", "screen.attach", "Attach", show=False)]


class LiveRuns(Vertical):
    """The pane: a border titled with the count, the table, a hint in the subtitle."""

    def __init__(self) -> None:
        super().__init__(id="live-runs")
        self.briefs: list[RunBrief] = []

    def compose(self) -> ComposeResult:
        table = LiveRunTable(id="live-table", cursor_type="row", show_cursor=True, zebra_stripes=False)
        for col in COLUMNS:
            table.add_column(col, key=col)
        yield table

    def on_mount(self) -> None:
        self.border_subtitle = "enter/a: attach  esc: profiles"

    def show(self, briefs: list[RunBrief]) -> None:
        """Show these runs (the cursor stays on the run it was on while that run is listed)."""
        table = self.query_one(LiveRunTable)
        keep = self.selected()
        self.briefs = list(briefs)
        self.border_title = f"live runs ({len(briefs)})"
        table.clear()
        for b in briefs:
            table.add_row(*map(plain, brief_cells(b)), key=b.run_id)  # a run's id and names: text, inert
        ids = [b.run_id for b in briefs]
        if keep is not None and keep.run_id in ids:
            table.move_cursor(row=ids.index(keep.run_id))

    def selected(self) -> RunBrief | None:
        """The run under the cursor (the newest when the table has no cursor yet)."""
        if not self.briefs:
            return None
        row = self.query_one(LiveRunTable).cursor_row
        return self.briefs[row] if 0 <= row < len(self.briefs) else self.briefs[0]


__all__ = ["LiveRuns", "LiveRunTable", "brief_cells", "started_short", "COLUMNS"]
