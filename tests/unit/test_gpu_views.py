"""The run's cards, first and marked, where fttui shows or uses GPUs outside the run screen: the
CLI's progress line, the picker's GPU list and estimate, the probe's starting point."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fttui.cli.live import gpu_part, progress_line
from fttui.core.run.fold.snapshot import RunSnapshot
from fttui.monitor import FAKE_GPUS_ENV, FakeGpuSampler, GpuInfo, GpuSnapshot

DATA = Path(__file__).resolve().parent.parent / "data"
SHARED = DATA / "fake_gpus_shared.json"


def _shared(monkeypatch, visible: str | None = "2,3") -> GpuSnapshot:
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    return FakeGpuSampler(str(SHARED)).sample([os.getpid()])


def test_progress_line_run_cards_first(monkeypatch):
    gpu = _shared(monkeypatch)
    line = progress_line(RunSnapshot(step=3, total_steps=10, gpu=gpu))
    assert line.endswith("gpu run/dev/total MB *2 6100/18102/40960 *3 6050/13052/40960 0 0/4/40960 1 0/4/40960")
    # without CUDA_VISIBLE_DEVICES: every card, NVML order, none marked; unknown run figure is "-"
    gpu = _shared(monkeypatch, None)
    assert gpu_part(gpu) == ("gpu run/dev/total MB 0 0/4/40960 1 0/4/40960 2 6100/18102/40960 "
                             "3 6050/13052/40960")
    bare = GpuSnapshot(True, gpus=(GpuInfo(0, mem_used_mb=100.0, mem_total_mb=200.0),))
    assert gpu_part(bare) == "gpu run/dev/total MB 0 -/100/200"
    assert "gpu" not in progress_line(RunSnapshot(step=1, gpu=GpuSnapshot(False, reason="no driver")))


def test_rich_view_marks_the_run_cards(monkeypatch, tmp_path):
    import io

    from rich.console import Console

    from fttui.cli.live import _render

    class F:
        class rd:
            run_id = "x"

    gpu = _shared(monkeypatch)
    out = io.StringIO()
    Console(file=out, width=140).print(_render(RunSnapshot(step=1, gpu=gpu), F()))
    text = out.getvalue()
    lines = [ln for ln in text.splitlines() if "GPU " in ln]
    assert ["*run" in ln for ln in lines] == [True, True, False, False]
    assert "GPU 2 *run" in lines[0] and "run 6100 MB  device 17.7 GB / 40.0 GB" in lines[0]


def test_picker_gpu_list_marks_visible(monkeypatch):
    from fttui.tui.widgets import gpu_list_text

    text = gpu_list_text(_shared(monkeypatch)).plain
    assert text.splitlines()[0].startswith("GPUs: 2 of 4 visible (CUDA_VISIBLE_DEVICES)")
    assert [ln.split()[0] for ln in text.splitlines()[1:]] == ["*2", "*3", "0", "1"]
    text = gpu_list_text(_shared(monkeypatch, None)).plain
    assert text.splitlines()[0].startswith("GPUs: 4 visible") and "*" not in text


def test_estimate_budget_is_the_first_visible_card(monkeypatch):
    from fttui.core.profiles import load_profile
    from fttui.tui.picker import memory_verdict

    small = GpuInfo(0, "small", mem_total_mb=8192.0)
    big = GpuInfo(1, "big", mem_total_mb=81920.0)
    r = load_profile("llama2-7b-lora", [])
    v = memory_verdict(r, GpuSnapshot(True, gpus=(small, big), visible=(1,)), [])
    assert v.fits is True and "GPU 1" in v.text.plain
    v = memory_verdict(r, GpuSnapshot(True, gpus=(small, big)), [])  # every card: card 0 first
    assert v.fits is False and "GPU 0" in v.text.plain
    v = memory_verdict(r, GpuSnapshot(True, gpus=(small, big), visible=()), [])  # CUDA_VISIBLE_DEVICES=""
    assert v.fits is None and "no GPU visible" in v.text.plain


def test_probe_start_uses_the_first_visible_card(monkeypatch, tmp_path):
    import json

    from fttui.core.experiments.probe import predicted_start
    from fttui.core.profiles import load_profile

    frames = [[{"index": 0, "mem_total_mb": 8192.0, "uuid": "GPU-aa"},
               {"index": 1, "mem_total_mb": 81920.0, "uuid": "GPU-bb"}]]
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"frames": frames}))
    monkeypatch.setenv(FAKE_GPUS_ENV, str(path))
    r = load_profile("llama2-7b-lora", [])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bb")
    start_big, why = predicted_start(r, "batch_size", 1, 4096)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    start_small, _ = predicted_start(r, "batch_size", 1, 4096)
    assert start_big is not None and "predicted" in why
    assert start_small is None or start_small < start_big
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert predicted_start(r, "batch_size", 1, 4096) == (None, "no GPU visible: starting at the low end of the range")


def test_headless_says_the_last_step_when_it_came_within_a_second_of_the_one_said(tmp_path, monkeypatch, capsys):
    """A command whose event file flushed 10 steps, then its last 5 as it closed (torch's
    SummaryWriter: every 10 events): the view said step 10, and the end came before a second had
    passed; it says step 15 before the verdict (a CI run's headless output lacked it)."""
    from fttui.cli import live
    from fttui.core.run.files.rundir import RunDir

    monkeypatch.setattr(live.time, "sleep", lambda s: None)
    snaps = iter([RunSnapshot(step=10, status="running"), RunSnapshot(step=15, status="completed")])

    class Follower:
        rd = RunDir(tmp_path)
        done = False

        def poll(self):
            snap = next(snaps)
            self.done = snap.status == "completed"
            return snap

        def lost(self):
            return False

    live._follow_plain(Follower())
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in out if line.startswith("step ")] == ["10/?", "15/?"], out
