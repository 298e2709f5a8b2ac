"""The plan screen's measured column (issue 43 item 1, the app): `m` measures the setups that
fit and fills the column live, a trial's cell `running...` while it runs, then its measured step
with the forecast's error, or its verdict; `escape` stops the measuring. The trials are faked
here (their launching is the CLI's, tests/e2e/test_plan_measure.py): each ends when the test
says, so the column is read between two trials."""

from __future__ import annotations

import threading

import pytest
from textual.widgets import DataTable

from fttui.core.experiments import measured
from fttui.core.experiments.measured import Trial
from fttui.monitor import FakeGpuSampler
from fttui.tui.app import FttuiApp
from fttui.tui.plan_screen import MEASURE_STEPS, MEASURED, PlanScreen
from tests.tui.conftest import until
from tests.tui.fixtures import FAKE_GPUS
from tests.tui.test_picker_estimate import _select

pytestmark = pytest.mark.anyio


class _FakeMeasure:
    """measure() whose trials end one by one as :meth:`release` allows; records its arguments."""

    def __init__(self, verdicts: list[str]):
        self.verdicts, self.go, self.calls, self.stopped = verdicts, threading.Semaphore(0), [], False

    def release(self) -> None:
        self.go.release()

    def __call__(self, profile, options, budget, steps, *, stop, on_start, on_result, **_kw):
        self.calls.append((profile, steps))
        fitting = [(i, o) for i, o in enumerate(options) if o.fits]
        trials = []
        for (i, o), verdict in zip(fitting, self.verdicts):
            on_start(i)
            while not self.go.acquire(timeout=0.05):
                if stop():
                    self.stopped = True
                    return trials, "interrupted"
            step = o.step_seconds * 1.25 if verdict == "completed" else None  # a forecast 20% too fast
            t = Trial(index=i, setup=o.label(), forecast_s=o.step_seconds, step_s=step, status=verdict,
                      run_id=f"run-{i}")
            trials.append(t)
            on_result(t)
        return trials, "every setup that fits was measured"


def _column(screen) -> list[str]:
    table = screen.query_one("#plan-table", DataTable)
    return [str(table.get_cell(key, MEASURED)) for key in screen.row_keys]


async def test_m_fills_the_measured_column_live(fttui_home, monkeypatch):
    fake = _FakeMeasure(["completed", "oom", "completed"])
    monkeypatch.setattr(measured, "measure", fake)
    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(FAKE_GPUS)))
    async with app.run_test(size=(180, 40)) as pilot:
        picker = await _select(pilot, app, "llama2-7b-lora")
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, PlanScreen) and app.screen.options is not None,
                    timeout=60, what="the plan")
        screen = app.screen
        fits = [i for i, o in enumerate(screen.options) if o.fits]
        assert len(fits) >= 3
        await pilot.press("m")
        await until(pilot, lambda: _column(screen)[fits[0]] == "running...", what="the first trial running")
        assert fake.calls == [(picker.resolved, MEASURE_STEPS)]
        assert all(c == "-" for i, c in enumerate(_column(screen)) if i != fits[0])  # nothing else yet
        fake.release()
        first = screen.options[fits[0]]
        want = f"{first.step_seconds * 1.25:.3g} s/step (-20% off)"
        await until(pilot, lambda: _column(screen)[fits[0]] == want and _column(screen)[fits[1]] == "running...",
                    what="the first measured, the second running")
        fake.release()
        await until(pilot, lambda: _column(screen)[fits[1]] == "oom", what="the second's verdict")
        fake.release()
        await until(pilot, lambda: not screen.measuring, what="the measuring to end")
        assert _column(screen)[fits[2]].endswith("s/step (-20% off)")
        foot = str(screen.query_one("#plan-foot").render())
        assert "stopped: every setup that fits was measured" in foot and f"fastest measured: #{fits[0] + 1}" in foot
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is picker, what="back on the picker")


async def test_escape_stops_the_measuring(fttui_home, monkeypatch):
    fake = _FakeMeasure(["completed", "completed"])
    monkeypatch.setattr(measured, "measure", fake)
    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(FAKE_GPUS)))
    async with app.run_test(size=(180, 40)) as pilot:
        picker = await _select(pilot, app, "llama2-7b-lora")
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, PlanScreen) and app.screen.options is not None,
                    timeout=60, what="the plan")
        screen = app.screen
        await pilot.press("m")
        await until(pilot, lambda: "running..." in _column(screen), what="a trial running")
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is picker and fake.stopped, what="the measuring stopped")


@pytest.mark.e2e
async def test_m_measures_for_real_and_escape_ends_the_running_trial(fttui_home, monkeypatch):
    """tiny-lora on one CPU rank, no fake: `m` launches the trials (recorded runs, kind sweep), the
    first setup's cell gets its measured step once its run completes; `escape` during the next
    trial ends it (cancelled, its run over). Each batch waits 1 s in the data loader (the worker's
    test hook), so the next trial is still running when the test presses escape."""
    from fttui.core.results.store import Store
    from fttui.core.run.files import rundir
    from fttui.core.run.processes import liveness
    from fttui.worker.testhooks import SLOW_DATA_ENV
    from tests.helpers import wait_for

    monkeypatch.setenv(SLOW_DATA_ENV, "1")

    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(FAKE_GPUS)))
    async with app.run_test(size=(180, 40)) as pilot:
        picker = await _select(pilot, app, "tiny-lora")
        assert not picker.resolved.devices.gpus  # planned on CPU ranks
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, PlanScreen) and app.screen.options is not None,
                    timeout=60, what="the plan")
        screen = app.screen
        fits = [i for i, o in enumerate(screen.options) if o.fits]
        assert len(fits) >= 2
        await pilot.press("m")
        await until(pilot, lambda: _column(screen)[fits[0]].endswith("off)") or screen.trials,
                    timeout=240, what="the first trial's measurement")
        first = screen.trials[0]
        assert first.status == "completed" and _column(screen)[fits[0]].startswith(f"{first.step_s:.3g} s/step")
        await until(pilot, lambda: len(rundir.list_runs()) >= 2, timeout=60, what="the next trial's run")
        second = max(rundir.list_runs(), key=lambda rd: rd.run_id)
        assert second.run_id != first.run_id and not second.has_status()
        assert "running..." in _column(screen)
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is picker, what="back on the picker")
    wait_for(lambda: not liveness.is_live(second), timeout=30, what="the next trial's run to end")
    final = second.final_status()
    assert final is not None and final.status == "cancelled", final
    with Store() as store:
        kinds = {r["run_id"]: r["kind"] for r in store.rows()}
    assert kinds.get(first.run_id) == "sweep"
