"""The probe screen: `p` on a profile, trials live, the boundary highlighted and checked against
fresh processes, a full run at the found value one key away; leaving a running probe leaves no
process."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections import Counter
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, OptionList

from fttui.core.base import paths
from fttui.core.experiments.probe import MAX_LOADS
from fttui.monitor import FakeGpuSampler
from fttui.tui.app import FttuiApp
from fttui.tui.picker import PickerScreen
from fttui.tui.probe_screen import ProbeScreen
from fttui.tui.run_screen import RunScreen
from tests.e2e.test_oom_probe import _results, agrees, probe_and_scan, scan
from tests.helpers import processes_mentioning, wait_for
from tests.tui.conftest import until
from tests.tui.fixtures import FAKE_GPUS, fixture_profiles, probe_result
from tests.tui.textdump import screen_text

pytestmark = pytest.mark.anyio

# A probe that closes quickly on two CPU cores: long samples (512 tokens) under a small
# host-memory budget put the boundary at a batch of a few samples (seen: 5 fits, 6 fails, 4 model
# loads, ~7.6 MiB of headroom per sample: one value beyond each end is far from the jitter).
PROBE_PROFILE = """# fttui run --profile probe-lora
description = "tiny-lora with long samples and two steps (probe screen tests)"
extends = "tiny-lora"

[data]
max_seq_len = 512
num_samples = 16

