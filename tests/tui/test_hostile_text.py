"""Text from files anyone can write reaches the app's screens as it is, and only as text (issue 36):
a stored row, a run directory, a profile folder or a GPU name that carries terminal controls
(ESC/OSC sequences: the window title, the clipboard, clearing the screen; BEL; U+202E) shows them
as their escapes (``\\x1b``), and one that carries Textual markup (``[link=...]``, ``[reverse]``, a
lone ``[/bold]``) shows the brackets: no hyperlink, no style, no MarkupError."""

from __future__ import annotations

import ast
import io
import json
import os
import sqlite3

import pytest
from rich.console import Console
from textual.widgets import DataTable, Select

from fttui.core.base import paths
from fttui.core.base.inert import control_chars
from fttui.core.results.store import Store
from fttui.monitor import FakeGpuSampler
from fttui.tui.app import FttuiApp
from fttui.tui.dialogs import ConfirmScreen
from fttui.tui.picker import PickerScreen
from fttui.tui.plain import plain
from fttui.tui.results import ResultsScreen
from fttui.tui.run_panels import RunSummary
from fttui.tui.run_screen import RunScreen
from tests.tui.conftest import until
from tests.tui.fixtures import FAKE_GPUS, PROFILE_LORA, ROOT, fixture_profiles, make_row, probe_result, write_run

pytestmark = pytest.mark.anyio

TITLE = "\x1b]0;pwned\x07"  # OSC 0: the window title
CLEAR = "\x1b[2J"  # clear the screen
CLIP = "\x1b]52;c;cHduZWQ=\x07"  # OSC 52: write the clipboard
RLO = "\u202e"  # right-to-left override
LINK = "[link=https://example.invalid]click[/link]"
EVIL_HOST = "example.invalid"

RUN_ID = f"20231114-221320-evil{CLEAR}{RLO}-0001"
MODEL = f"org/m{TITLE}[reverse]"  # the results screen shows the part after the last "/"
PROFILE = f"p{RLO}{LINK}"
DATASET = f"d{CLIP}[/bold]"
GPU = f"H100 {CLEAR}[reverse]"
ERROR = f"boom {TITLE} {LINK} [/bold]"


def rendered(app) -> tuple[str, set[str]]:
    """The current screen's text as a terminal would get it (without the app's own cursor
    moves) and every hyperlink in it."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", legacy_windows=False, safe_box=False)
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    segments = [s for s in console.render(update) if not s.control]
    links = {s.style.link for s in segments if s.style is not None and s.style.link}
    return "".join(s.text for s in segments), links


def assert_inert(app, *shown: str) -> str:
    """No character a terminal would obey, no hyperlink from data, the title the app's own; each
    of ``shown`` on screen."""
    text, links = rendered(app)
    assert control_chars(text) == [], control_chars(text)
    assert not [u for u in links if EVIL_HOST in u], links
    assert app.title == "fttui"
    for s in shown:
        assert s in text, (s, [ln.strip() for ln in text.splitlines() if ln.strip()])
    return text


def _store_hostile_rows() -> None:
    """Two rows: one stored as fttui stores it (markup only), one whose texts carry control
    characters, written into the store's file as another program (or an older fttui) could."""
    with Store() as st:
        st.put(make_row("20231114-221420-markup-0002", model="org/[reverse]x",
                        samples_per_s=20.0) | {"profile": LINK, "dataset": "[/bold]", "gpu": "[/]"})
        st.put(make_row("placeholder", samples_per_s=10.0))
    con = sqlite3.connect(paths.store_path())
    with con:
        con.execute("UPDATE runs SET run_id = ?, model = ?, profile = ?, dataset = ?, gpu = ?, error = ?, "
                    "status = ? WHERE run_id = 'placeholder'",
                    (RUN_ID, MODEL, PROFILE, DATASET, GPU, ERROR, "completed"))
    con.close()


def _hostile_gpus() -> dict:
    data = json.loads(FAKE_GPUS.read_text())
    for frame in data["frames"]:
        for g in frame:
            g["name"] = f"NVIDIA {CLEAR}[link=https://example.invalid]GPU[/link]"
    data["driver"] = f"550{TITLE}"
    return data


MARKUP_NAME = "0[reverse]$(touch pwned)[link=x]"  # a file's stem: refused at load, listed as it is
CONTROL_NAME = f"1{TITLE}{RLO}"


