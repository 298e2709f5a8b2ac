"""The app opens on what matters: live runs found on disk are listed above the profiles and one
key attaches; with none, the picker is as it always was."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from textual.widgets import DataTable, OptionList

from fttui.tui.app import FttuiApp
from fttui.tui.live_runs import COLUMNS
from fttui.tui.picker import PickerScreen
from fttui.tui.run_screen import RunScreen
from tests.tui.conftest import until
from tests.tui.fixtures import T0, fixture_profiles, write_run

pytestmark = pytest.mark.anyio


@pytest.fixture
def other_process():
    """A process that is not the app: the supervisor of a run some other fttui started."""
    p = subprocess.Popen(["sleep", "120"])
    yield p.pid
    p.kill()
    p.wait()


async def _picker(pilot, app) -> PickerScreen:
    await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker")
    picker = app.screen
    await until(pilot, lambda: picker.gpu_snap is not None, what="the picker's GPUs")
    await app.workers.wait_for_complete()
    await pilot.pause()
    return picker


def _cells(table: DataTable) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def test_live_run_listed_and_enter_attaches(tmp_path, monkeypatch, fake_gpu_sampler, other_process):
    fixture_profiles(tmp_path, monkeypatch)
    write_run("20231114-221320-demo-lora-0001", status="completed")
    live = write_run("20231114-221420-demo-lora-0002", status=None, live_pid=other_process, steps=12,
                     total_steps=20)
    app = FttuiApp(gpu_sampler=fake_gpu_sampler)
    async with app.run_test(size=(100, 30)) as pilot:
        picker = await _picker(pilot, app)
        await until(pilot, lambda: picker.live is not None and picker.live.briefs, what="the live runs pane")
        table = picker.query_one("#live-table", DataTable)
        assert [str(c.label) for c in table.columns.values()] == list(COLUMNS)
        started = time.strftime("%m-%d %H:%M", time.localtime(T0))  # not today: with its date
        # only the live one; its step of total and the ETA at the steady 0.8 s a step
        assert _cells(table) == [[live.name, "demo-lora", "running", "12/20", "00:06", started]]
        assert picker.live.border_title == "live runs (1)"
        assert app.focused is table  # one key away
        assert "a" in app.screen.active_bindings  # "a Attach" in the footer
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="the run screen")
        assert app.screen.rd.path == live
        assert app.screen.status_text()[0] == "RUNNING"
        # the run ends while it is shown; back on the picker, the pane is gone with it
        (live / "status.json").write_text(json.dumps({"status": "completed", "returncode": 0}))
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is picker, what="the picker again")
        await until(pilot, lambda: not picker.live.display, what="no live run any more")
        assert "a" not in app.screen.active_bindings
        assert app.focused is picker.query_one("#profiles", OptionList)


async def test_a_attaches_from_the_profile_list(tmp_path, monkeypatch, fake_gpu_sampler, other_process):
    fixture_profiles(tmp_path, monkeypatch)
    older = write_run("20231114-221420-demo-lora-0002", status=None, live_pid=other_process, steps=3)
    newer = write_run("20231114-221520-demo-lora-0003", status=None, live_pid=other_process, steps=5)
    app = FttuiApp(gpu_sampler=fake_gpu_sampler)
    async with app.run_test(size=(80, 24)) as pilot:
        picker = await _picker(pilot, app)
        await until(pilot, lambda: picker.live is not None and len(picker.live.briefs) == 2, what="two live runs")
        table = picker.query_one("#live-table", DataTable)
        assert [row[0] for row in _cells(table)] == [newer.name, older.name]  # newest first
        await pilot.press("down")  # the older one
        await pilot.press("escape")  # to the profiles: `a` still attaches the run under the cursor
        assert app.focused is picker.query_one("#profiles", OptionList)
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="the run screen")
        assert app.screen.rd.path == older
        assert app.runs and app.runs[0].path == older  # quitting now asks: detach or stop


async def test_no_live_run_opens_the_picker_as_before(tmp_path, monkeypatch, fake_gpu_sampler):
    fixture_profiles(tmp_path, monkeypatch)
    write_run("20231114-221320-demo-lora-0001", status="completed")
    write_run("20231114-221420-demo-lora-0002", status="oom", oom=True)
    app = FttuiApp(gpu_sampler=fake_gpu_sampler)
    async with app.run_test(size=(80, 24)) as pilot:
        picker = await _picker(pilot, app)
        assert picker.live is None and not picker.query("#live-runs")
        assert app.focused is picker.query_one("#profiles", OptionList)
        assert picker.base is not None and picker.base.name == "demo-lora"
        assert "a" not in app.screen.active_bindings  # no Attach in the footer
        await pilot.press("a")  # nothing to attach: nothing happens
        await pilot.pause()
        assert app.screen is picker
