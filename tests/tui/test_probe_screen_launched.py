"""The probe screen with a profile of two CPU ranks: every trial a fresh launch of both ranks
(fttui.core.experiments.launched), shown like any probe's trials; leaving the screen mid-trial
leaves no rank behind."""

from __future__ import annotations

import time

import pytest

from fttui.core.base import paths
from fttui.tui.app import FttuiApp
from fttui.tui.picker import PickerScreen
from tests.helpers import processes_mentioning, wait_for
from tests.tui.conftest import until
from tests.tui.test_probe_screen import _fill, _open_probe, _text

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


@pytest.mark.slow
async def test_two_rank_probe_on_the_screen(fttui_home, tmp_path, monkeypatch):
    _profiles(tmp_path, monkeypatch)
    app = FttuiApp()
    async with app.run_test(size=(100, 32)) as pilot:
        scr = await _open_probe(pilot, app, "probe-ddp")
        await _fill(pilot, scr, lo="1", hi="2", steps="1", host="")
        await pilot.press("s")
        await until(pilot, lambda: scr.state == "running", what="probe running")
        assert scr.prober.launched
        await until(pilot, lambda: scr.state != "running", timeout=300, what="probe end", step=0.25)
        assert scr.state == "done", scr.status_text()
        res = scr.result
        assert (res.largest_fit, res.smallest_oom, res.exact) == (2, None, True)
        assert [(t.value, t.status, t.load, t.fresh) for t in res.trials] == [(1, "fit", 1, True), (2, "fit", 2, True)]
        boundary = _text(app, "#probe-boundary")
        assert "largest batch_size that fits:  2" in boundary and "2 model loads, 2 trials" in boundary
        assert not processes_mentioning(res.probe_id)


async def test_escape_during_launched_trial_leaves_no_rank(fttui_home, tmp_path, monkeypatch):
    _profiles(tmp_path, monkeypatch)
    app = FttuiApp()
    async with app.run_test(size=(80, 24)) as pilot:
        scr = await _open_probe(pilot, app, "probe-ddp")
        await _fill(pilot, scr, lo="1", hi="1024", steps="2", host="")
        await pilot.press("s")
        await until(pilot, lambda: scr.state == "running", what="probe running")
        probe_id = scr.prober.probe_id
        load1 = str(paths.runs_dir() / f"{probe_id}-load1")
        # the guard, the log writer, torchrun and the two ranks
        await until(pilot, lambda: len(processes_mentioning(load1)) >= 5, timeout=60, what="both ranks", step=0.25)
        t0 = time.monotonic()
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="back on the picker")
        assert time.monotonic() - t0 < 3  # the app does not wait for the ranks to stop
        assert scr.state == "stopped"
    wait_for(lambda: not processes_mentioning(probe_id), timeout=30, what="probe processes gone")
    time.sleep(1.0)  # and no further launch starts
    assert not processes_mentioning(probe_id)
    assert sorted(p.name for p in paths.runs_dir().iterdir()) == [f"{probe_id}-load1"]
