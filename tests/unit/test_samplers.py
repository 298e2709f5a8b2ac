"""fttui.monitor: NVML without a driver, recorded fake GPUs, host process tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fttui.monitor import (
    FAKE_GPUS_ENV,
    FakeGpuSampler,
    GpuInfo,
    GpuSampler,
    GpuSnapshot,
    HostSampler,
    HostSnapshot,
    make_gpu_sampler,
    visible_indices,
)

DATA = Path(__file__).resolve().parent.parent / "data"
ROOT = Path(__file__).resolve().parents[2]


def _nvml_present() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return False
    try:
        pynvml.nvmlShutdown()
    except Exception:
        pass
    return True


HAS_NVML = _nvml_present()


@pytest.mark.skipif(HAS_NVML, reason="this machine has an NVIDIA driver")
def test_gpu_sampler_without_driver_never_raises():
    s = GpuSampler()
    for pids in ((), (os.getpid(),), [1, 2, 3]):
        snap = s.sample(pids)
        assert isinstance(snap, GpuSnapshot)
        assert snap.available is False
        assert "NVML" in snap.reason
        assert snap.gpus == ()
    s.close()
    s.close()  # idempotent
    assert s.sample().available is False
    d = s.sample().to_dict()
    assert d["available"] is False and d["gpus"] == []
    json.dumps(d)


@pytest.mark.skipif(not HAS_NVML, reason="needs an NVIDIA driver")
def test_gpu_sampler_with_driver():
    with GpuSampler() as s:
        snap = s.sample([os.getpid()])
        assert snap.available is True and snap.reason is None
        assert snap.gpus and snap.gpus[0].mem_total_mb > 0
        assert [g.index for g in snap.gpus] == list(range(len(snap.gpus)))


def test_gpu_sampler_init_failure_reason(monkeypatch):
    import pynvml

    def boom():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", boom)
    snap = GpuSampler().sample()
    assert snap.available is False and snap.reason.startswith("NVML") and snap.gpus == ()


def test_gpu_sampler_field_failures_become_none(monkeypatch):
    """A fake pynvml where some calls fail: those fields are None, the rest are filled."""
    import types

    import pynvml

    class Mem:
        used = 3 * 2**30
        total = 24 * 2**30

    class Util:
        gpu = 77

    class P:
        def __init__(self, pid, used):
            self.pid, self.usedGpuMemory = pid, used

    def fail(*a):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    fake = types.SimpleNamespace(
        NVMLError=pynvml.NVMLError,
        NVMLError_LibraryNotFound=pynvml.NVMLError_LibraryNotFound,
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "550.54.15",
        nvmlSystemGetCudaDriverVersion=lambda: 12040,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"Fake GPU",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetMemoryInfo=lambda h: Mem(),
        nvmlDeviceGetUtilizationRates=lambda h: Util() if h == 0 else fail(),
        nvmlDeviceGetPowerUsage=lambda h: 250500,
        nvmlDeviceGetTemperature=fail,
        nvmlDeviceGetComputeRunningProcesses=lambda h: [P(10, 2**30), P(11, 2**29), P(99, 2**31)] if h == 0 else fail(),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    s = GpuSampler()
    snap = s.sample([10, 11])
    assert snap.available and snap.driver == "550.54.15" and snap.cuda == "12.4"
    g0, g1 = snap.gpus
    assert g0 == GpuInfo(0, "Fake GPU", "GPU-0", 3072.0, 24576.0, 77.0, 250.5, None, 1536.0)
    assert g1.util_pct is None and g1.proc_mem_mb is None and g1.mem_used_mb == 3072.0
    assert s.sample().gpus[0].proc_mem_mb is None  # no pids asked
    s.close()


def test_fake_gpu_sampler_cycles_frames():
    frames = [[{"index": 0, "mem_used_mb": float(i)}, {"index": 1, "mem_used_mb": 10.0 + i}] for i in range(3)]
    s = FakeGpuSampler(frames)
    got = [s.sample((1, 2)) for _ in range(7)]
    assert all(g.available and g.reason is None for g in got)
    assert [g.gpus[0].mem_used_mb for g in got] == [0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 0.0]
    assert [g.gpus[1].index for g in got] == [1] * 7
    assert got[0].gpus[0].name is None


@pytest.mark.parametrize("name,count", [("fake_gpus.json", 2), ("fake_gpus8.json", 8)])
def test_recorded_files(name, count):
    path = DATA / name
    raw = json.loads(path.read_text())
    s = FakeGpuSampler(path)
    assert len(raw["frames"]) >= 3
    for _ in range(len(raw["frames"]) + 1):
        snap = s.sample()
        assert snap.available and snap.driver == raw["driver"] and snap.cuda == raw["cuda"]
        assert [g.index for g in snap.gpus] == list(range(count))
        for g in snap.gpus:
            assert g.name and g.uuid and 0 < g.mem_used_mb <= g.mem_total_mb
            assert g.proc_mem_mb <= g.mem_used_mb
            assert g.util_pct is not None and g.power_w is not None and g.temp_c is not None
    # round trip through the sample-line dict
    assert GpuSnapshot.from_dict(json.loads(json.dumps(snap.to_dict()))) == snap


def test_fake_gpu_sampler_bad_file_does_not_raise(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    for p in (bad, tmp_path / "missing.json"):
        snap = FakeGpuSampler(p).sample()
        assert snap.available is False and snap.reason


def test_make_gpu_sampler_honours_env(monkeypatch):
    monkeypatch.setenv(FAKE_GPUS_ENV, str(DATA / "fake_gpus8.json"))
    s = make_gpu_sampler()
    assert isinstance(s, FakeGpuSampler)
    assert len(s.sample().gpus) == 8
    monkeypatch.delenv(FAKE_GPUS_ENV)
    s = make_gpu_sampler()
    assert isinstance(s, GpuSampler)
    s.close()


def test_visible_indices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_indices() is None
    assert visible_indices("0,2, 3") == [0, 2, 3]
    assert visible_indices("") == []
    assert visible_indices("-1") == []
    assert visible_indices("1,x,2") == [1]
    assert visible_indices("1,1,0") == [1, 0]
    assert visible_indices("GPU-1234-abcd") is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert visible_indices() == [3, 1]
    assert GpuSampler.visible_indices() == [3, 1]


def test_snapshot_dict_roundtrip():
    h = HostSnapshot(1.0, 2.0, 0.0, 0.0, 3.5, 4, 12.5)
    assert HostSnapshot.from_dict(json.loads(json.dumps(h.to_dict()))) == h
    assert HostSnapshot.from_dict({}) == HostSnapshot()
    g = GpuInfo(1, "n", "u", 1.0, 2.0, 3.0, 4.0, 5.0, None)
    assert GpuInfo.from_dict(g.to_dict()) == g
    assert GpuSnapshot.from_dict(None).available is False


def test_host_sampler_process_tree():
    script = "import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(5)']); time.sleep(5); c.kill()"
    kids = []
    try:
        # a child with its own grandchild, plus a direct sleeper
        kids.append(subprocess.Popen([sys.executable, "-c", script]))
        kids.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"]))
        h = HostSampler(os.getpid())
        deadline = time.monotonic() + 5
        while True:
            snap = h.sample()
            if snap.tree_nprocs >= 4 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert snap.tree_nprocs >= 4  # this process, 2 children, 1 grandchild
        assert snap.tree_rss_mb > 0
        assert snap.tree_cpu_pct is not None and snap.tree_cpu_pct >= 0
        assert snap.ram_total_mb > 0 and 0 < snap.ram_used_mb <= snap.ram_total_mb
        assert snap.swap_total_mb is not None
        pids = h.tree_pids()
        assert os.getpid() in pids and all(k.pid in pids for k in kids)
        # children from the root only
        sub = HostSampler(kids[1].pid).sample()
        assert sub.tree_nprocs == 1 and sub.tree_rss_mb > 0
    finally:
        for k in kids:
            k.kill()
        for k in kids:
            k.wait()
    snap = h.sample()  # dead processes dropped, nothing raises
    assert snap.tree_nprocs >= 1
    assert all(k.pid not in h.tree_pids() for k in kids)


def test_host_sampler_dead_root():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    h = HostSampler(p.pid)
    for _ in range(2):
        snap = h.sample()
        assert snap.tree_nprocs == 0 and snap.tree_rss_mb == 0.0
        assert snap.ram_total_mb > 0
    assert h.tree_pids() == []
    assert HostSampler(2**22 + 12345).sample().tree_nprocs == 0


def test_host_sampler_without_root():
    snap = HostSampler().sample()
    assert snap.tree_nprocs is None and snap.tree_rss_mb is None and snap.ram_total_mb > 0
    assert HostSampler().tree_pids() == []


def test_host_sampler_is_cheap():
    h = HostSampler(os.getpid())
    h.sample()
    n = 50
    t = time.process_time()
    for _ in range(n):
        h.sample()
    per_sample = (time.process_time() - t) / n
    assert per_sample < 0.005  # 2 Hz -> < 1 % of a core (typically ~0.3 ms here)


def test_no_ui_or_torch_imports():
    code = (
        "import sys\n"
        "import fttui.core.run.files.events, fttui.core.run.fold.state, fttui.monitor\n"
        "from fttui.monitor import GpuSampler, HostSampler\n"
        "GpuSampler().sample(); HostSampler(None).sample()\n"
        "bad = [m for m in ('textual', 'rich', 'torch', 'transformers') if m in sys.modules]\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


# ---------------------------------------------------------------- device memory: NVML v2 or v1
GiB = 2**30
RESERVED = 512 * 2**20  # what the driver keeps: in v1's used, not in v2's (nor in nvidia-smi's)


def _memory_stub(monkeypatch, *, v2: str = "ok", calls: list | None = None):
    """A pynvml stand-in with one card holding 3 GiB: ``v2`` is ``ok`` (binding and driver have the
    v2 call), ``binding`` (no ``nvmlMemory_v2``: an old nvidia-ml-py), ``driver`` (the call is not
    in the driver) or ``old-signature`` (a binding whose call takes no version)."""
    import types

    import pynvml

    calls = calls if calls is not None else []

    def v1():
        return types.SimpleNamespace(total=24 * GiB, free=24 * GiB - 3 * GiB - RESERVED, used=3 * GiB + RESERVED)

    def get_memory(handle, version=None):
        calls.append(version)
        if version is None:
            return v1()
        if v2 == "driver":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return types.SimpleNamespace(version=version, total=24 * GiB, reserved=RESERVED,
                                     free=24 * GiB - 3 * GiB - RESERVED, used=3 * GiB)

    def get_memory_old(handle):
        calls.append(None)
        return v1()

    fake = types.SimpleNamespace(
        NVMLError=pynvml.NVMLError, NVMLError_LibraryNotFound=pynvml.NVMLError_LibraryNotFound,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "550.54.15", nvmlSystemGetCudaDriverVersion=lambda: 12040,
        nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: "Fake GPU", nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetMemoryInfo=get_memory_old if v2 == "old-signature" else get_memory,
    )
    if v2 != "binding":
        fake.nvmlMemory_v2 = pynvml.nvmlMemory_v2
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return calls


def test_device_used_from_nvml_v2(monkeypatch):
    import pynvml

    calls = _memory_stub(monkeypatch, v2="ok")
    with GpuSampler() as s:
        snap = s.sample()
    assert snap.used_api == "v2"
    assert snap.gpus[0].mem_used_mb == 3072.0  # as nvidia-smi shows it: the reserved 512 MB left out
    assert snap.gpus[0].mem_total_mb == 24576.0
    assert calls == [pynvml.nvmlMemory_v2]
    assert snap.to_dict()["used_api"] == "v2"


@pytest.mark.parametrize("missing", ["binding", "driver", "old-signature"])
def test_device_used_falls_back_to_v1(monkeypatch, missing):
    calls = _memory_stub(monkeypatch, v2=missing)
    with GpuSampler() as s:
        first, second = s.sample(), s.sample()
    for snap in (first, second):
        assert snap.used_api == "v1"
        assert snap.gpus[0].mem_used_mb == 3072.0 + 512.0  # v1: reserved memory included
    # a binding or driver without the v2 call is asked once, not at every sample
    assert len([c for c in calls if c is not None]) == (1 if missing == "driver" else 0)


# ---------------------------------------------------------------- fake GPUs shared with another user
SHARED = DATA / "fake_gpus_shared.json"


def test_shared_fixture_visible_cards(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    snap = FakeGpuSampler(str(SHARED)).sample([os.getpid()])
    assert len(snap.gpus) == 4 and snap.used_api == "v2"
    assert visible_indices() == [2, 3]
    assert visible_indices(None, snap.gpus) == [2, 3]
    assert snap.visible == (2, 3) and snap.mig == ()


def test_shared_fixture_other_process_not_in_run_figure(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    s = FakeGpuSampler(str(SHARED))
    snap = s.sample([os.getpid(), os.getpid() + 1])
    g0, _, g2, g3 = snap.gpus
    # card 2: the run's 6,100 MB and alice's 12,000 MB; the run's figure has only the run's
    assert g2.proc_mem_mb == 6100.0 and g3.proc_mem_mb == 6050.0
    assert g2.mem_used_mb == 18102.0 and g2.mem_used_mb >= g2.proc_mem_mb + 12000.0  # device: both
    assert g0.proc_mem_mb == 0.0 and g0.mem_used_mb == 4.0  # an idle card: none of the run's
    # without the run's pids NVML has nothing to sum (as the real sampler)
    assert all(g.proc_mem_mb is None for g in s.sample().gpus)


def test_fake_processes_format_is_backwards_compatible():
    frames = [[{"index": 0, "mem_used_mb": 900.0, "proc_mem_mb": 500.0},
               {"index": 1, "mem_used_mb": 900.0, "processes": [{"pid": 77, "used_mb": 300.0},
                                                                {"pid": 78, "used_mb": 200.0},
                                                                {"run": True, "used_mb": 100.0}, "junk"]}]]
    s = FakeGpuSampler(frames)
    g0, g1 = s.sample([77]).gpus
    assert g0.proc_mem_mb == 500.0  # recorded figure, as before
    assert g1.proc_mem_mb == 400.0  # pid 77 and the run's process, not pid 78
    assert g1.mem_used_mb == 900.0
    assert "processes" not in g1.to_dict()


def test_sampler_reads_each_process_high_water_mark(tmp_path):
    """HostSampler keeps each process's VmHWM after it ends; an unreadable one is counted."""
    from fttui.monitor import HostSampler
    from fttui.monitor import host as host_mod

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sampler = HostSampler(os.getpid())
        first = sampler.sample()
        own = host_mod.vm_hwm_bytes(os.getpid()) / 2**20
        assert first.tree_hwm_mb >= own and first.hwm_unread == 0
    finally:
        child.kill()
        child.wait()
    after = sampler.sample()
    assert after.tree_hwm_mb >= first.tree_hwm_mb  # the ended child's peak is kept
    real = host_mod.vm_hwm_bytes
    try:
        host_mod.vm_hwm_bytes = lambda pid: None  # /proc/PID/status unreadable (another user's process)
        blind = HostSampler(os.getpid()).sample()
    finally:
        host_mod.vm_hwm_bytes = real
    assert blind.hwm_unread >= 1 and blind.tree_hwm_mb > 0
    # a process whose VmHWM was read once is not "unreadable" when a later read fails (it is
    # exiting: seen under load, a watched process's last sample)
    seen = HostSampler(os.getpid())
    seen.sample()
    try:
        host_mod.vm_hwm_bytes = lambda pid: None
        later = seen.sample()
    finally:
        host_mod.vm_hwm_bytes = real
    assert later.hwm_unread == 0 and later.tree_hwm_mb > 0
