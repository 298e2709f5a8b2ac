"""The picker's memory estimate next to the visible cards, and the confirmation before launching
a profile predicted not to fit. No real launch: the app's launch is recorded."""

from __future__ import annotations

import pytest
from textual.widgets import Input, OptionList

from fttui.monitor import FakeGpuSampler, GpuInfo, GpuSnapshot
from fttui.tui import picker as picker_mod
from fttui.tui.app import FttuiApp
from fttui.tui.dialogs import ConfirmScreen
from fttui.tui.help import HelpScreen
from fttui.tui.picker import PickerScreen, memory_verdict
from tests.tui.conftest import until
from tests.tui.fixtures import FAKE_GPUS, fixture_profiles, make_row
from tests.tui.textdump import screen_text

pytestmark = pytest.mark.anyio


def _text(app, selector: str) -> str:
    w = app.screen.query_one(selector)
    r = w.region
    lines = screen_text(app).splitlines()
    return " ".join(line[r.x:r.right].strip() for line in lines[r.y:r.bottom])


def _app(launched: list) -> FttuiApp:
    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(FAKE_GPUS)))
    app.launch_run = lambda resolved: launched.append(resolved)  # no real 7B launch
    return app


async def _select(pilot, app, name: str) -> PickerScreen:
    await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker")
    picker = app.screen
    await until(pilot, lambda: picker.store_rows is not None and picker.gpu_snap is not None,
                what="gpus and store read")
    names = [r.name for r in picker.refs]
    picker.query_one("#profiles", OptionList).highlighted = names.index(name)
    await until(pilot, lambda: picker.base and picker.base.name == name, what=f"{name} details")
    await until(pilot, lambda: picker.verdict is not None, what="estimate")
    await pilot.pause()
    return picker


def _no_runs(home) -> bool:
    runs = home / "runs"
    return not runs.exists() or not any(runs.iterdir())


# ---------------------------------------------------------------------------- pilot flows
async def test_not_fitting_profile_asks_before_launch(fttui_home):
    launched: list = []
    app = _app(launched)
    async with app.run_test(size=(100, 30)) as pilot:
        picker = await _select(pilot, app, "llama2-7b-lora")
        text = _text(app, "#estimate")
        assert "does NOT fit" in text and "of 23.99 GiB" in text and "(formula)" in text
        assert picker.verdict.fits is False
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirmation")
        q = app.screen.question
        assert q.startswith("predicted ") and "per card, the card has 23.99 GiB: launch anyway? y / n" in q
        await pilot.press("n")
        await until(pilot, lambda: app.screen is picker, what="back on the picker")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirmation again")
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is picker, what="back on the picker")
        assert launched == [] and _no_runs(fttui_home)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirmation, third")
        await pilot.press("y")
        await until(pilot, lambda: launched, what="launch")
        assert [r.name for r in launched] == ["llama2-7b-lora"]


async def test_fitting_profile_launches_without_asking_and_overrides_recompute(fttui_home):
    launched: list = []
    app = _app(launched)
    async with app.run_test(size=(100, 30)) as pilot:
        picker = await _select(pilot, app, "qwen-7b-qlora")
        assert "fits (predicted" in _text(app, "#estimate")
        assert picker.verdict.fits is True
        # a bigger batch no longer fits: the estimate follows the override
        picker.query_one("#ov-batch_size", Input).value = "256"
        await until(pilot, lambda: picker.verdict.fits is False, what="override recomputed")
        assert "does NOT fit" in _text(app, "#estimate")
        picker.query_one("#ov-batch_size", Input).value = str(picker.base.train.batch_size)
        await until(pilot, lambda: picker.verdict.fits is True, what="fits again")
        picker.query_one("#profiles", OptionList).focus()
        await pilot.press("enter")
        await until(pilot, lambda: launched, what="launch")
        assert not isinstance(app.screen, ConfirmScreen)
        assert [r.name for r in launched] == ["qwen-7b-qlora"]


async def test_cpu_profile_shows_host_and_launches_without_asking(fttui_home):
    launched: list = []
    app = _app(launched)
    async with app.run_test(size=(80, 24)) as pilot:
        picker = await _select(pilot, app, "tiny-lora")
        text = _text(app, "#estimate")
        assert "host peak" in text and "no GPU budget" in text
        assert picker.verdict.fits is None
        await pilot.press("enter")
        await until(pilot, lambda: launched, what="launch")
        assert not isinstance(app.screen, ConfirmScreen)


async def test_calibrated_from_the_store_read_once(fttui_home, tmp_path, monkeypatch):
    from fttui.core.results.store import Store

    bundled = fixture_profiles(tmp_path, monkeypatch)
    (bundled / "cal-qlora.toml").write_text(
        'method = "qlora"\n[model]\nname_or_path = "Qwen/Qwen2.5-0.5B"\narch = "qwen-1.8b"\n'
        '[data]\nsource = "synthetic"\nmax_seq_len = 512\n[train]\nbatch_size = 4\nprecision = "bf16"\n'
        '[devices]\ngpus = 1\n')
    with Store() as st:
        st.put(make_row("20231114-221320-demo-qlora-0001", method="qlora", gpus=1, batch=4))
        st.put(make_row("20231114-221420-demo-qlora-0002", method="qlora", gpus=1, batch=8,
                        started="2023-11-14T22:14:20"))
    reads = []
    real = picker_mod.read_store_rows
    monkeypatch.setattr(picker_mod, "read_store_rows", lambda: reads.append(1) or real())
    app = _app([])
    async with app.run_test(size=(100, 30)) as pilot:
        picker = await _select(pilot, app, "cal-qlora")
        assert "calibrated from 2 rows" in _text(app, "#estimate")
        picker.query_one("#ov-batch_size", Input).focus()
        await pilot.press("backspace", "8", "backspace", "2")  # four recomputes
        await until(pilot, lambda: picker.resolved.train.batch_size == 2, what="override")
        await pilot.press("escape")
        picker = await _select(pilot, app, "demo-lora")
        assert "formula" in _text(app, "#estimate")  # CPU: no matching host rows
        await pilot.press("question_mark")  # a screen that is not a run: no new read on return
        await until(pilot, lambda: not isinstance(app.screen, PickerScreen), what="help")
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is picker, what="picker again")
        await pilot.pause()
        assert len(reads) == 1
        # back from a run (launched here): read again
        await _select(pilot, app, "cal-qlora")
        app.launch_run = lambda resolved: app.push_screen(HelpScreen())
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the 'run'")
        await pilot.press("escape")
        await until(pilot, lambda: len(reads) == 2, what="store read again")


