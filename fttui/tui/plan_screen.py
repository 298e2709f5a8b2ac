"""Plan screen: every setup of the picker's profile on this machine's cards, fastest first (the
table of ``fttui plan``, :func:`fttui.core.experiments.plan.plan_table`); ``enter`` launches the
highlighted setup (one predicted not to fit asks first), ``escape`` goes back.

Opened with ``l`` in the picker, with the picker's overrides. The plan (estimates, forecasts,
the store's rows, the data's lengths) is made in a thread worker; the cards are the app's sampler's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from fttui.core.base.errors import FttuiError
from fttui.tui.host import host
from fttui.tui.plain import plain

if TYPE_CHECKING:
    from fttui.core.profiles.typed import Profile


class PlanScreen(Screen):
    BINDINGS = [
        Binding("enter", "launch", "Launch this setup"),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self, resolved: Profile) -> None:
        super().__init__()
        self.resolved = resolved
        self.options: list | None = None  # fttui.core.experiments.plan.Option, fastest first
        self.budget = None
        self.error = ""
        self.described = None  # the setup the words below the table are about

    def compose(self) -> ComposeResult:
        self.sub_title = f"plan: {self.resolved.name or 'profile'}"
        yield Header()
        yield Static(Text("planning: every setup, its memory and time...", style="dim"), id="plan-head")
        yield DataTable(id="plan-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="plan-foot")
        yield Footer()

    def on_mount(self) -> None:
        self._plan()

    @work(thread=True, exclusive=True, group="plan", exit_on_error=False)
    def _plan(self) -> None:
        from fttui.core.experiments.planning import machine_budget, run_plan
        from fttui.monitor import run_cards

        try:
            cards = run_cards(host(self).sample_gpus())
            budget = machine_budget(self.resolved, cards=cards)
            options = run_plan(self.resolved, budget, tokenise=False)  # no tokeniser process from the app
        except FttuiError as e:
            self.app.call_from_thread(self._failed, str(e))
            return
        self.app.call_from_thread(self._show, budget, options)

    def _failed(self, error: str) -> None:
        self.error = error
        self.query_one("#plan-head", Static).update(plain(f"cannot plan: {error}", "bold", lines=True))

    def _show(self, budget, options: list) -> None:
        from fttui.core.experiments.plan import HEADERS, plan_summary, plan_table

        self.budget, self.options = budget, options
        self.query_one("#plan-head", Static).update(
            Text.assemble(  # the profile's and the card's names: inert
                plain(f"{self.resolved.name}: ", "bold"),
                plain(plan_summary(options, budget)),
            )
        )
        table = self.query_one("#plan-table", DataTable)
        table.clear(columns=True)
        rows = [[plain(cell) for cell in row] for row in plan_table(options)]
        for i, head in enumerate(HEADERS):  # widths fixed from the content: drawn once, as they end up
            table.add_column(head, width=max([len(head), *(r[i].cell_len for r in rows)]))
        for o, row in zip(options, rows):
            if not o.fits:
                for cell in row:
                    cell.style = "dim"
            table.add_row(*row)
        table.focus()

    @on(DataTable.RowHighlighted, "#plan-table")
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """The highlighted setup in words: what breaks it, or what its time rests on."""
        o = self.selected()
        if o is None:
            return
        why = f"does not fit: {o.breaks}" if not o.fits else f"time: {o.mfu_source}"
        self.query_one("#plan-foot", Static).update(Text.assemble(plain(o.label(), "bold"), "\n", plain(why)))
        self.described = o

    def selected(self):
        """The setup under the cursor (None before the plan is made)."""
        if not self.options:
            return None
        row = self.query_one("#plan-table", DataTable).cursor_row
        return self.options[row] if 0 <= row < len(self.options) else None

    @on(DataTable.RowSelected, "#plan-table")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_launch()

    def action_launch(self) -> None:
        """Launch the profile as the highlighted setup (checked as any override is)."""
        from fttui.core.profiles import apply_overrides
        from fttui.tui.dialogs import ConfirmScreen

        option = self.selected()
        if option is None:
            return
        changes = {**option.settings()}
        if self.budget is not None and self.budget.gpus:
            changes["devices.gpus"] = self.budget.gpus
        try:
            resolved = apply_overrides(self.resolved, changes)
        except FttuiError as e:
            self.notify(str(e), severity="error", markup=False)
            return

        def go(yes: bool | None = True) -> None:
            if not yes:
                return
            try:
                host(self).launch_run(resolved)
            except (FttuiError, OSError) as e:
                self.notify(f"launch failed: {e}", severity="error", markup=False)

        if not option.fits:
            self.app.push_screen(
                ConfirmScreen(f"predicted not to fit: {option.breaks}. Launch anyway? y / n", option.label()), go
            )
            return
        go()


__all__ = ["PlanScreen"]
