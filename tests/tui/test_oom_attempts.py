"""The run screen of a run that ran out of memory and was continued by another attempt
(``train.on_oom = "shrink"``): it gives way to the next attempt's, whose status line says what it
recovered from."""

from __future__ import annotations

import json

import pytest

from fttui.tui.app import FttuiApp
from fttui.tui.run_screen import RunScreen
from tests.tui.conftest import until
from tests.tui.fixtures import T0, write_run

pytestmark = pytest.mark.anyio

MSG = "recovered from OOM at step 7: batch 4 -> 2, accumulation 2 -> 4, from the checkpoint of step 5"


def _append(path, obj) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")


async def test_the_run_screen_follows_the_next_attempt():
    first = write_run("20231114-221320-demo-lora-0001", status="oom", oom=True, steps=6, gpus=0)
    second = write_run("20231114-221330-demo-lora-0002", status="completed", steps=20, total_steps=20, gpus=0)
    _append(first / "events.jsonl", {"event": "retry", "t": T0 + 20, "rank": -1, "source": "supervisor",
                                     "next_run": second.name, "attempt": 2, "message": "retried as ..."})
    lines = (second / "events.jsonl").read_text()
    (second / "events.jsonl").write_text(json.dumps(
        {"event": "attempt", "t": T0, "rank": -1, "source": "supervisor", "attempt": 2, "first": first.name,
         "previous": first.name, "oom_step": 7, "oom_kind": "cpu", "from_step": 5, "batch": [4, 2],
         "accum": [2, 4], "message": MSG}) + "\n" + lines)
    app = FttuiApp(attach=str(first))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.rd.path == second,
                    what="the second attempt's run screen")
        await until(pilot, lambda: app.screen.final is not None, what="its final status")
        assert app.screen.status_text().text == f"COMPLETED (attempt 2: {MSG})"
