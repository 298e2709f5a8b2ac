"""Keys typed ahead of the picker's focus moves land where the user meant them.

A fast typist (or a paste over SSH) sends Tab and the digits in one burst: the terminal driver
posts them to the app together. Textual sends each key to the widget focused when the app reads
it; a Tab that is an ordinary binding moves the focus only after it has bubbled up from the list
through the screen's queue, so digits right behind it went to the profile list and were lost (the
tmux flow's flake on a loaded machine). The app's Tab and Shift+Tab are priority bindings: the
focus moves as the app reads the Tab, before the next key is routed.
"""

from __future__ import annotations

import pytest
from textual import events
from textual.widgets import Input, OptionList

from fttui.tui.app import FttuiApp
from fttui.tui.picker import PickerScreen
from tests.tui.conftest import until

pytestmark = pytest.mark.anyio


def _burst(app, *keys: str) -> None:
    """The keys posted to the app at once, as the terminal driver posts one read's keys."""
    chars = {"tab": "\t", "shift+tab": None}
    for key in keys:
        app.post_message(events.Key(key, chars.get(key, key)))


async def test_tab_then_digits_in_one_burst_reach_the_batch_field(fttui_home):
    app = FttuiApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker")
        picker = app.screen
        await until(pilot, lambda: picker.ready and picker.base is not None, what="override fields")
        assert app.focused is picker.query_one("#profiles", OptionList)
        batch = picker.query_one("#ov-batch_size", Input)
        # list -> details -> batch, then "32" typed over the batch size, all in one read
        _burst(app, "tab", "tab", "3", "2")
        await until(pilot, lambda: picker.resolved is not None and picker.resolved.train.batch_size == 32,
                    what="batch 32 typed into the batch field")
        assert app.focused is batch and batch.value == "32"
        # and back: shift+tab twice returns to the list before the next key is routed, so the
        # down right behind them moves the list to the second profile
        ol = picker.query_one("#profiles", OptionList)
        _burst(app, "shift+tab", "shift+tab", "down")
        await until(pilot, lambda: ol.highlighted == 1 and picker.base is not None
                    and picker.base.name == picker.refs[1].name, what="the down key moved the list")
        assert app.focused is ol
        await pilot.pause()
