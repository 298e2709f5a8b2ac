"""The probe screen: `p` on a profile, trials live, the boundary highlighted and checked against
fresh processes, a full run at the found value one key away (with the data toggle: the probe of
issue 24's data set with a long tail); leaving a running probe leaves no process."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from textual.widgets import Button, Checkbox, DataTable, Input, OptionList

from fttui.core.base import paths
from fttui.core.base.constants import LONGEST_FIRST_STEPS
from fttui.core.experiments.probe import MAX_LOADS
from fttui.core.profiles import load_profile
from fttui.monitor import FakeGpuSampler
from fttui.tui.app import FttuiApp
from fttui.tui.picker import PickerScreen
from fttui.tui.probe_screen import ProbeScreen
from fttui.tui.run_screen import RunScreen
from tests.e2e.test_oom_probe import PROBE_LIMIT, _results, fresh_trial
from tests.e2e.test_probe_data import _run, _tail_profile
from tests.helpers import processes_mentioning, wait_for
from tests.tui.conftest import until
from tests.tui.fixtures import FAKE_GPUS, fixture_profiles, probe_result
from tests.tui.textdump import screen_text

pytestmark = pytest.mark.anyio

# Long samples (512 tokens) for the probes the tests below stop before they end.
PROBE_PROFILE = """# fttui run --profile probe-lora
description = "tiny-lora with long samples and two steps (probe screen tests)"
extends = "tiny-lora"

[data]
max_seq_len = 512
num_samples = 16

