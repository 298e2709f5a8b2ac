"""Snapshot tests (pytest-textual-snapshot) of the three screens at 80x24 and 120x40.

Everything shown is fixed: fixture profiles, recorded run directories with fixed ids and event
times, fixture result rows, recorded GPU figures. Regenerate with ``--snapshot-update``.
"""

from __future__ import annotations

import pytest

from fttui.monitor import FakeGpuSampler
from fttui.tui.app import FttuiApp
from tests.tui.fixtures import FAKE_GPUS, fill_store, fixture_profiles, write_run

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]


@pytest.mark.parametrize("size", SIZES)
def test_picker_snapshot(snap_compare, size, tmp_path, monkeypatch):
    fixture_profiles(tmp_path, monkeypatch)
    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(FAKE_GPUS)))
    assert snap_compare(app, terminal_size=size)


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
    assert snap_compare(app, terminal_size=size, press=["r"])
