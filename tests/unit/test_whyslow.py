"""Why a run is slow (issue 25 part 3): the NVML speed figures (a pynvml stand-in), the recorded
fake GPUs with clocks, power cap and throttle reasons, and the leading cause named from synthetic
step events and samples."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

from fttui.core.run.files.events import StepEvent
from fttui.core.run.files.sample_records import Sample
from fttui.core.run.fold.state import RunState
from fttui.core.run.fold.whyslow import SpeedFold, causes, why_slow
from fttui.monitor import FakeGpuSampler, GpuInfo, GpuSampler, GpuSnapshot
from fttui.monitor.snapshots import throttle_names

DATA = Path(__file__).resolve().parents[1] / "data"


def _nvml(monkeypatch, reasons_call: str):
    import pynvml

    class Field:
        def __init__(self, v):
            self.nvmlReturn, self.value = 0, types.SimpleNamespace(ullVal=v)

    counter = {"kib": 0}

    def fields(h, ids):
        counter["kib"] += 512 * 1024  # 512 MiB more each call
        return [Field(counter["kib"]), Field(2 * counter["kib"])]

    fake = types.SimpleNamespace(
        NVMLError=pynvml.NVMLError, NVMLError_LibraryNotFound=pynvml.NVMLError_LibraryNotFound,
        NVML_CLOCK_SM=1, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX=138, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX=139,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "550.54.15", nvmlSystemGetCudaDriverVersion=lambda: 12040,
        nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: "Fake GPU", nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=2**30, total=2**34),
        nvmlDeviceGetClockInfo=lambda h, c: 1095 if c == 1 else 0,
        nvmlDeviceGetMaxClockInfo=lambda h, c: 1410 if c == 1 else 0,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 250000,
        nvmlDeviceGetPcieThroughput=lambda h, c: [2048, 4096][c],
        nvmlDeviceGetFieldValues=fields,
    )
    setattr(fake, reasons_call, lambda h: 0x4 | 0x20)
    monkeypatch.setitem(sys.modules, "pynvml", fake)


def test_nvml_speed_figures(monkeypatch):
    for call in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        _nvml(monkeypatch, call)
        s = GpuSampler()
        g = s.sample().gpus[0]
        assert (g.sm_clock_mhz, g.sm_clock_max_mhz, g.power_cap_w) == (1095.0, 1410.0, 250.0)
        assert g.throttle == ("power cap", "thermal (software)")
        assert (g.pcie_tx_mbs, g.pcie_rx_mbs) == (2.0, 4.0)  # NVML's KB/s in MB/s
        assert g.nvlink_tx_mbs is None  # a counter: a rate needs two samples
        g2 = s.sample().gpus[0]
        assert g2.nvlink_tx_mbs > 0 and abs(g2.nvlink_rx_mbs / g2.nvlink_tx_mbs - 2.0) < 1e-6
        s.close()


def test_throttle_names():
    assert throttle_names(0) == () and throttle_names(None) == ()
    assert throttle_names(0x4 | 0x10 | 0x10000) == ("power cap", "sync boost", "0x10000")


def test_fake_gpus_carry_the_speed_figures():
    raw = json.loads((DATA / "fake_gpus_throttled.json").read_text())
    s = FakeGpuSampler(DATA / "fake_gpus_throttled.json")
    snap = s.sample(pids=[123])
    g0, g1 = snap.gpus
    assert g1.throttle == ("power cap",) and g1.power_cap_w == 250.0 and g1.sm_clock_mhz < g1.sm_clock_max_mhz
    assert g0.throttle == () and g0.sm_clock_mhz == g0.sm_clock_max_mhz
    assert g1.proc_mem_mb == raw["frames"][0][1]["processes"][0]["used_mb"]
    assert GpuSnapshot.from_dict(json.loads(json.dumps(snap.to_dict()))) == snap


def _run(steps, *, wait=0.0, step_time=0.5, slow_every=0, gpus_file=None, gpus=2, ranks=1):
    st = RunState()
    st.apply({"event": "start", "t": 0.0, "rank": 0, "total_steps": steps, "world_size": 1,
              "config": {"method": "lora", "devices": {"gpus": gpus}, "train": {"precision": "bf16"}}})
    sampler = FakeGpuSampler(gpus_file) if gpus_file else None
    for s in range(1, steps + 1):
        t = step_time * (4 if slow_every and s % slow_every == 0 else 1)
        for rank in range(ranks):
            st.apply({"event": "step", "t": float(s), "rank": rank, "step": s, "total_steps": steps,
                      "samples": 4 * s, "train_time": s * step_time, "step_time": t, "data_wait_s": wait})
        if sampler is not None:
            st.apply_sample(Sample(t=float(s), gpu=sampler.sample(pids=[1])))
    return st.snapshot()


def test_input_pipeline_named_with_its_share():
    snap = _run(30, wait=0.19, step_time=0.5)
    assert snap.why_slow == "input pipeline: 38% of step time waiting for data"
    assert abs(snap.speed.data_wait_share - 0.19 / 0.5) < 1e-9


def test_power_capped_card_named():
    snap = _run(12, gpus_file=DATA / "fake_gpus_throttled.json", ranks=2)
    assert snap.why_slow.startswith("GPU 1 power-capped at 250 W (SM ")
    ratio = next(c for c in snap.speed.cards if c.index == 1).clock_ratio
    assert abs(ratio - (1095 + 1110 + 1080 + 1095) / 4 / 1410) < 0.02  # the frames' clocks, by hand (cycled)


def test_outliers_and_a_quick_run_say_nothing_wrong():
    assert _run(40).why_slow is None  # steady, no wait, no card: nothing to name
    snap = _run(40, slow_every=5)
    assert snap.speed.outliers == 8 and snap.why_slow.startswith("step-time outliers: 8 of 39 steps")  # warm-up left out
    assert _run(3, wait=0.4).why_slow is None  # too few steps to say


def test_idle_card_is_weaker_than_the_data_wait():
    fold = SpeedFold()
    fold.on_step(StepEvent(step_time=1.0, data_wait_s=0.3), 2)
    fold.training = True
    fold.on_sample(Sample(t=0.0, gpu=GpuSnapshot(available=True, gpus=(GpuInfo(index=0, util_pct=40.0),))))
    for s in range(3, 10):
        fold.on_step(StepEvent(step_time=1.0, data_wait_s=0.3), s)
    found = causes(fold.fields())
    assert found[0].text.startswith("input pipeline: 30%") and len(found) == 1  # the idle card is the data's
    assert why_slow(fold.fields(), run_cards=()) == found[0].text
