"""The run screen of a command that told fttui its progress by itself (issue 42): the step events
read from a real TensorBoard event file (torch's `SummaryWriter`, followed by fttui's follower)
and the total from Lightning's "stopped" line, as the log writer merges them, show as a profile
run's: the progress bar's step and total and the loss panel's loss, with no special case."""

from __future__ import annotations

import json
import time

import pytest

from fttui.core.base.event_records import LaunchEvent
from fttui.core.run.files.events import write_event
from fttui.core.run.supervising.cmdsources import CommandSources
from fttui.core.run.supervising.tbfollow import TbFollower
from fttui.tui.app import FttuiApp
from fttui.tui.run_screen import RunScreen
from tests.tui.conftest import until
from tests.tui.fixtures import write_run
from tests.tui.test_perf_panels import _region

pytestmark = pytest.mark.anyio


async def test_a_command_read_from_its_event_file_shows_steps_total_and_loss(fttui_home, tmp_path):
    SummaryWriter = pytest.importorskip(
        "torch.utils.tensorboard", reason="SKIPPED LOUDLY: torch's SummaryWriter is not installed").SummaryWriter
    n = 9
    losses = [3.0 / i for i in range(1, n + 1)]
    start = time.time()
    work = tmp_path / "work"
    writer = SummaryWriter(str(work / "runs" / "a"))
    for i, loss in enumerate(losses, start=1):
        writer.add_scalar("train_loss", loss, i)
    writer.close()
    src = CommandSources(TbFollower(work, since=start - 5))
    events = src.poll(start + 1) + src.feed(f"`Trainer.fit` stopped: `max_steps={n}` reached.\n", start + 2)
    events += src.finish(start + 3)
    rd = write_run("20231114-221320-fit-0001", status="completed", gpus=0)
    (rd / "profile.json").write_text(json.dumps({"name": "fit", "origin": "command",
                                                 "command": {"argv": ["python", "fit.py"], "cwd": str(work)},
                                                 "limits": {}, "monitor": {}}))
    (rd / "events.jsonl").write_text("")
    write_event(rd / "events.jsonl", LaunchEvent(t=start - 1, rank=-1, source="supervisor"))
    for ev in events:
        write_event(rd / "events.jsonl", ev, sparse=True)
    app = FttuiApp(attach=str(rd))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        scr = app.screen
        await until(pilot, lambda: scr.snap is not None and scr.snap.step == n, what="the steps folded")
        await pilot.pause()
        assert f"step {n}/{n}" in _region(app, scr.query_one("#run-progress"))
        assert f"loss {losses[-1]:.4f}" in _region(app, scr.query_one("#loss"))
