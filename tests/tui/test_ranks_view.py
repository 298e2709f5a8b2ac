"""The ranks view (issue 39): `k` on a live run's screen shows each rank's node, compute and wait,
and the straggler the others wait for; `w` asks every rank where it is (here no rank answers:
the recorded run's pids are not ranks); escape goes back."""

from __future__ import annotations

import json

import pytest

from fttui.tui.app import FttuiApp
from fttui.tui.ranks_view import COLUMNS, RanksScreen
from fttui.tui.run_screen import RunScreen
from tests.tui.conftest import until
from tests.tui.fixtures import live_pid, write_run
from tests.tui.textdump import screen_text

pytestmark = pytest.mark.anyio


def _run_with_a_straggler():
    """Two recorded ranks on n1 and n2; rank 1 is late by 0.8 s in every other step."""
    pid = live_pid()
    rd = write_run("20231114-221320-demo-ranks-0001", status=None, gpus=2, steps=12, live_pid=pid)
    events = []
    for line in (rd / "events.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev["event"] == "start":
            ev.update(node=f"n{ev['rank'] + 1}", pid=pid)  # a live process that is no rank: it never answers
        if ev["event"] == "step":
            late = ev["step"] % 2 == 0
            ev["step_time"] = 1.3 if late else 0.5
            ev["comm_wait_s"] = (0.85 if late else 0.05) if ev["rank"] == 0 else 0.05
        events.append(ev)
    (rd / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return rd


async def test_the_ranks_view_names_the_straggler_and_goes_back(fttui_home):
    app = FttuiApp(attach=str(_run_with_a_straggler()))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        run = app.screen
        await until(pilot, lambda: run.snap is not None and run.snap.step == 12, what="all steps folded")
        assert run.snap.straggler and run.snap.straggler.startswith("rank 1 on n2 computes ")
        await pilot.press("k")
        await until(pilot, lambda: isinstance(app.screen, RanksScreen), what="ranks view")
        view = app.screen
        table = view.query_one("#ranks-table")
        await until(pilot, lambda: table.row_count == 2, what="two ranks")
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(2)]
        assert [r[:2] for r in rows] == [["0", "n1"], ["1 *", "n2"]]
        assert float(rows[1][3]) > float(rows[0][3])  # the straggler computes longer
        text = screen_text(app)
        assert "SLOW RANK: rank 1 on n2 computes " in text and all(c in text for c in COLUMNS)
        assert "w: ask every rank where it is" in text
        await pilot.press("w")
        await until(pilot, lambda: view.where is not None, what="the ranks asked", timeout=30)
        assert view.where.startswith("no rank waits in a collective: rank 0: did not answer"), view.where
        assert "rank 1: did not answer" in view.where
        await until(pilot, lambda: f"where: {view.where[:40]}" in screen_text(app), what="the answer shown")
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="back on the run")