[train]
max_steps = 2
"""

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
    await until(pilot, lambda: picker.base and picker.base.name == name, what=f"{name} selected")
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
@pytest.mark.slow
@pytest.mark.timeout(1200)
async def test_probe_live_boundary_then_run_at_found_value(fttui_home, tmp_path, monkeypatch):
    """`p` on a profile, the probe with the form's data toggle: trials live, the boundary
    highlighted and checked against fresh processes, a full run at the found value one key away.

    One probe for two claims: the screen's, and issue 24's "your data, worst batch first" on a
    data set with a long tail (tests/e2e/test_probe_data.py makes it; its CLI test checks `fttui
    probe --data`'s output): the data's largest fit is larger than the synthetic probe's (a fresh
    synthetic trial there runs out of memory), the run at it with the longest samples first (the
    one key: enter) completes, and a run one above runs out of memory in its first step. Those
    two runs are the fresh processes at both ends of the boundary (before: a synthetic probe here,
    then a fresh process one value beyond each end and a run, beside the CLI's data probe)."""
    work = _tail_profile(tmp_path, monkeypatch)
    app = FttuiApp()
    async with app.run_test(size=(120, 40)) as pilot:
        scr = await _open_probe(pilot, app, "tail-lora")
        assert scr.resolved.data.max_seq_len == 512
        assert scr.state == "idle" and "PROBE tail-lora" in _text(app, "#probe-status")
        scr.query_one("#pr-data", Checkbox).value = True
        await _fill(pilot, scr, lo="1", hi="64", steps="1", host=PROBE_LIMIT)
        scr.query_one("#pr-start", Button).focus()
        t0 = time.monotonic()
        await pilot.press("s")  # focus is on the start button: s starts
        await until(pilot, lambda: scr.state == "running", what="probe running")
        assert "RUNNING" in _text(app, "#probe-status")
        assert scr.prober.data and not scr.prober.launched
        # trials show up while the probe runs, one row each
        await until(pilot, lambda: scr.trials, timeout=300, what="first trial", step=0.25)
        table = scr.query_one("#trials", DataTable)
        if scr.state == "running":
            assert table.row_count >= 1
            assert "fit" in _text(app, "#trials") or "OOM" in _text(app, "#trials")
        await until(pilot, lambda: scr.state != "running", timeout=900, what="probe end", step=0.25)
        elapsed = time.monotonic() - t0
        assert scr.state == "done", scr.status_text()
        res = scr.result
        assert res.exact and res.largest_fit is not None and res.smallest_oom == res.largest_fit + 1, res
        lf = res.largest_fit
        assert table.row_count == len(res.trials)
        # the boundary is highlighted: its own panel, and a marker on the two clean rows
        boundary = await until(pilot, lambda: "largest" in _text(app, "#probe-boundary")
                               and _text(app, "#probe-boundary"), what="boundary shown")
        assert f"largest batch_size that fits:  {lf}" in boundary
        assert f"smallest that fails: {res.smallest_oom}" in boundary
        assert f"enter: full run at batch_size={lf}, longest samples first" in boundary
        assert f"host {PROBE_LIMIT}" in boundary  # the run keeps the probe's budget, and says so
        assert "longest 233 tokens" in boundary  # which samples it used
        assert scr.query_one("#probe-boundary").has_class("-exact")
        marked = [str(table.get_row_at(i)[1]) for i in range(table.row_count) if str(table.get_row_at(i)[0])]
        assert sorted(marked, key=int) == [str(lf), str(res.smallest_oom)]  # 9 before 10
        assert "DONE" in _text(app, "#probe-status")
        # every trial fed the data's longest sample (233 tokens, not max_seq_len's 512)
        assert res.samples == "data" and "longest 233 tokens" in res.samples_note, res.samples_note
        assert {t.longest_seq for t in res.trials} == {233}
        # no process left, the trials are stored: one row of kind probe each, saying the samples
        assert not processes_mentioning(res.probe_id)
        rows = [r for r in _results("--kind", "probe") if r["group_id"] == res.probe_id]
        assert Counter((r["batch_size"], r["status"]) for r in rows) == Counter((t.value, t.status) for t in res.trials)
        assert {r["longest_seq"] for r in rows} == {233} and all(r["dataset"].endswith("(longest samples)") for r in rows)
        assert res.model_loads <= MAX_LOADS
        for t in res.trials:
            assert t.peak_gpu_mem_mb == [] and t.peak_host_rss_mb and t.peak_host_rss_mb > 0  # no GPU here
            if t.status == "oom":
                assert t.oom_kind == "cpu"
        # fresh processes beside the run below, two at a time: the synthetic trial at lf (every
        # sample 512 tokens: the synthetic probe's answer is smaller), a run at lf + 1 (it runs out
        # of memory in its first step: the longest samples come first)
        synthetic = load_profile("tail-lora", [f"limits.host_memory={json.dumps(PROBE_LIMIT)}"])
        ex = ThreadPoolExecutor(max_workers=2)
        synth, above = ex.submit(fresh_trial, synthetic, lf), ex.submit(_run, work, lf + 1)
        # one key: a full run of the profile at the value found, the longest samples first
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen), what="run screen")
        run = app.screen
        prof = json.loads((run.rd.path / "profile.json").read_text())
        assert prof["name"] == "tail-lora"
        assert prof["train"]["batch_size"] == lf and prof["train"]["longest_first"] is True
        assert prof["limits"]["host_memory"] == PROBE_LIMIT  # same budget: the answer holds for the run
        await until(pilot, lambda: run.final is not None, timeout=600, what="run end", step=0.25)
        assert run.final.status == "completed", run.final
        await pilot.press("escape")  # back on the probe screen, the result still there
        await until(pilot, lambda: app.screen is scr, what="probe screen again")
        synth, above = await asyncio.to_thread(synth.result), await asyncio.to_thread(above.result)
        ex.shutdown()
    assert synth == "oom", "the synthetic probe's largest fit should be below the data's"
    assert above.returncode == 3, above.stdout + above.stderr
    runs = {r["batch_size"]: r for r in _results("--kind", "run")}
    assert runs[lf]["status"] == "completed" and runs[lf]["longest_seq"] == 233 and runs[lf]["steps"] == 2
    assert runs[lf + 1]["status"] == "oom" and runs[lf + 1]["oom_kind"] == "cpu"
    # in the steps that carry the longest samples (the second is the first with the optimizer's states)
    assert runs[lf + 1]["error_step"] < LONGEST_FIRST_STEPS, runs[lf + 1]
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
        await until(pilot, lambda: picker.resolved and picker.resolved.data.max_seq_len == 96,
                    what="override")
        picker.query_one("#profiles", OptionList).focus()
        await pilot.press("p")
        await until(pilot, lambda: isinstance(app.screen, ProbeScreen), what="probe screen")
        scr = app.screen
        assert scr.resolved.data.max_seq_len == 96
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


async def _push_probe(pilot, app, resolved) -> ProbeScreen:
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
        assert done.launch_profile().train.longest_first is True
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
        assert prof.train.batch_size == 61 and prof.limits.host_memory == "150MiB"
        assert prof.data.max_seq_len == resolved.data.max_seq_len
        # the cursor sits on the largest clean fit
        table = scr.query_one("#trials", DataTable)
        row = table.get_row_at(table.cursor_row)
        assert str(row[0]) == "▶" and str(row[1]) == "61" and str(row[3]) == "fresh"
        # a max_seq_len probe launches at that length
        scr2 = ProbeScreen(resolved, result=probe_result("max_seq_len"))
        app.push_screen(scr2)
        await pilot.pause()
        assert scr2.launch_profile().data.max_seq_len == 61


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
