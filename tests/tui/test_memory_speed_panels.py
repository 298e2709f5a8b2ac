"""The run screen's issue-25 figures (Pilot): per card the rank's memory picture (torch allocated,
reserved, the rest of the run's NVML memory), the estimate and which figure it predicts, SM clock
against its maximum with the throttle reason in words, power against its cap; the why-slow line;
the memory creep warning in the status line of a live run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fttui.core.profiles.resolve import load_profile
from fttui.monitor import FakeGpuSampler
from fttui.tui.app import FttuiApp
from fttui.tui.run_screen import RunScreen
from tests.tui.conftest import until
from tests.tui.fixtures import T0, write_run
from tests.tui.test_perf_panels import _region as _text  # a widget's lines on the screen

pytestmark = pytest.mark.anyio

THROTTLED = Path(__file__).resolve().parents[1] / "data" / "fake_gpus_throttled.json"
ALLOC, RESERVED = (14336.0, 14848.0), (15360.0, 15872.0)  # MB, ranks 0 and 1


def _run(status: str | None, creep: bool = False) -> Path:
    rd = write_run("20231114-221320-demo-lora-0007", status=status, gpus=2, live_pid=os.getpid())
    config = load_profile("tiny-lora", overrides=["devices.gpus=2"]).to_dict()  # the start event's config
    lines = [json.loads(x) for x in (rd / "events.jsonl").read_text().splitlines()]
    for ev in lines:
        if ev["event"] == "start":
            ev["config"] = config
        if ev["event"] == "step":
            r, s = ev["rank"], ev["step"]
            ev.update(torch_alloc_mb=ALLOC[r], torch_reserved_mb=RESERVED[r] + (40.0 * s if creep else 0.0),
                      cuda_free_mb=20000.0, data_wait_s=0.01)
    if creep:
        lines.append({"event": "memory_warning", "t": T0 + 12, "rank": -1, "source": "supervisor",
                      "where": "card", "figure": "reserved", "of_rank": 0, "step": 12, "slope_mb": 40.0,
                      "steps_left": 120, "headroom_mb": 4800.0,
                      "message": "rank 0 reserved +40 MiB/step: out of memory in ~120 steps (4.7 GiB left on its card)"})
    (rd / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    sampler = FakeGpuSampler(str(THROTTLED))
    samples = [{"t": T0 + 6 + 0.5 * i, "gpu": sampler.sample([os.getpid()]).to_dict(),
                "host": {"ram_used_mb": 9000.0, "ram_total_mb": 64216.0, "tree_rss_mb": 3000.0, "tree_nprocs": 3}}
               for i in range(3)]
    (rd / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in samples))
    return rd


async def test_cards_show_the_memory_picture_speed_and_why_slow(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    rd = _run("completed")
    app = FttuiApp(attach=str(rd))
    async with app.run_test(size=(130, 44)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        scr = app.screen
        await until(pilot, lambda: len(scr.query(".gpu-card")) == 2 and "SM" in _text(app, scr.query_one("#gpu-1")),
                    what="two full GPU cards")
        card0, card1 = _text(app, scr.query_one("#gpu-0")), _text(app, scr.query_one("#gpu-1"))
        # the last frame replayed (cycled: frame 2): the run's NVML memory 17,450 MB on card 0
        run0 = json.loads(THROTTLED.read_text())["frames"][2][0]["processes"][0]["used_mb"]
        assert f"alloc {ALLOC[0] / 1024:.1f} rsv {RESERVED[0] / 1024:.1f} rest {(run0 - RESERVED[0]) / 1024:.1f} GB" in card0
        assert "alloc 14.5 rsv 15.5 rest" in card1  # rank 1 on card 1
        assert "estimate 2.8 GB: predicts run (NVML)" in card0  # tiny-lora on 2 GPUs, the formula
        assert "SM 1410/1410 MHz" in card0 and "power cap" not in card0
        assert "SM 1080/1410 MHz  power cap" in card1 and "248/250 W" in card1
        throughput = _text(app, scr.query_one("#throughput"))
        assert "slow: GPU 1 power-capped at 250 W" in throughput
        await pilot.press("q")
        await pilot.pause()


async def test_a_creeping_live_run_says_so_in_its_status(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    rd = _run(None, creep=True)
    app = FttuiApp(attach=str(rd))
    async with app.run_test(size=(130, 44)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        scr = app.screen
        await until(pilot, lambda: "MEMORY CREEP" in _text(app, scr.query_one("#run-status")), what="creep status")
        assert "rank 0 reserved +40 MiB/step: out of memory in ~120 steps" in _text(app, scr.query_one("#run-status"))
        await pilot.press("q")
        await pilot.pause()
