"""The app finishes runs whose supervisor died, after its first frame (never before it)."""

from __future__ import annotations

import pytest

from fttui.core.results.store import Store
from fttui.tui.app import FttuiApp
from fttui.tui.picker import PickerScreen
from tests.tui.conftest import until
from tests.unit.test_recover import _run_dir

pytestmark = pytest.mark.anyio


async def test_orphaned_run_gets_its_row_after_the_first_frame(fttui_home, fake_gpu_sampler):
    rd = _run_dir(fttui_home, end=True, exit_rc=0)
    app = FttuiApp(gpu_sampler=fake_gpu_sampler)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="the picker")
        await until(pilot, lambda: rd.status_path.exists(), what="the orphan's status.json")
        await until(pilot, lambda: any("finished 1 run" in str(n.message) for n in app._notifications),
                    what="the notification")
    with Store() as s:
        row = s.get(rd.run_id)
    assert row["status"] == "completed" and row["steps"] == 3
