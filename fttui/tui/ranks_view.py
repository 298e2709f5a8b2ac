"""The ranks of a run (issue 39): each rank's node, compute and wait per step, and how long the
others waited for it; the straggler in words; and, on ``w``, where every rank is now (a hang's
sentence, fttui.core.run.processes.hang). Opened from the run screen with ``k``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from fttui.tui.plain import plain

if TYPE_CHECKING:
    from textual.timer import Timer

    from fttui.core.run.files.rundir import RunDir
    from fttui.core.run.files.statusfile import FinalStatus
    from fttui.core.run.fold.snapshot import RunSnapshot


class RunView(Protocol):
    """What the ranks view reads of the run screen that opened it (fttui.tui.run_screen)."""

    rd: RunDir
    snap: RunSnapshot | None
    gone: bool

    @property
    def final(self) -> FinalStatus | None: ...


COLUMNS = ("rank", "node", "step s", "compute s", "wait %", "others waited %")


def ranks_rows(snap: RunSnapshot | None) -> list[tuple[str, ...]]:
    """One row per rank of the snapshot's latest window (fttui.core.run.fold.skew), the straggler
    marked; ``[]`` before two ranks have steps with their wait measured."""
    skew = getattr(snap, "skew", None)
    if skew is None:
        return []
    rows: list[tuple[str, ...]] = []
    for r in skew.ranks:
        mark = " *" if r.rank == skew.rank else ""
        rows.append(
            (
                f"{r.rank}{mark}",
                r.node or "-",
                f"{r.step_s:.3f}",
                f"{r.compute_s:.3f}",
                f"{100 * r.wait_share:.0f}",
                f"{100 * r.late_share:.0f}",
            )
        )
    return rows


def ranks_text(snap: RunSnapshot | None) -> str:
    """The line above the table: the straggler, or why there is nothing to compare."""
    if snap is None:
        return "waiting for the run's events"
    if snap.straggler:
        return f"SLOW RANK: {snap.straggler}"
    if snap.skew is None:
        if (snap.world_size or 1) < 2 and len(snap.ranks) < 2:
            return "one rank: nothing to compare"
        return "no step of every rank with its wait measured yet (gloo ranks only: docs/reliability.md)"
    return "no rank stands out: the ranks compute alike"


class RanksScreen(Screen):
    """The ranks view of the run shown by ``run_screen``."""

    BINDINGS = [
        Binding("w", "where", "Where is each rank"),
        Binding("escape,k", "back", "Back"),
    ]

    def __init__(self, run_screen: RunView) -> None:
        super().__init__()
        self.run_screen = run_screen
        self._timer: Timer | None = None
        self.where: str | None = None  # the latest answer of `w`

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="ranks-line")
        yield DataTable(id="ranks-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="ranks-hang")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"{self.run_screen.rd.run_id}: ranks"
        table = self.query_one(DataTable)
        table.add_columns(*COLUMNS)
        self.refresh_view()
        self._timer = self.set_interval(0.5, self.refresh_view)

    def refresh_view(self) -> None:
        snap = self.run_screen.snap
        self.query_one("#ranks-line", Static).update(plain(ranks_text(snap)))
        table = self.query_one(DataTable)
        rows = ranks_rows(snap)
        if [tuple(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)] != rows:
            table.clear()
            for row in rows:
                table.add_row(*row)
        hang = self.where or (snap.hang if snap is not None else None)
        said = f"where: {hang}" if hang else "w: ask every rank where it is"
        self.query_one("#ranks-hang", Static).update(plain(said))

    def action_back(self) -> None:
        if self._timer is not None:
            self._timer.stop()
        self.app.pop_screen()

    def action_where(self) -> None:
        if self.run_screen.final is not None or self.run_screen.gone:
            self.notify("the run is not live", severity="warning", markup=False)
            return
        self.query_one("#ranks-hang", Static).update("asking every rank ...")
        self._ask()

    @work(thread=True, exclusive=True)
    def _ask(self) -> None:
        from fttui.core.run.processes import hang

        try:
            found = hang.ask(Path(self.run_screen.rd.path)).sentence
        except Exception as e:  # shown, never raised into the app
            found = f"asking failed: {type(e).__name__}: {e}"
        self.app.call_from_thread(self._answered, found)

    def _answered(self, sentence: str) -> None:
        self.where = sentence
        self.refresh_view()
