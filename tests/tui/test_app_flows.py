"""Pilot flows through the app: picker, run screen, results, dialogs."""

from __future__ import annotations

import json

import shutil

import pytest
from textual.widgets import DataTable, Input, OptionList

from fttui.core.run.files.rundir import RunDir
from fttui.tui.app import FttuiApp
from fttui.tui.dialogs import ConfirmScreen, QuitScreen
from fttui.tui.help import HelpScreen
from fttui.tui.picker import PickerScreen
from fttui.tui.probe_screen import ProbeScreen
from fttui.tui.results import ResultsScreen
from fttui.tui.run_screen import RunScreen
from tests.helpers import processes_mentioning, wait_for
from tests.tui.conftest import until
from tests.tui.textdump import screen_text
from tests.tui.fixtures import fill_store, fixture_profiles, live_pid, write_run

pytestmark = pytest.mark.anyio


def _status(app) -> str:
    scr = app.screen
    return scr.status_text()[0] if isinstance(scr, RunScreen) else ""


def _static_text(app, selector: str) -> str:
    """The text of the screen region a widget covers (what the user sees there)."""
    w = app.screen.query_one(selector)
    r = w.region
    lines = screen_text(app).splitlines()
    return "\n".join(line[r.x:r.right] for line in lines[r.y:r.bottom])


async def _tab_to(pilot, field: str) -> None:
    """Tab on (keyboard only) until the field ``field`` has the focus."""
    for _ in range(6):
        if getattr(pilot.app.focused, "id", None) == field:
            break
        await pilot.press("tab")
    assert pilot.app.focused.id == field


@pytest.mark.e2e
async def test_pick_change_batch_launch_complete_and_result_row(fttui_home):
    app = FttuiApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker")
        picker = app.screen
        names = [r.name for r in picker.refs]
        assert "tiny-lora" in names
        ol = picker.query_one("#profiles", OptionList)
        assert app.focused is ol
        await pilot.press("home", *["down"] * names.index("tiny-lora"))
        await until(pilot, lambda: picker.base and picker.base.name == "tiny-lora", what="tiny-lora details")
        # keyboard only: tab to the batch field, type over it
        await _tab_to(pilot, "ov-batch_size")
        await pilot.press("3", "2")
        await until(pilot, lambda: picker.resolved and picker.resolved.train.batch_size == 32,
                    what="batch override applied")
        assert "32 x accum 1" in _static_text(app, "#details")
        # and the sequence length, two fields on (batch, accum, seq len): 32 tokens, a quicker run
        await _tab_to(pilot, "ov-max_seq_len")
        await pilot.press("3", "2")
        await until(pilot, lambda: picker.resolved and picker.resolved.data.max_seq_len == 32,
                    what="seq len override applied")
        assert "max_seq_len 32" in _static_text(app, "#details")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        run = app.screen
        # generous: a training process takes its seconds to start on a loaded machine
        await until(pilot, lambda: run.final is not None, timeout=180, what="run end", step=0.25)
        assert _status(app) == "COMPLETED"
        assert run.query_one("#run-summary").display
        # the panel is laid out on the next refresh after it is shown (its region was empty once in CI)
        await until(pilot, lambda: "batch_size 32" in _static_text(app, "#run-summary"), what="the summary's row")
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, ResultsScreen), what="results")
        table = app.screen.query_one(DataTable)
        assert table.row_count == 1
        row = table.get_row_at(0)
        assert "lora" in [str(c) for c in row] and "32" in [str(c) for c in row]
        await pilot.press("escape")
        assert app.screen is run
        await pilot.press("q")  # the run is over: no question
        await pilot.pause()
    assert app.return_code == 0


@pytest.mark.e2e
async def test_cancel_with_confirmation(fttui_home):
    from fttui.core.profiles import load_profile

    resolved = load_profile("tiny-lora", ["max_steps=100000"])
    app = FttuiApp(launch_profile=resolved)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        run = app.screen
        rd = run.rd
        await until(pilot, lambda: run.snap is not None and run.snap.status == "running", timeout=120,
                    what="training started", step=0.25)
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirmation")
        await pilot.press("y")
        await until(pilot, lambda: app.screen is run, what="dialog closed")
        await until(pilot, lambda: run.final is not None, timeout=30, what="cancelled", step=0.25)
        assert _status(app).startswith("CANCELLED")
        assert run.query_one("#run-status").has_class("-cancelled")
    wait_for(lambda: not processes_mentioning(str(rd.path)), timeout=20, what="run processes gone")


async def test_oom_run_shows_out_of_memory(fttui_home):
    rd = write_run("20231114-221320-demo-oom-0001", status="oom", oom=True, gpus=0)
    app = FttuiApp(attach=str(rd))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        text = _status(app)
        assert text.startswith("OUT OF MEMORY (cpu)")
        assert "can't allocate memory" in text
        assert app.screen.query_one("#run-status").has_class("-oom")
        assert "OUT OF MEMORY" in _static_text(app, "#run-status")
        assert "none: NVML library not found" in _static_text(app, "#gpu-none")
        assert "OOM" in _static_text(app, "#run-summary")


