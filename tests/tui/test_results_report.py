"""Results: a baseline row and the relative-throughput column; the report written from the app.
Picker: the remote-code line of a profile that trusts the hub repo's code."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, OptionList

from fttui.tui.app import FttuiApp
from fttui.tui.picker import REMOTE_CODE_LINE, PickerScreen
from fttui.tui.results import BASE_MARK, ResultsScreen
from tests.tui.conftest import until
from tests.tui.fixtures import fill_store
from tests.tui.textdump import screen_text

pytestmark = pytest.mark.anyio

BASE = "20231114-221320-demo-lora-0001"  # 12.5 samples/s
FASTER = "20231114-221420-demo-lora-0002"  # 21.75 samples/s
OOM = "20231114-221520-demo-qlora-0003"


def _cell(table: DataTable, run_id: str, column: str) -> str:
    return str(table.get_cell(run_id, column))


async def _to_row(pilot, scr: ResultsScreen, run_id: str) -> None:
    table = scr.query_one(DataTable)
    want = [r["run_id"] for r in scr.shown_rows].index(run_id)
    table.cursor_coordinate = table.cursor_coordinate._replace(row=want)
    await pilot.pause()


async def _results(pilot, app) -> ResultsScreen:
    """From the picker to the results screen (``r``)."""
    await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker")
    await pilot.press("r")
    await until(pilot, lambda: isinstance(app.screen, ResultsScreen), what="results")
    return app.screen


async def test_baseline_rel_column_and_report(fttui_home):
    fill_store()
    app = FttuiApp()
    async with app.run_test(size=(120, 40)) as pilot:
        scr = await _results(pilot, app)
        table = scr.query_one(DataTable)
        assert "rel" not in scr.headers
        await _to_row(pilot, scr, BASE)
        await pilot.press("b")
        await until(pilot, lambda: "rel" in scr.headers, what="rel column")
        assert _cell(table, BASE, "rel") == f"1.00x {BASE_MARK}"
        assert _cell(table, FASTER, "rel") == "1.74x"  # 21.75 / 12.5
        assert _cell(table, OOM, "rel") == ""
        text = screen_text(app)
        assert BASE_MARK in text and "1.74x" in text
        # the report of the visible rows, with the baseline, written by a worker
        await pilot.press("w")
        exports = fttui_home / "exports"
        md = await until(pilot, lambda: next(iter(exports.glob("report-*/report.md")), None), timeout=60,
                         what="report.md")
        await until(pilot, lambda: scr.last_report == md, what="report notification")
        body = md.read_text()
        assert "rel_throughput" in body and "1.74x" in body and "baseline: " + BASE in body
        assert (md.parent / "runs.csv").exists()
        # again on the baseline: cleared, the column goes
        await _to_row(pilot, scr, BASE)
        await pilot.press("b")
        await until(pilot, lambda: "rel" not in scr.headers, what="rel column gone")
        assert scr.baseline is None and BASE_MARK not in screen_text(app)
        # an OOM row cannot be the baseline: a notice, nothing marked
        await _to_row(pilot, scr, OOM)
        await pilot.press("b")
        await pilot.pause()
        assert scr.baseline is None and "rel" not in scr.headers


def _select(app, name: str) -> None:
    ol = app.screen.query_one("#profiles", OptionList)
    ol.highlighted = ol.get_option_index(name)


def _details(app) -> str:
    """The text the details pane shows."""
    r = app.screen.query_one("#details-pane").region
    return "\n".join(line[r.x:r.right] for line in screen_text(app).splitlines()[r.y:r.bottom])


async def test_picker_remote_code_line(fttui_home, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = FttuiApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker")
        assert app.no_color
        _select(app, "baichuan2-lora")
        await until(pilot, lambda: "baichuan2-lora" in _details(app), what="baichuan2-lora details")
        assert REMOTE_CODE_LINE in _details(app)
        _select(app, "tiny-lora")
        await until(pilot, lambda: "tiny-lora" in _details(app), what="tiny-lora details")
        assert "REMOTE CODE" not in screen_text(app)


async def test_delete_a_row_after_a_confirm(fttui_home):
    """Delete on a row asks first; No keeps it, Yes removes it from the store and the table."""
    from fttui.core.results.store import Store
    from fttui.tui.dialogs import ConfirmScreen

    fill_store()
    app = FttuiApp()
    async with app.run_test(size=(120, 40)) as pilot:
        scr = await _results(pilot, app)
        await _to_row(pilot, scr, OOM)
        await pilot.press("delete")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirm")
        await pilot.press("n")
        await until(pilot, lambda: app.screen is scr, what="back on the results")
        with Store() as s:
            assert s.get(OOM) is not None
        await pilot.press("delete")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirm")
        await pilot.press("y")
        await until(pilot, lambda: OOM not in [r["run_id"] for r in scr.shown_rows], what="the row gone")
        with Store() as s:
            assert s.get(OOM) is None and s.get(BASE) is not None


async def test_a_row_stored_while_the_screen_is_open_shows_up(fttui_home):
    """A row another process stores while the results screen is open appears within 2 s, the
    sort, the filter and the row under the cursor kept (issue 40 item 6)."""
    import time

    from textual.widgets import Select

    from fttui.core.results.store import Store
    from tests.tui.fixtures import make_row

    fill_store()
    new = "20231114-221720-demo-lora-0005"
    app = FttuiApp()
    async with app.run_test(size=(120, 40)) as pilot:
        scr = await _results(pilot, app)
        table = scr.query_one(DataTable)
        scr.query_one("#f-method", Select).value = "lora"
        await until(pilot, lambda: len(scr.shown_rows) == 2, what="the lora rows")
        table.cursor_coordinate = table.cursor_coordinate._replace(column=scr.headers.index("samples_per_s"))
        await pilot.press("s")
        await pilot.press("s")  # descending
        await until(pilot, lambda: scr.sort_reverse, what="sorted descending")
        await _to_row(pilot, scr, BASE)  # 12.5 samples/s: the second of the two
        with Store() as st:
            st.put(make_row(new, samples_per_s=30.0, started="2023-11-14T22:17:20"))  # sorts first
            st.put(make_row("20231114-221820-demo-qlora-0006", method="qlora", started="2023-11-14T22:18:20"))
        t0 = time.monotonic()
        await until(pilot, lambda: new in [r["run_id"] for r in scr.shown_rows], timeout=5, what="the new row")
        assert time.monotonic() - t0 < 2.0
        await pilot.pause()
        assert [r["run_id"] for r in scr.shown_rows] == [new, FASTER, BASE]  # the filter and the sort kept
        assert len(scr.all_rows) == 6 and scr.sort_header == "samples_per_s" and scr.sort_reverse
        assert scr.shown_rows[table.cursor_coordinate.row]["run_id"] == BASE  # the cursor on its row
        assert scr.headers[table.cursor_coordinate.column] == "samples_per_s"
        # nothing changed: nothing reloaded
        shown = scr.shown_rows
        await pilot.pause(1.5)
        assert scr.shown_rows is shown