async def test_estimator_error_is_one_line_and_launch_does_not_ask(fttui_home, tmp_path, monkeypatch):
    bundled = fixture_profiles(tmp_path, monkeypatch)
    (bundled / "odd-model.toml").write_text(
        'method = "lora"\n[model]\nname_or_path = "someone/unknown-7b"\n[devices]\ngpus = 1\n')
    launched: list = []
    app = _app(launched)
    async with app.run_test(size=(100, 30)) as pilot:
        picker = await _select(pilot, app, "odd-model")
        assert picker.verdict.fits is None
        assert "estimate: not available: the estimator needs the architecture" in _text(app, "#estimate")
        await pilot.press("enter")
        await until(pilot, lambda: launched, what="launch")


# ---------------------------------------------------------------------------- the verdict
def _snap(*totals_mb: float) -> GpuSnapshot:
    return GpuSnapshot(available=True, gpus=[GpuInfo(index=i, name="card", mem_total_mb=t)
                                             for i, t in enumerate(totals_mb)])


def _resolved(name: str, *overrides: str) -> dict:
    from fttui.core.profiles import load_profile

    return load_profile(name, list(overrides))


def test_verdict_cards_limits_and_no_gpu():
    r = _resolved("llama2-7b-lora")
    v = memory_verdict(r, _snap(81920), [])
    assert v.fits is True and "fits (predicted" in v.text.plain and "of 80.00 GiB, GPU 0" in v.text.plain
    # a limit below the card is the budget
    v = memory_verdict(_resolved("llama2-7b-lora", "limits.gpu_memory=20GiB"), _snap(81920), [])
    assert v.fits is False and "the limit (limits.gpu_memory) is 20.00 GiB" in v.question
    # no card visible: nothing to compare with, no question; a limit alone still is a budget
    for snap in (GpuSnapshot(available=False, reason="no driver"), None, _snap()):
        v = memory_verdict(r, snap, [])
        assert v.fits is None and "no GPU visible" in v.text.plain and not v.question
    v = memory_verdict(_resolved("llama2-7b-lora", "limits.gpu_memory=20GiB"), None, [])
    assert v.fits is False
    # two cards, the second too small
    v = memory_verdict(_resolved("qwen-7b-qlora", "devices.gpus=2"), _snap(24564, 8192), [])
    assert v.fits is False and "GPU 1" in v.text.plain and "x2" in v.text.plain
    # more GPUs asked than visible
    v = memory_verdict(_resolved("qwen-7b-qlora", "devices.gpus=4"), _snap(24564, 24564), [])
    assert v.fits is True and "4 GPUs asked, 2 visible" in v.text.plain


async def test_command_profile_shows_its_command_and_no_estimate(fttui_home, tmp_path, monkeypatch):
    """A profile holding a [command] says, in words, that launching runs that command (and which,
    in which folder), and makes no memory estimate (it names no model)."""
    bundled = fixture_profiles(tmp_path, monkeypatch)
    (bundled / "my-script.toml").write_text(
        '# fttui run --profile my-script\n# my own Trainer script\ndescription = "my script"\n'
        '[command]\nargv = ["python", "train.py", "--epochs", "1"]\n')
    launched: list = []
    app = _app(launched)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker")
        picker = app.screen
        await until(pilot, lambda: picker.store_rows is not None, what="store read")
        names = [r.name for r in picker.refs]
        picker.query_one("#profiles", OptionList).highlighted = names.index("my-script")
        await until(pilot, lambda: picker.base and picker.base.name == "my-script", what="details")
        await pilot.pause()
        details = _text(app, "#details")
        assert "COMMAND: launching runs this command" in details
        assert "python train.py --epochs 1" in details
        assert picker.verdict is None and not picker.query_one("#estimate").display


async def test_gpu_profile_without_a_card_says_how_to_name_one(fttui_home, tmp_path):
    """No card visible: the picker's time line of a GPU profile says so and how to name the card,
    with no hours from a CPU's default rate (issue 40 item 7a)."""
    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(tmp_path / "no-gpus.json")))  # no file: no card
    app.launch_run = lambda resolved: None
    async with app.run_test(size=(120, 40)) as pilot:
        picker = await _select(pilot, app, "llama2-7b-lora")
        await until(pilot, lambda: picker.forecast is not None, what="the time line")
        line = picker.forecast.plain
        assert line.startswith("time: not forecast for the ") and "no GPU is visible here and no card is named" in line
        assert "--card NAME" in line and "GFLOP/s" not in line and " h " not in line
