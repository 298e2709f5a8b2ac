"""The run screen shows MFU per card and warns before an OOM (issue 14): a live recorded run on two
fake RTX 4090s whose second rank's caching allocator starts retrying."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fttui.core.profiles import load_profile
from fttui.tui.app import FttuiApp
from fttui.tui.run_screen import RunScreen
from tests.tui.conftest import until
from tests.tui.fixtures import live_pid, write_run
from tests.tui.textdump import screen_text

pytestmark = pytest.mark.anyio

# TinyLlama-1.1B's shape with LoRA r 8 on q and v (as tests/unit/test_perf.py)
SHAPE = {"vocab": 32_000, "hidden": 2048, "layers": 22, "attn_dim": 2048, "tied": False}
TOTAL, TRAINABLE = 1_100_048_384 + 1_126_400, 1_126_400


def _live_run(retry_from: int | None) -> Path:
    """A live run (this process plays the supervisor) whose start events carry the profile and the
    model's shape; rank 1 reports 2 allocator retries from step ``retry_from`` on."""
    rd = write_run(f"20231114-221320-demo-perf-000{retry_from or 0}", status=None, gpus=2, live_pid=live_pid())
    prof = load_profile("tiny-lora", ["gpus=2", "precision=bf16"])
    events = []
    for line in (rd / "events.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev["event"] == "start":
            ev.update(config=prof.to_dict(), params_total=TOTAL, params_trainable=TRAINABLE, model_shape=SHAPE)
        if ev["event"] == "step":
            late = retry_from is not None and ev["rank"] == 1 and ev["step"] >= retry_from
            ev.update(torch_alloc_retries=2 if late else 0, torch_ooms=0)
        events.append(ev)
    (rd / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return rd


def _region(app, widget) -> str:
    r = widget.region
    return "\n".join(line[r.x:r.right] for line in screen_text(app).splitlines()[r.y:r.bottom])


async def test_cards_show_mfu_and_the_near_oom_warning(fttui_home):
    app = FttuiApp(attach=str(_live_run(retry_from=10)))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        scr = app.screen
        await until(pilot, lambda: scr.snap is not None and scr.snap.step == 12, what="all steps folded")
        snap = scr.snap
        await until(pilot, lambda: "NEAR OOM" in str(scr.query_one("#gpu-1").border_title), what="warning title")
        assert "NEAR OOM" not in str(scr.query_one("#gpu-0").border_title)
        assert scr.status_text().text == "RUNNING, NEAR OOM: GPU 1: 2 allocator retries"
        mfu = [f"{100 * c.mfu:.0f}%" for c in snap.cards]
        assert all(c.mfu is not None and 0.05 < c.mfu < 1 for c in snap.cards)
        card0, card1 = _region(app, scr.query_one("#gpu-0")), _region(app, scr.query_one("#gpu-1"))
        assert f"MFU {mfu[0]}  free " in card0 and "retries 0" in card0
        assert f"MFU {mfu[1]}  free " in card1 and "retries 2" in card1
        assert scr.query_one("#gpu-1").has_class("-near-oom") and not scr.query_one("#gpu-0").has_class("-near-oom")
        assert "RUNNING, NEAR OOM: GPU 1: 2 allocator retries" in screen_text(app)
        # too small for cards: the one-line table says it in its subtitle
        await pilot.resize_terminal(60, 24)
        table = scr.query_one("#gpu-table")
        await until(pilot, lambda: table.display, what="GPU table")
        assert str(table.border_subtitle) == f"MFU {mfu[0]} {mfu[1]}  NEAR OOM GPU 1: 2 allocator retries"
        await pilot.press("q")
        await pilot.press("d")
        await pilot.pause()


async def test_no_warning_while_the_allocator_never_retried(fttui_home):
    app = FttuiApp(attach=str(_live_run(retry_from=None)))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        scr = app.screen
        await until(pilot, lambda: scr.snap is not None and scr.snap.step == 12, what="all steps folded")
        await until(pilot, lambda: "MFU " in _region(app, scr.query_one("#gpu-1")), what="MFU line")
        assert scr.status_text().text == "RUNNING"
        assert scr.snap.near_oom is False
        assert all("NEAR OOM" not in str(scr.query_one(f"#gpu-{i}").border_title) for i in (0, 1))
        await pilot.press("q")
        await pilot.press("d")
        await pilot.pause()