async def test_oom_summary_names_the_phase_and_the_term_that_grew(fttui_home):
    rd = write_run("20231114-221320-demo-oom-0002", status="oom", oom=True, gpus=0)
    row = json.loads((rd / "row.json").read_text())
    why = ("backward of step 2, longest sequence 412: activations 61 MiB predicted where 38 MiB were left after "
           "weights, gradients and optimizer states (of limits.host_memory 138MiB)")
    held = "122 MiB live in 144 MiB reserved: weights 32 MiB (estimate 29 MiB), activations 89 MiB"
    (rd / "row.json").write_text(json.dumps(row | {"oom_phase": "backward", "oom_explained": why, "oom_held": held}))
    app = FttuiApp(attach=str(rd))
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        await until(pilot, lambda: app.screen.query_one("#run-summary").display, what="the summary row")
        # the panel's lines without its border, as one line of words
        text = " ".join(_static_text(app, "#run-summary").replace("\u2502", " ").split())
        assert f"out of memory in the {why}" in text
        assert f"held: {held}" in text  # a CUDA one's allocator snapshot (fttui.core.run.row.oomheld)


async def test_attach_finished_run_with_two_gpus(fttui_home):
    rd = write_run("20231114-221320-demo-lora-0001", status="completed", gpus=2)
    app = FttuiApp(attach=str(rd))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        scr = app.screen
        assert _status(app) == "COMPLETED"
        assert len(scr.query(".gpu-card")) == 2
        card0 = _static_text(app, "#gpu-0")
        assert "GPU 0" in card0 and "15.4/24.0 GB" in card0 and "torch rsv 10.0 GB" in card0
        assert "peak 16.6 GB" in card0  # 16958.8 MB
        assert "util 88%" in card0 and "335 W" in card0 and "64°C" in card0
        assert "GPU 1" in _static_text(app, "#gpu-1")
        assert "step 12/20" in _static_text(app, "#run-progress")
        assert "step 12/20 loss 1.53" in _static_text(app, "#log")
        assert scr.query_one("#run-summary").display
        # the panels survive resizing, down to 80x24 and back
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.2)
        await pilot.resize_terminal(120, 40)
        await pilot.pause(0.2)
        assert len(scr.query(".gpu-card")) == 2
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


async def test_picker_shows_two_fake_gpus(fttui_home, fake_gpu_sampler, tmp_path, monkeypatch):
    fixture_profiles(tmp_path, monkeypatch)
    app = FttuiApp(gpu_sampler=fake_gpu_sampler)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker")
        # read in a thread worker after the first frame: wait for both cards to be drawn
        await until(pilot, lambda: _static_text(app, "#gpus").count("NVIDIA GeForce RTX 4090") == 2,
                    what="gpu list")
        text = _static_text(app, "#gpus")
        assert "2 visible" in text
        assert "5.7/24.0 GB" in text


async def test_picker_without_gpus_and_bad_override(fttui_home, tmp_path, monkeypatch):
    from fttui.monitor import FakeGpuSampler

    fixture_profiles(tmp_path, monkeypatch)
    bad = tmp_path / "missing.json"
    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(bad)))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker")
        picker = app.screen
        await until(pilot, lambda: "GPUs: none" in _static_text(app, "#gpus"), what="no-GPU reason")
        # batch size 0: the one-line error shows in the pane, launching is refused, nothing crashes
        picker.query_one("#ov-batch_size", Input).focus()
        await pilot.press("0")
        await until(pilot, lambda: picker.resolved is None, what="error")
        assert "batch_size" in picker.error_text and "\n" not in picker.error_text
        assert "train.batch_size: must be >= 1" in _static_text(app, "#picker-error")
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, PickerScreen)
        assert not (fttui_home / "runs").exists()
        # a valid value clears it
        await pilot.press("backspace", "2")
        await until(pilot, lambda: picker.resolved is not None, what="valid again")
        assert not picker.query_one("#picker-error").display
        assert "2 x accum 2 x 1 proc = 4 effective" in _static_text(app, "#details")


async def test_quit_while_live_asks_detach_stop_or_stay(fttui_home):
    rd = write_run("20231114-221320-demo-live-0001", status=None, gpus=1, live_pid=live_pid())
    app = FttuiApp(attach=str(rd))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        assert _status(app) == "RUNNING"
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, QuitScreen), what="quit dialog")
        await pilot.press("escape")  # stay
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="back on the run")
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, QuitScreen), what="quit dialog")
        await pilot.press("s")  # stop: cancel, then quit
        await pilot.pause()
    assert RunDir(rd).cancel_path.exists()
    assert app.return_code == 0


