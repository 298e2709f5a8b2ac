"""The probe screen with a profile of two CPU ranks: every trial a fresh launch of both ranks
(fttui.core.experiments.launched), shown like any probe's trials; leaving the screen mid-trial
leaves no rank behind (one probe shows both)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual.widgets import DataTable

from fttui.core.base import paths
from fttui.core.run.files.events import read_jsonl
from fttui.tui.app import FttuiApp
from fttui.tui.picker import PickerScreen
from tests.helpers import processes_mentioning, wait_for
from tests.tui.conftest import until
from tests.tui.test_probe_screen import _fill, _open_probe

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

PROFILE = """# fttui run --profile probe-ddp
description = "tiny-lora on two CPU ranks (probe screen tests)"
extends = "tiny-lora"

[devices]
gpus = 0
cpu_processes = 2
"""


def _profiles(tmp_path, monkeypatch):
    work = tmp_path / "cwd"
    (work / "profiles").mkdir(parents=True)
    (work / "profiles" / "probe-ddp.toml").write_text(PROFILE)
    monkeypatch.chdir(work)


def _load_dirs(probe_id: str) -> list[Path]:
    return sorted(paths.runs_dir().glob(f"{probe_id}-load*"), key=lambda d: int(d.name.rsplit("load", 1)[1]))


def _launch_running(probe_id: str, after: int) -> Path | None:
    """A trial launch of the probe after its load ``after`` once both ranks run: its guard, log
    writer, torchrun and the two ranks name its run directory."""
    dirs = _load_dirs(probe_id)[after:]
    return dirs[-1] if dirs and len(processes_mentioning(str(dirs[-1]))) >= 5 else None


@pytest.mark.slow
async def test_two_rank_probe_on_the_screen(fttui_home, tmp_path, monkeypatch):
    """A probe of two CPU ranks on the screen: each trial a fresh launch of both ranks, shown like
    any probe's trials (a row each, while the probe runs); leaving the screen mid-trial leaves no
    rank behind and starts no further launch. One probe for both: escape stops its second
    launch, after the first has shown (a finished probe's boundary panel is the same for every
    probe: tests/tui/test_probe_screen.py)."""
    _profiles(tmp_path, monkeypatch)
    app = FttuiApp()
    async with app.run_test(size=(100, 32)) as pilot:
        scr = await _open_probe(pilot, app, "probe-ddp")
        await _fill(pilot, scr, lo="1", hi="1024", steps="1", host="")
        await pilot.press("s")
        await until(pilot, lambda: scr.state == "running", what="probe running")
        assert scr.prober.launched
        probe_id = scr.prober.probe_id
        # the first trial: a launch of both ranks, its row shown while the probe goes on
        await until(pilot, lambda: scr.trials, timeout=300, what="the first trial", step=0.25)
        assert [(t.value, t.status, t.load, t.fresh, t.clean) for t in scr.trials[:1]] == [(1, "fit", 1, True, True)]
        load1 = paths.runs_dir() / f"{probe_id}-load1"
        assert {0, 1} <= {e.get("rank") for e in read_jsonl(load1 / "events.jsonl") if e.get("event") == "phase"}
        table = scr.query_one("#trials", DataTable)
        row = [str(c) for c in table.get_row_at(0)]
        assert row[1:5] == ["1", "fit", "fresh", "1"], row
        # the next trial is a fresh launch of both ranks again: leave the screen while it runs
        running = await until(pilot, lambda: _launch_running(probe_id, after=1), timeout=120,
                              what="both ranks of the next launch", step=0.25)
        # (the ranks are stopped by the prober and a reaper thread, not by the screen: no wall-clock
        # bound here, a loaded machine once took 4.1 s to show the picker)
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="back on the picker")
        assert scr.state == "stopped"
    wait_for(lambda: not processes_mentioning(probe_id), timeout=30, what="probe processes gone")
    time.sleep(1.0)  # and no further launch starts
    assert not processes_mentioning(probe_id)
    loads = [d.name for d in _load_dirs(probe_id)]
    assert sorted(loads) == sorted(p.name for p in paths.runs_dir().iterdir())  # nothing else started
    assert loads == [f"{probe_id}-load{k}" for k in range(1, len(loads) + 1)] and loads[-1] == running.name
