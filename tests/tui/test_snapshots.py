"""Snapshot tests (pytest-textual-snapshot) of the three screens at 80x24 and 120x40.

Everything shown is fixed: fixture profiles, recorded run directories with fixed ids and event
times, fixture result rows, recorded GPU figures. Regenerate with ``--snapshot-update``.
"""

from __future__ import annotations

import pytest

from fttui.monitor import FakeGpuSampler
from fttui.tui.app import FttuiApp
from fttui.tui.picker import PickerScreen
from tests.tui.conftest import until
from tests.tui.fixtures import FAKE_GPUS, fill_store, fixture_profiles, write_run

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]


async def picker_settled(pilot) -> None:
    """The picker reads the GPUs, the store and the live runs in thread workers after its first
    frame: wait for them, so the snapshot never catches it half-way."""
    app = pilot.app
    await until(pilot, lambda: isinstance(app.screen, PickerScreen) and app.screen.gpu_snap is not None
                and app.screen.store_rows is not None, what="the picker's GPUs and store")
    await app.workers.wait_for_complete()
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES)
def test_picker_snapshot(snap_compare, size, tmp_path, monkeypatch):
    fixture_profiles(tmp_path, monkeypatch)
    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(FAKE_GPUS)))
    assert snap_compare(app, terminal_size=size, run_before=picker_settled)


@pytest.mark.parametrize("size", SIZES)
def test_run_screen_snapshot(snap_compare, size):
    rd = write_run("20231114-221320-demo-lora-0001", status="completed", gpus=2)
    app = FttuiApp(attach=str(rd))
    assert snap_compare(app, terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_run_screen_oom_snapshot(snap_compare, size):
    rd = write_run("20231114-221320-demo-qlora-0002", status="oom", oom=True, gpus=1)
    app = FttuiApp(attach=str(rd))
    assert snap_compare(app, terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_results_snapshot(snap_compare, size, tmp_path, monkeypatch):
    fixture_profiles(tmp_path, monkeypatch)
    fill_store()
    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(FAKE_GPUS)))
    assert snap_compare(app, terminal_size=size, press=["r"], run_before=picker_settled)


async def plan_shown(pilot) -> None:
    """The picker settled, then the plan screen (`s`) once its thread worker made the plan."""
    from fttui.tui.plan_screen import PlanScreen

    await picker_settled(pilot)
    await pilot.press("s")
    app = pilot.app
    await until(pilot, lambda: isinstance(app.screen, PlanScreen) and app.screen.described is not None,
                timeout=60, what="the plan, its first setup described")
    await app.workers.wait_for_complete()
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES)
def test_plan_screen_snapshot(snap_compare, size, tmp_path, monkeypatch):
    from fttui.core.base.units import GIB
    from fttui.core.experiments import planning

    fixture_profiles(tmp_path, monkeypatch)
    monkeypatch.setattr(planning, "_host_total", lambda: 64 * GIB)  # this machine's RAM would show
    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(FAKE_GPUS)))
    assert snap_compare(app, terminal_size=size, run_before=plan_shown)