async def test_quit_detach_leaves_run_alone(fttui_home):
    rd = write_run("20231114-221320-demo-live-0002", status=None, gpus=1, live_pid=live_pid())
    app = FttuiApp(attach=str(rd))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, QuitScreen), what="quit dialog")
        await pilot.press("d")
        await pilot.pause()
    assert not RunDir(rd).cancel_path.exists()


async def test_run_dir_deleted_while_shown(fttui_home):
    rd = write_run("20231114-221320-demo-live-0003", status=None, gpus=2, live_pid=live_pid())
    app = FttuiApp(attach=str(rd))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        shutil.rmtree(rd)
        await until(pilot, lambda: "DELETED" in _status(app), timeout=5, what="deleted status")
        await pilot.pause(0.6)
        assert "DELETED" in _static_text(app, "#run-status")
        await pilot.press("c")  # not live any more: a notice, no crash
        await pilot.pause()
        assert isinstance(app.screen, RunScreen)


async def test_results_sort_filter_export(fttui_home):
    rows = fill_store()
    app = FttuiApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker")
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, ResultsScreen), what="results")
        scr = app.screen
        table = scr.query_one(DataTable)
        assert table.row_count == len(rows)
        # sort by samples/s with the keyboard: move the cursor to the column, press s (twice: reverse)
        col = scr.headers.index("samples_per_s")
        await pilot.press(*["right"] * col, "s")
        assert [r["run_id"] for r in scr.shown_rows][:3] == [
            "20231114-221620-demo-full-0004", "20231114-221320-demo-lora-0001", "20231114-221420-demo-lora-0002"]
        await pilot.press("s")
        assert scr.shown_rows[0]["run_id"] == "20231114-221420-demo-lora-0002"
        assert scr.shown_rows[-1]["status"] == "oom"  # missing figures stay last
        # filter by method with the keyboard: tab to the method select, open, pick
        await pilot.press("shift+tab")
        assert app.focused.id == "f-method"
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("down", "down", "enter")  # any, full, lora -> lora
        await until(pilot, lambda: len(scr.shown_rows) == 2, what="filtered rows")
        assert {r["method"] for r in scr.shown_rows} == {"lora"}
        assert table.row_count == 2
        # export the visible rows
        await pilot.press("m")
        await pilot.pause()
        exports = list((fttui_home / "exports").glob("*.md"))
        assert len(exports) == 1
        text = exports[0].read_text()
        assert text.count("\n") == 2 + 2 and "qlora" not in text
        await pilot.press("v")
        await pilot.pause()
        csvs = list((fttui_home / "exports").glob("*.csv"))
        assert len(csvs) == 1 and csvs[0].read_text().count("\n") == 3
        # click a header sorts too
        await pilot.click(DataTable, offset=(2, 0))
        await pilot.pause()
        assert scr.sort_header == scr.headers[0] == "name"  # the first column (the run's name)


async def test_help_and_probe_keys(fttui_home):
    app = FttuiApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker")
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker again")
        await pilot.press("p")
        await until(pilot, lambda: isinstance(app.screen, ProbeScreen), what="probe screen")
        assert app.screen.state == "idle"
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker after the probe")


@pytest.mark.parametrize("size", [(80, 24)])
async def test_no_color_flows(fttui_home, monkeypatch, size, tmp_path):
    """NO_COLOR: the status and bars still read (text, not colour); screens render at 80x24."""
    monkeypatch.setenv("NO_COLOR", "1")
    rd = write_run("20231114-221320-demo-oom-0002", status="oom", oom=True, gpus=2)
    fill_store()
    app = FttuiApp(attach=str(rd))
    async with app.run_test(size=size) as pilot:
        assert app.no_color
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        assert "OUT OF MEMORY" in _static_text(app, "#run-status")
        svg = app.export_screenshot()
        assert "OUT&#160;OF&#160;MEMORY" in svg or "OUT OF MEMORY" in svg
        assert "█" in svg  # bars are drawn with characters
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, ResultsScreen), what="results")
        assert app.screen.query_one(DataTable).row_count == 4
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        app.export_screenshot()
        await pilot.press("escape", "escape")
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="back")
    fixture_profiles(tmp_path, monkeypatch)
    monkeypatch.setenv("NO_COLOR", "1")
    app = FttuiApp()
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker")
        assert app.no_color
        assert "demo-lora" in _static_text(app, "#details")


async def test_attach_command_run_with_its_small_profile(fttui_home):
    """A `fttui run -- CMD` run's profile.json holds only its name, command and limits: the run
    screen shows it (steps from the callback's events) without the sections a profile has."""
    import json

    rd = write_run("20231114-221320-my-script-0001", status="completed", gpus=0)
    (rd / "profile.json").write_text(json.dumps({"name": "my-script", "origin": "command",
                                                 "command": {"argv": ["python", "train.py"], "cwd": "/work"},
                                                 "limits": {}, "monitor": {}}))
    app = FttuiApp(attach=str(rd))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        await pilot.pause()
        assert _status(app) == "COMPLETED"
        assert "step 12/20" in _static_text(app, "#run-progress")
