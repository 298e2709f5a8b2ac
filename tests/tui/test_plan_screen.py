"""The plan screen (`s` in the picker): the same table as `fttui plan` for the selected profile on
the app's (fake) cards, Enter launches the highlighted setup; the picker's time forecast. No real
launch: the app's launch is recorded."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable

from fttui.core.base.units import MIB
from fttui.core.experiments.plan import plan_table
from fttui.core.experiments.planning import machine_budget, run_plan
from fttui.monitor import FakeGpuSampler, run_cards
from fttui.tui.app import FttuiApp
from fttui.tui.dialogs import ConfirmScreen
from fttui.tui.plan_screen import PlanScreen
from tests.tui.conftest import until
from tests.tui.fixtures import FAKE_GPUS
from tests.tui.test_picker_estimate import _select, _text

pytestmark = pytest.mark.anyio


async def test_plan_screen_is_the_cli_table_and_launches_a_setup(fttui_home):
    launched: list = []
    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(FAKE_GPUS)))
    app.launch_run = lambda resolved: launched.append(resolved)
    async with app.run_test(size=(160, 40)) as pilot:
        picker = await _select(pilot, app, "llama2-7b-lora")
        # the picker's forecast beside the memory estimate: uncalibrated on an empty store
        assert picker.forecast is not None and "uncalibrated" in str(picker.forecast)
        assert "time:" in _text(app, "#estimate")
        resolved = picker.resolved
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, PlanScreen) and app.screen.options is not None,
                    timeout=60, what="the plan")
        screen = app.screen
        # the CLI's plan of the same profile on the same cards: the same table, row for row
        cards = run_cards(app.sample_gpus())
        budget = machine_budget(resolved, cards=cards)
        assert budget.gpus == 1 and budget.gpu_bytes == int(24564.0 * MIB) and "4090" in budget.card
        want = plan_table(run_plan(resolved, budget, tokenise=False))
        table = screen.query_one("#plan-table", DataTable)
        got = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert got == want and any(r[-1] == "yes" for r in got) and any(r[-1].startswith("no:") for r in got)
        # Enter on the fastest setup that fits launches the profile as that setup
        first = screen.options[0]
        assert first.fits
        await pilot.press("enter")
        await until(pilot, lambda: len(launched) == 1, what="launch")
        run = launched[0]
        assert (run.train.batch_size, run.train.grad_accum, run.train.gradient_checkpointing,
                run.sharding) == (first.batch_size, first.grad_accum, first.gradient_checkpointing, first.sharding)
        # one predicted not to fit asks first; "n" launches nothing
        table.move_cursor(row=table.row_count - 1)
        await pilot.pause()
        assert not screen.selected().fits
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, PlanScreen), what="back on the plan")
        assert len(launched) == 1
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is picker, what="back on the picker")
