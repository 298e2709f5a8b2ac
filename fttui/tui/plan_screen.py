"""Plan screen: every setup of the picker's profile on this machine's cards, fastest first (the
table of ``fttui plan``, :func:`fttui.core.experiments.plan.plan_table`); ``enter`` launches the
highlighted setup (one predicted not to fit asks first), ``m`` measures the setups that fit
(:func:`fttui.core.experiments.measured.measure`, as ``fttui plan --measure``: in forecast order,
a warm-up step and :data:`MEASURE_STEPS` timed steps each, one recorded run a trial) and fills the
``measured`` column live, each setup's cell ``running...`` while its trial runs, then its measured
step and the forecast's error, or its verdict; ``escape`` goes back (and ends a running
trial: cancelled, its run over).

The forecast times each setup's communication over the link figure kept for the setup's machine
set (:func:`fttui.core.experiments.link.figure_for`: this machine's for one node, the newest of as
many nodes for several), as ``fttui plan`` does; for several ranks a line below the table says
the link, where and when it was measured and what it makes of each sharding ("ZeRO-3 over this
link: N times the DDP step"), or that none is kept (communication not counted).

Opened with ``s`` in the picker, with the picker's overrides. The plan (estimates, forecasts,
the store's rows, the data's lengths) is made in a thread worker; the cards are the app's sampler's.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

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


#: the timed steps of each trial ``m`` runs (after a warm-up step)
MEASURE_STEPS = 2
#: the measured column's key and header
MEASURED = "measured"


class PlanScreen(Screen):
    BINDINGS = [
        Binding("enter", "launch", "Launch this setup"),
        Binding("m", "measure", "Measure"),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self, resolved: Profile) -> None:
        super().__init__()
        self.resolved = resolved
        self.options: list | None = None  # fttui.core.experiments.plan.Option, fastest first
        self.budget: Any = None  # fttui.core.experiments.plan.Budget, once planned
        self.error = ""
        self.described = None  # the setup the words below the table are about
        self.row_keys: list[Any] = []  # the table's rows, in the plan's order
        self.trials: list = []  # fttui.core.experiments.measured.Trial, as they end
        self.measuring = False
        self.measured_why = ""  # why the measuring stopped, once it has
        self.stop_measuring = threading.Event()
        self.kept_link: Any = None  # fttui.core.experiments.link.LinkFigure the forecast used, if one is kept

    def compose(self) -> ComposeResult:
        self.sub_title = f"plan: {self.resolved.name or 'profile'}"
        yield Header()
        yield Static(Text("planning: every setup, its memory and time...", style="dim"), id="plan-head")
        yield DataTable(id="plan-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="plan-link")
        yield Static(id="plan-foot")
        yield Footer()

    def on_mount(self) -> None:
        self._plan()

    @work(thread=True, exclusive=True, group="plan", exit_on_error=False)
    def _plan(self) -> None:
        from fttui.core.experiments import link
        from fttui.core.experiments.planning import machine_budget, run_plan
        from fttui.monitor import run_cards

        try:
            cards = run_cards(host(self).sample_gpus())
            budget = machine_budget(self.resolved, cards=cards)
            kept = link.figure_for(self.plan_nodes(), link.backend_for(budget.gpus))
            # no tokeniser process from the app
            options = run_plan(self.resolved, budget, tokenise=False, link=kept)
        except FttuiError as e:
            self.app.call_from_thread(self._failed, str(e))
            return
        self.app.call_from_thread(self._show, budget, options, kept)

    def plan_nodes(self) -> int:
        return max(1, int(self.resolved.devices.nodes or 1))

    def link_lines(self) -> list[str]:
        """The link line below the table (several ranks): the kept figure the forecast used, where
        and when it was measured, what it makes of each sharding; or that none is kept."""
        from fttui.core.experiments import link
        from fttui.core.experiments.comm import versus_ddp

        if self.budget is None or self.budget.ranks_per_node * self.plan_nodes() < 2:
            return []
        if self.kept_link is None:
            return [link.none_kept(self.plan_nodes(), link.backend_for(self.budget.gpus))]
        return [
            f"forecast over the {link.words(self.kept_link)}",
            f"  ({link.kept_words(self.kept_link)}; fttui plan --link measures again)",
            *versus_ddp(self.options or []),
        ]

    def _failed(self, error: str) -> None:
        self.error = error
        self.query_one("#plan-head", Static).update(plain(f"cannot plan: {error}", "bold", lines=True))

    def _show(self, budget, options: list, kept: Any = None) -> None:
        from fttui.core.experiments.plan import HEADERS, plan_summary, plan_table

        self.budget, self.options, self.kept_link = budget, options, kept
        lines = self.link_lines()
        said = self.query_one("#plan-link", Static)
        said.display = bool(lines)
        said.update(plain("\n".join(lines), lines=True))
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
        self.row_keys = []
        for o, row in zip(options, rows):
            if not o.fits:
                for cell in row:
                    cell.style = "dim"
            self.row_keys.append(table.add_row(*row))
        table.focus()

    def action_measure(self) -> None:
        """``m``: measure the setups that fit, filling the measured column as each trial ends."""
        if self.options is None or self.budget is None or self.measuring:
            return
        if not any(o.fits for o in self.options):
            self.notify("no setup fits: nothing to measure", severity="warning", markup=False)
            return
        table = self.query_one("#plan-table", DataTable)
        if MEASURED not in table.columns:
            table.add_column(MEASURED, key=MEASURED, default=plain("-"))
        self.measuring, self.trials, self.measured_why = True, [], ""
        self.query_one("#plan-foot", Static).update(plain("measuring the setups that fit, fastest forecast first..."))
        self._measure()

    @work(thread=True, exclusive=True, group="measure", exit_on_error=False)
    def _measure(self) -> None:
        from fttui.core.experiments.measured import measure

        call = self.app.call_from_thread
        try:
            _trials, why = measure(
                self.resolved,
                self.options or [],
                self.budget,
                MEASURE_STEPS,
                stop=self.stop_measuring.is_set,
                on_start=lambda i: call(self._cell, i, plain("running...", "bold")),
                on_result=lambda t: call(self._trial_ended, t),
            )
        except (FttuiError, OSError) as e:
            why = f"cannot measure: {e}"
        if not self.stop_measuring.is_set():  # the screen is still shown
            call(self._measured, why)

    def _cell(self, index: int, text: Text) -> None:
        if 0 <= index < len(self.row_keys):
            self.query_one("#plan-table", DataTable).update_cell(
                self.row_keys[index], MEASURED, text, update_width=True
            )

    def _trial_ended(self, trial) -> None:
        self.trials.append(trial)
        if trial.measured:
            error = "" if trial.error is None else f" ({trial.error:+.0%} off)"
            text = plain(f"{trial.step_s:.3g} s/step{error}")
        else:
            text = plain(trial.status, "dim")
        self._cell(trial.index, text)

    def _measured(self, why: str) -> None:
        from fttui.core.experiments.measured import rerank

        self.measuring, self.measured_why = False, why
        best = next((t for t in rerank(self.trials) if t.measured), None)
        line = f"measured {len(self.trials)} setup(s); stopped: {why}"
        if best is not None:
            line += f"\nfastest measured: #{best.index + 1} {best.setup}, {best.step_s:.3g} s/step"
        self.query_one("#plan-foot", Static).update(plain(line, lines=True))

    def on_unmount(self) -> None:
        self.stop_measuring.set()  # a running trial is ended (cancelled, its run over)

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
