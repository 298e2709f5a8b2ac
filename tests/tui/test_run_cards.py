"""The run screen on a shared machine: CUDA_VISIBLE_DEVICES=2,3 on four fake cards, another user's
process on cards 2 and 3. The run's cards come first, marked, with run / device / total memory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fttui.monitor import FakeGpuSampler
from fttui.tui.app import FttuiApp
from fttui.tui.run_screen import RunScreen
from tests.tui.conftest import until
from tests.tui.fixtures import T0, write_run
from tests.tui.textdump import screen_text

pytestmark = pytest.mark.anyio

SHARED = Path(__file__).resolve().parents[1] / "data" / "fake_gpus_shared.json"


def _shared_run(monkeypatch) -> Path:
    """A recorded run whose samples are what the supervisor's sampler gives with
    CUDA_VISIBLE_DEVICES=2,3 (set while sampling only: the app reads the samples)."""
    rd = write_run("20231114-221320-demo-lora-0003", status="completed", gpus=2)
    sampler = FakeGpuSampler(str(SHARED))
    with monkeypatch.context() as m:
        m.setenv("CUDA_VISIBLE_DEVICES", "2,3")
        lines = [{"t": T0 + 0.5 * i, "gpu": sampler.sample([os.getpid()]).to_dict(),
                  "host": {"ram_used_mb": 9000.0, "ram_total_mb": 64216.0, "tree_rss_mb": 3000.0,
                           "tree_nprocs": 3}} for i in range(3)]
    (rd / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return rd


def _region(app, widget) -> list[str]:
    r = widget.region
    return [line[r.x:r.right] for line in screen_text(app).splitlines()[r.y:r.bottom]]


async def test_run_cards_first_and_marked_in_cards(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # the app's own environment plays no part
    rd = _shared_run(monkeypatch)
    app = FttuiApp(attach=str(rd))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        scr = app.screen
        await until(pilot, lambda: len(scr.query(".gpu-card")) == 4, what="four GPU cards")
        await until(pilot, lambda: "*run" in str(scr.query_one("#gpu-0").border_title), what="marked cards")
        titles = [str(scr.query_one(f"#gpu-{i}").border_title) for i in range(4)]
        assert titles == ["GPU 2 *run", "GPU 3 *run", "GPU 0", "GPU 1"]
        assert [scr.query_one(f"#gpu-{i}").has_class("-run") for i in range(4)] == [True, True, False, False]
        # the last frame replayed: the run's 9,800 MB of card 2's 21,802 MB used (alice holds 12,000)
        card2 = "\n".join(_region(app, scr.query_one("#gpu-0")))
        assert "run 9.6 dev 21.3/40.0 GB" in card2
        assert "peak 9.6/21.3 GB  rsv 10.0 GB" in card2  # peaks run/device; rank 0 on card 2
        card0 = "\n".join(_region(app, scr.query_one("#gpu-2")))
        assert "GPU 0" in card0 and "0.0/40.0 GB" in card0 and "run " not in card0
        # at 80x24 the four cards do not fit: one line each, in the same order, the run's marked
        await pilot.resize_terminal(80, 24)
        table = scr.query_one("#gpu-table")

        def rows() -> list[str]:
            return [line.strip("│ ") for line in _region(app, table) if line.startswith("│ GPU")]

        await until(pilot, lambda: table.display and len(rows()) == 4, what="GPU table")
        got = rows()
        assert [r.split()[0] for r in got] == ["GPU2*", "GPU3*", "GPU0", "GPU1"], got
        assert "run 9.6 dev 21.3/40.0 GB" in got[0] and "run 9.5 dev 16.4/40.0 GB" in got[1]
        assert "pk 9.6/21.3 GB" in got[0]
        assert "run" not in got[2] and "0.0/40.0 GB" in got[2]
        # torch's reserved memory is rank 0's on card 2 (cuda:0 there), rank 1's on card 3
        assert "rsv 10.0 GB" in got[0] and "rsv 10.1 GB" in got[1] and "rsv" not in got[2]
        await pilot.press("q")
        await pilot.pause()