def _hostile_profiles(tmp_path, monkeypatch) -> None:
    """Besides the fixture's two: profiles whose texts are markup or carry control characters,
    under a name fttui takes and under names it refuses (markup, control characters)."""
    bundled = fixture_profiles(tmp_path, monkeypatch)
    markup = PROFILE_LORA.replace('description = "LoRA on a random tiny Llama with synthetic data"',
                                  f'description = "{LINK} [/bold] [reverse]"')
    markup = markup.replace('source = "synthetic"', 'source = "synthetic"\nname = "[/bold]$(touch pwned)"')
    controls = PROFILE_LORA.replace('description = "LoRA on a random tiny Llama with synthetic data"',
                                    'description = "x\\u001b]0;pwned\\u0007 \\u001b[2J \\u202e"')
    (bundled / "evil-markup.toml").write_text(markup)
    (bundled / "evil-controls.toml").write_text(controls)
    (bundled / f"{MARKUP_NAME}.toml").write_text(markup)
    (bundled / f"{CONTROL_NAME}.toml").write_text(controls)


async def test_results_screen_shows_hostile_rows_as_text(fttui_home):
    _store_hostile_rows()
    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(FAKE_GPUS)))
    async with app.run_test(size=(400, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker")
        await pilot.press("r")
        scr = await until(pilot, lambda: isinstance(app.screen, ResultsScreen) and app.screen, what="results")
        await pilot.pause()
        assert scr.query_one(DataTable).row_count == 2
        text = assert_inert(app, "m\\x1b]0;pwned\\x07[reverse]", "evil\\x1b[2J\\u202e-0001",
                            f"p\\u202e{LINK}", "d\\x1b]52;c;cHduZWQ=\\x07[/bold]", LINK)
        assert "[reverse]x" in text
        # the model filter's list holds the stored names as they are
        sel = scr.query_one("#f-model", Select)
        sel.expanded = True
        await pilot.pause()
        assert_inert(app, "org/m\\x1b]0;pwned\\x07[reverse]")
        sel.expanded = False
        await pilot.pause()
        # the hostile row as the baseline (a notice and the info line name it), then its delete dialog
        table = scr.query_one(DataTable)
        table.focus()
        row = [r["run_id"] for r in scr.shown_rows].index(RUN_ID)
        table.cursor_coordinate = table.cursor_coordinate._replace(row=row)
        await pilot.pause()
        await pilot.press("b")
        await until(pilot, lambda: scr.baseline is not None, what="the baseline")
        await pilot.pause()
        assert_inert(app, "baseline 20231114-221320-evil\\x1b[2J\\u202e-0001")
        await pilot.press("delete")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the delete dialog")
        await pilot.pause()
        assert_inert(app, "Delete the stored row of", "evil\\x1b[2J\\u202e-0001?")
        await pilot.press("n")
        await until(pilot, lambda: app.screen is scr, what="the results again")


async def test_run_screen_shows_hostile_run_as_text(fttui_home):
    rd = write_run(RUN_ID, status="oom", oom=True, gpus=1)
    status = json.loads((rd / "status.json").read_text())
    (rd / "status.json").write_text(json.dumps(status | {"error": ERROR}))
    row = json.loads((rd / "row.json").read_text())
    (rd / "row.json").write_text(json.dumps(row | {"model": MODEL, "profile": PROFILE, "dataset": DATASET,
                                                   "gpu": GPU, "error": ERROR}))
    samples = [json.loads(line) for line in (rd / "samples.jsonl").read_text().splitlines()]
    for s in samples:
        for g in s["gpu"]["gpus"]:
            g["name"] = GPU
    (rd / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    with open(rd / "train.log", "a") as f:
        f.write(f"log {TITLE}{CLEAR} {LINK} [/bold]\n")
    app = FttuiApp(attach=str(rd))
    async with app.run_test(size=(160, 50)) as pilot:
        scr = await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen, what="run screen")
        await until(pilot, lambda: scr.query_one(RunSummary).display, what="the summary row")
        await pilot.pause()
        assert_inert(app, "evil\\x1b[2J\\u202e-0001", "m\\x1b]0;pwned\\x07[reverse]", LINK,
                     "H100 \\x1b[2J[reverse]", "d\\x1b]52;c;cHduZWQ=\\x07[/bold]")
        await pilot.press("c")  # the run is not live: a notice, no dialog
        await pilot.pause()
        assert_inert(app)


async def test_picker_and_live_runs_show_hostile_names_as_text(tmp_path, monkeypatch, fttui_home):
    _hostile_profiles(tmp_path, monkeypatch)
    live = write_run(f"20231114-221420-{LINK[:5]}{TITLE}-0002", status=None, live_pid=os.getpid(), steps=3)
    prof = json.loads((live / "profile.json").read_text())
    (live / "profile.json").write_text(json.dumps(prof | {"name": f"n{CLIP}[/bold]"}))
    app = FttuiApp(gpu_sampler=FakeGpuSampler(_hostile_gpus()))
    async with app.run_test(size=(160, 50)) as pilot:
        picker = await until(pilot, lambda: isinstance(app.screen, PickerScreen) and app.screen, what="picker")
        await until(pilot, lambda: picker.gpu_snap is not None and picker.live is not None and picker.live.briefs,
                    what="the picker's GPUs and live runs")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert_inert(app, "[link\\x1b]0;pwned\\x07-0002", "n\\x1b]52;c;cHduZWQ=\\x07[/bold]",
                     "[link=https://example.invalid]GPU[/link]", "driver 550\\x1b]0;pwned\\x07")
        picker.query_one("#profiles").focus()
        for _ in range(len(picker.refs)):  # every profile's details (or its error)
            await pilot.pause()
            assert_inert(app)
            await pilot.press("down")
        names = [r.name for r in picker.refs]
        picker._select_profile(names.index("evil-markup"))
        await pilot.pause()
        assert_inert(app, f"{LINK} [/bold] [reverse]", "[/bold]$(touch pwned)")
        picker._select_profile(names.index("evil-controls"))
        await pilot.pause()
        assert_inert(app, "evil-controls")
        picker._select_profile(names.index(MARKUP_NAME))  # refused: the error names the file
        await pilot.pause()
        assert_inert(app, MARKUP_NAME)
        picker._select_profile(names.index(CONTROL_NAME))
        await pilot.pause()
        assert_inert(app, "1\\x1b]0;pwned\\x07\\u202e")
        # the live run's screen
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="the run screen")
        await pilot.pause()
        assert_inert(app, "[link\\x1b]0;pwned\\x07-0002")
    assert not (tmp_path / "cwd" / "pwned").exists()


def test_recorded_probe_texts_are_inert():
    """A recorded probe (a file) shown on the probe screen: its note and a trial's OOM kind."""
    from dataclasses import replace

    from fttui.tui.probe_view import boundary_text, trial_row

    res = replace(probe_result(), note=f"n{TITLE}{LINK}")
    text = boundary_text(res)
    assert control_chars(text.plain) == [] and f"note: n\\x1b]0;pwned\\x07{LINK}" in text.plain
    row = trial_row(replace(res.trials[6], oom_kind=f"cpu{CLEAR}[/bold]"), res)
    assert "OOM (cpu\\x1b[2J[/bold])" in [c.plain for c in row]
    assert not [c for c in row if control_chars(c.plain) or c.spans]


def test_plain_is_inert_text():
    t = plain(f"a{TITLE}{LINK}\tb\nc", style="bold")
    assert t.plain == f"a\\x1b]0;pwned\\x07{LINK} b c" and str(t.style) == "bold" and not t.spans
    assert plain("x\ny", lines=True).plain == "x\ny"
    assert plain(None).plain == ""


def _notice_calls(tree: ast.AST):
    """The calls of ``notify`` (``x.notify(...)``, not the app's ``super().notify``) and those that
    hand it on (``call_from_thread(self.notify, ...)``)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        called = isinstance(f, ast.Attribute) and f.attr == "notify" and not (
            isinstance(f.value, ast.Call) and isinstance(f.value.func, ast.Name) and f.value.func.id == "super")
        if called or any(isinstance(a, ast.Attribute) and a.attr == "notify" for a in node.args):
            yield node


def test_every_notice_of_the_app_is_text():
    """Each ``notify`` in fttui/tui passes ``markup=False``: a notice names run ids, errors and
    paths, never markup (Textual reads a message as markup unless told; the app's ``notify``
    makes it inert)."""
    missing = []
    for path in sorted((ROOT / "fttui" / "tui").glob("*.py")):
        for call in _notice_calls(ast.parse(path.read_text())):
            if not any(k.arg == "markup" and isinstance(k.value, ast.Constant) and k.value.value is False
                       for k in call.keywords):
                missing.append(f"{path.name}:{call.lineno}")
    assert missing == [], missing