[train]
max_steps = 2
"""
HOST_LIMIT = "60MiB"


def _text(app, selector: str) -> str:
    w = app.screen.query_one(selector)
    r = w.region
    lines = screen_text(app).splitlines()
    return "\n".join(line[r.x:r.right] for line in lines[r.y:r.bottom])


def _probe_profiles(tmp_path, monkeypatch):
    work = tmp_path / "cwd"
    (work / "profiles").mkdir(parents=True)
    (work / "profiles" / "probe-lora.toml").write_text(PROBE_PROFILE)
    monkeypatch.chdir(work)


async def _open_probe(pilot, app, name: str) -> ProbeScreen:
    await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker")
    picker = app.screen
    names = [r.name for r in picker.refs]
    await pilot.press("home", *["down"] * names.index(name))
    await until(pilot, lambda: picker.base and picker.base["name"] == name, what=f"{name} selected")
    assert isinstance(app.focused, OptionList)
    await pilot.press("p")
    await until(pilot, lambda: isinstance(app.screen, ProbeScreen), what="probe screen")
    return app.screen


async def _fill(pilot, scr: ProbeScreen, **fields: str) -> None:
    for fid, value in fields.items():
        w = scr.query_one(f"#pr-{fid}", Input)
        w.value = value
    await pilot.pause()


@pytest.mark.e2e
async def test_probe_live_boundary_then_run_at_found_value(fttui_home, tmp_path, monkeypatch):
    _probe_profiles(tmp_path, monkeypatch)
    app = FttuiApp()
    async with app.run_test(size=(100, 32)) as pilot:
        scr = await _open_probe(pilot, app, "probe-lora")
        assert scr.resolved["data"]["max_seq_len"] == 512
        assert scr.state == "idle" and "PROBE probe-lora" in _text(app, "#probe-status")
        await _fill(pilot, scr, lo="1", hi="64", steps="1", host=HOST_LIMIT)
        t0 = time.monotonic()
        await pilot.press("s")  # focus is on the start button: s starts
        await until(pilot, lambda: scr.state == "running", what="probe running")
        assert "RUNNING" in _text(app, "#probe-status")
        # trials show up while the probe runs, one row each
        await until(pilot, lambda: scr.trials, timeout=120, what="first trial", step=0.25)
        table = scr.query_one("#trials", DataTable)
        if scr.state == "running":
            assert table.row_count >= 1
            assert "fit" in _text(app, "#trials") or "OOM" in _text(app, "#trials")
        await until(pilot, lambda: scr.state != "running", timeout=240, what="probe end", step=0.25)
        elapsed = time.monotonic() - t0
        assert scr.state == "done", scr.status_text()
        res = scr.result
        assert res.exact and res.largest_fit is not None and res.smallest_oom == res.largest_fit + 1, res
        assert table.row_count == len(res.trials)
        # the boundary is highlighted: its own panel, and a marker on the two clean rows
        boundary = await until(pilot, lambda: "largest" in _text(app, "#probe-boundary")
                               and _text(app, "#probe-boundary"), what="boundary shown")
        assert f"largest batch_size that fits:  {res.largest_fit}" in boundary
        assert f"smallest that fails: {res.smallest_oom}" in boundary
        assert f"enter: full run at batch_size={res.largest_fit}" in boundary
        assert f"host {HOST_LIMIT}" in boundary  # the run keeps the probe's budget, and says so
        assert scr.query_one("#probe-boundary").has_class("-exact")
        marked = [str(table.get_row_at(i)[1]) for i in range(table.row_count) if str(table.get_row_at(i)[0])]
        assert sorted(marked) == [str(res.largest_fit), str(res.smallest_oom)]
        assert "DONE" in _text(app, "#probe-status")
        # no process left, the trials are stored: one row of kind probe each
        assert not processes_mentioning(res.probe_id)
        rows = [r for r in _results("--kind", "probe") if r["group_id"] == res.probe_id]
        assert Counter((r["batch_size"], r["status"]) for r in rows) == Counter((t.value, t.status) for t in res.trials)
        assert res.model_loads <= MAX_LOADS
        for t in res.trials:
            assert t.peak_gpu_mem_mb == [] and t.peak_host_rss_mb and t.peak_host_rss_mb > 0  # no GPU here
            if t.status == "oom":
                assert t.oom_kind == "cpu"
        # the probe's boundary is the one fresh processes see, one trial each, one value beyond each
        # end (tests/e2e/test_oom_probe.py: scan). On a loaded machine a single process now and then
        # lands a few MB off its usual footprint (seen in CI: a probe saw batch 4 fail once where
        # fresh processes fit up to 6): on disagreement the same probe runs once more, from the
        # CLI, with its scan, and one agreement of a probe and its scan is required.
        seen = await asyncio.to_thread(scan, scr.probe_resolved, res.largest_fit, res.smallest_oom)
        attempts = [(res.largest_fit, res.smallest_oom, seen)]
        if not agrees(*attempts[0]):
            attempts.append(await asyncio.to_thread(probe_and_scan, fttui_home, "probe-lora", HOST_LIMIT, "1..64",
                                                    cwd=Path.cwd()))
            assert agrees(*attempts[1]), f"probe and fresh scan disagree twice: {attempts}"
        # one key: a full run of the profile at the value found
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        run = app.screen
        prof = json.loads((run.rd.path / "profile.json").read_text())
        assert prof["name"] == "probe-lora"
        assert prof["train"]["batch_size"] == res.largest_fit
        assert prof["limits"]["host_memory"] == HOST_LIMIT  # same budget: the answer holds for the run
        await until(pilot, lambda: run.final is not None, timeout=180, what="run end", step=0.25)
        assert run.final["status"] == "completed", run.final
        await pilot.press("escape")  # back on the probe screen, the result still there
        await until(pilot, lambda: app.screen is scr, what="probe screen again")
    print(f"probe took {elapsed:.1f}s: {len(res.trials)} trials, {res.model_loads} loads")


@pytest.mark.e2e
async def test_escape_during_probe_leaves_no_process(fttui_home, tmp_path, monkeypatch):
    _probe_profiles(tmp_path, monkeypatch)
    app = FttuiApp()
    async with app.run_test(size=(80, 24)) as pilot:
        scr = await _open_probe(pilot, app, "probe-lora")
        # a long probe: no limit, every value up to 1024
        await _fill(pilot, scr, lo="1", hi="1024", steps="2", host="")
        await pilot.press("s")
        await until(pilot, lambda: scr.state == "running", what="probe running")
        probe_id = scr.prober.probe_id
        load1 = str(paths.runs_dir() / f"{probe_id}-load1")
        await until(pilot, lambda: processes_mentioning(load1), timeout=30, what="probe process")
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="back on the picker")
        assert scr.state == "stopped"
    wait_for(lambda: not processes_mentioning(probe_id), timeout=20, what="probe processes gone")
    time.sleep(1.0)  # and no further model load starts
    assert not processes_mentioning(probe_id)
    assert sorted(p.name for p in paths.runs_dir().iterdir()) == [f"{probe_id}-load1"]


@pytest.mark.e2e
async def test_quit_during_probe_leaves_no_process(fttui_home, tmp_path, monkeypatch):
    _probe_profiles(tmp_path, monkeypatch)
    app = FttuiApp()
    async with app.run_test(size=(80, 24)) as pilot:
        scr = await _open_probe(pilot, app, "probe-lora")
        await _fill(pilot, scr, lo="1", hi="1024", host="")
        scr.query_one("#pr-hi", Input).focus()
        await pilot.press("enter")  # enter in a field starts too
        await until(pilot, lambda: scr.state == "running", what="probe running")
        probe_id = scr.prober.probe_id
        await until(pilot, lambda: processes_mentioning(probe_id), timeout=30, what="probe process")
        await pilot.press("q")  # focus is on the trials table: q quits, no dialog (no live run)
        await pilot.pause()
    wait_for(lambda: not processes_mentioning(probe_id), timeout=20, what="probe processes gone")
    assert app.return_code == 0


async def test_probe_form_errors_and_overrides(fttui_home, tmp_path, monkeypatch):
    fixture_profiles(tmp_path, monkeypatch)
    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(FAKE_GPUS)))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker")
        picker = app.screen
        # the picker's overrides go along
        picker.query_one("#ov-max_seq_len", Input).value = "96"
        await until(pilot, lambda: picker.resolved and picker.resolved["data"]["max_seq_len"] == 96,
                    what="override")
        picker.query_one("#profiles", OptionList).focus()
        await pilot.press("p")
        await until(pilot, lambda: isinstance(app.screen, ProbeScreen), what="probe screen")
        scr = app.screen
        assert scr.resolved["data"]["max_seq_len"] == 96
        # bad range, bad size: one-line errors, nothing started
        await _fill(pilot, scr, lo="8", hi="4")
        await pilot.press("s")
        assert scr.state == "error" and "need 1 <= from <= to" in _text(app, "#probe-status")
        await _fill(pilot, scr, lo="1", hi="4", host="12 apples")
        await pilot.press("s")
        assert scr.state == "error" and "limits.host_memory: invalid size" in scr.error
        # the qlora profile on 2 GPUs is probed by launches of both ranks: here the launch checks
        # (fttui run's) refuse it in one line before anything starts
        await pilot.press("l")  # no result: nothing to launch
        await pilot.pause()
        assert isinstance(app.screen, ProbeScreen)
        assert any("no value found yet" in n.message for n in app._notifications)
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker again")
        await pilot.press("down", "p")
        await until(pilot, lambda: isinstance(app.screen, ProbeScreen), what="probe screen (qlora)")
        scr = app.screen
        await pilot.press("s")
        await until(pilot, lambda: scr.state == "error", timeout=30, what="the launch checks' error")
        assert scr.prober.launched and scr.error and "\n" not in scr.error
        assert "demo-qlora" in scr.error and "Traceback" not in scr.error
    assert not (fttui_home / "runs").exists()


async def _push_probe(pilot, app, resolved: dict) -> ProbeScreen:
    """A probe screen of ``resolved`` on top of the picker, mounted."""
    await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker")
    scr = ProbeScreen(resolved)
    app.push_screen(scr)
    await until(pilot, lambda: app.screen is scr and scr.is_mounted, what="probe screen")
    return scr


async def test_probe_form_repeats_and_data(fttui_home, tmp_path, monkeypatch):
    """The form's repeats and data fields reach the probe (no probe process here: the thread
    worker is replaced by one that ends at once)."""
    from textual.widgets import Checkbox

    from fttui.core.profiles import load_profile

    tiny_full = load_profile("tiny-full", {"limits.host_memory": "48MiB"})  # trains on a shipped file
    tiny_lora = load_profile("tiny-lora")  # synthetic samples
    fixture_profiles(tmp_path, monkeypatch)
    started = []

    def no_run(self, prober, token, done):
        started.append(prober)
        done.set()
        self.post_message(self.Finished(token, stopped=True))

    monkeypatch.setattr(ProbeScreen, "_run_probe", no_run)
    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(FAKE_GPUS)))
    async with app.run_test(size=(80, 24)) as pilot:
        scr = await _push_probe(pilot, app, tiny_full)
        assert scr.query_one("#pr-repeats", Input).value == "0"
        assert scr.query_one("#pr-data", Checkbox).value is False
        await _fill(pilot, scr, lo="1", hi="64", repeats="2")
        await pilot.press("s")
        await until(pilot, lambda: started and scr.state == "stopped", what="the probe started")
        prober = started[-1]
        assert (prober.repeats, prober.data, prober.max_loads) == (2, False, 4 + 2 * 2)
        assert "2 repeats next to the boundary; at most 8 model loads" in scr.log_line
        # the data toggle: the data set's longest samples
        scr.query_one("#pr-data", Checkbox).value = True
        await _fill(pilot, scr, repeats="0")
        await pilot.press("s")
        await until(pilot, lambda: len(started) == 2 and scr.state == "stopped", what="the data probe started")
        assert (started[-1].repeats, started[-1].data) == (0, True) and "the data's longest samples" in scr.log_line
        # bad input: one line, nothing started
        await _fill(pilot, scr, repeats="-1")
        await pilot.press("s")
        assert scr.state == "error" and "repeats: must be >= 0" in scr.error and len(started) == 2
        # a recorded probe with the data: the panel says which samples, the run puts them first
        note = "samples: the longest of 64 in tail (longest 233 tokens at max_seq_len 512; median 57)"
        done = ProbeScreen(tiny_full, result=dataclasses.replace(probe_result(), samples="data", samples_note=note))
        app.push_screen(done)
        await until(pilot, lambda: app.screen is done and done.is_mounted, what="the recorded probe")
        await until(pilot, lambda: "longest 233" in _text(app, "#probe-boundary"),
                    what="the samples in the boundary panel")
        assert done.query_one("#pr-data", Checkbox).value is True
        assert done.launch_profile()["train"]["longest_first"] is True
        assert scr.launch_profile() is None  # (no result on the first screen)
    # a profile with synthetic data has no data to probe with: one line, nothing started
    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(FAKE_GPUS)))
    async with app.run_test(size=(80, 24)) as pilot:
        scr = await _push_probe(pilot, app, tiny_lora)
        scr.query_one("#pr-data", Checkbox).value = True
        await pilot.pause()
        await pilot.press("s")
        assert scr.state == "error" and "data.source is synthetic" in scr.error and len(started) == 2


async def test_recorded_result_and_launch_profile(fttui_home, tmp_path, monkeypatch):
    from fttui.core.profiles import load_profile

    fixture_profiles(tmp_path, monkeypatch)
    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(FAKE_GPUS)))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker")
        resolved = load_profile("demo-lora", {"limits.host_memory": "150MiB"})
        scr = ProbeScreen(resolved, result=probe_result())
        app.push_screen(scr)
        await until(pilot, lambda: app.screen is scr and scr.is_mounted, what="probe screen")
        await until(pilot, lambda: "largest" in _text(app, "#probe-boundary"), what="boundary shown")
        assert "largest batch_size that fits:  61" in _text(app, "#probe-boundary")
        prof = scr.launch_profile()  # the profile's own limit (here from the picker) stays
        assert prof["train"]["batch_size"] == 61 and prof["limits"]["host_memory"] == "150MiB"
        assert prof["data"]["max_seq_len"] == resolved["data"]["max_seq_len"]
        # the cursor sits on the largest clean fit
        table = scr.query_one("#trials", DataTable)
        row = table.get_row_at(table.cursor_row)
        assert str(row[0]) == "▶" and str(row[1]) == "61" and str(row[3]) == "fresh"
        # a max_seq_len probe launches at that length
        scr2 = ProbeScreen(resolved, result=probe_result("max_seq_len"))
        app.push_screen(scr2)
        await pilot.pause()
        assert scr2.launch_profile()["data"]["max_seq_len"] == 61


SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]


@pytest.mark.parametrize("size", SIZES)
def test_probe_screen_snapshot(snap_compare, size, tmp_path, monkeypatch):
    from fttui.core.profiles import load_profile

    fixture_profiles(tmp_path, monkeypatch)
    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(FAKE_GPUS)))

    async def show(pilot):
        resolved = load_profile("demo-lora", {"limits.host_memory": "150MiB"})
        await app.push_screen(ProbeScreen(resolved, result=probe_result()))
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=show)
