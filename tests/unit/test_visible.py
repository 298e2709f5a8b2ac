"""CUDA_VISIBLE_DEVICES resolved to NVML indices: indices, UUIDs and their prefixes, MIG devices,
CUDA's stop at the first invalid entry; the run's cards first."""

from __future__ import annotations

from pathlib import Path

import pytest

from fttui.monitor import (
    FakeGpuSampler,
    GpuInfo,
    GpuSnapshot,
    cards_run_first,
    resolve_visible,
    run_cards,
    visible_indices,
)

DATA = Path(__file__).resolve().parent.parent / "data"

U = ["GPU-8f3c2a71-0000-4000-8000-000000000000", "GPU-8f3c9b02-1111-4000-8000-000000000001",
     "GPU-1d2e3f40-2222-4000-8000-000000000002", "GPU-77aa0b1c-3333-4000-8000-000000000003"]
MIG1 = ("MIG-5e6f7a8b-aaaa-5000-8000-000000000010", "MIG-5e6f7a8b-bbbb-5000-8000-000000000011")
GPUS = [GpuInfo(i, "card", U[i], mig_uuids=MIG1 if i == 1 else ()) for i in range(4)]


@pytest.mark.parametrize("value,expect", [
    ("2,3", [2, 3]),
    ("3,2", [3, 2]),  # CUDA order, not NVML order
    ("", []),  # no GPU
    ("-1", []),
    ("2,9,3", [2]),  # out of range: CUDA stops there
    ("2,x,3", [2]),
    (" 1 , 0", [1, 0]),
    ("+1", []),  # CUDA takes digits only
    (U[2], [2]),
    (f"{U[3]},{U[0]}", [3, 0]),
    ("GPU-1d2e", [2]),  # a unique prefix is enough
    ("gpu-1D2E", [2]),  # case does not matter
    ("GPU-8f3c", []),  # ambiguous prefix (cards 0 and 1): invalid, nothing before it
    ("1,GPU-8f3c,2", [1]),
    ("GPU-ffff", []),  # no such card
    ("GPU-", []),
    (f"2,{U[2]}", [2]),  # the same card twice counts once
    (f"MIG-GPU-{U[0][4:]}/1/0", [0]),  # the old MIG form: the parent card's index
    (f"MIG-{U[0]}/1/0", [0]),
    ("MIG-GPU-8f3c2a71/3/0", [0]),
    (f"MIG-{U[0]}", []),  # no GI/CI: not a valid old-style MIG name
    (MIG1[0], [1]),  # the new MIG form
    ("MIG-5e6f7a8b-bbbb", [1]),
    ("MIG-5e6f7a8b", [1]),  # both MIG devices are on card 1: one card
    ("MIG-0000", []),
])
def test_visible_indices_against_the_cards(value, expect):
    assert visible_indices(value, GPUS) == expect


def test_mig_devices_are_recorded():
    v = resolve_visible(f"{MIG1[1]},3", GPUS)
    assert v.indices == (1, 3) and v.mig == (1,)
    v = resolve_visible(f"MIG-GPU-{U[2][4:]}/0/0", GPUS)
    assert v.indices == (2,) and v.mig == (2,)
    assert resolve_visible("2,3", GPUS).mig == ()


def test_unresolvable_without_uuids_and_the_environment(monkeypatch):
    # nothing to match a UUID against: every card (as before, for callers without the cards)
    assert visible_indices("GPU-8f3c2a71") is None
    assert visible_indices(MIG1[0], [GpuInfo(0, uuid=U[0])]) is None  # no card lists MIG devices
    assert visible_indices("GPU-8f3c2a71", [GpuInfo(0), GpuInfo(1)]) is None
    assert visible_indices("5") == [5]  # no cards: an index is taken as it is
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_indices(None, GPUS) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-77aa,GPU-1d2e")
    assert visible_indices(gpus=GPUS) == [3, 2]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_indices(gpus=GPUS) == []


def test_run_cards_first():
    snap = GpuSnapshot(True, gpus=tuple(GPUS), visible=(3, 1), mig=(1,))
    cards = cards_run_first(snap)
    assert [(c.gpu.index, c.run, c.mig) for c in cards] == [(3, True, False), (1, True, True),
                                                            (0, False, False), (2, False, False)]
    assert [g.index for g in run_cards(snap)] == [3, 1]
    every = GpuSnapshot(True, gpus=tuple(GPUS))
    assert [(c.gpu.index, c.run) for c in cards_run_first(every)] == [(0, True), (1, True), (2, True), (3, True)]
    assert run_cards(GpuSnapshot(True, gpus=tuple(GPUS), visible=())) == []
    assert run_cards(GpuSnapshot(False, reason="no driver")) == [] and run_cards(None) == []


def test_snapshot_keeps_visibility_through_its_dict():
    snap = GpuSnapshot(True, gpus=tuple(GPUS), visible=(1, 3), mig=(1,), used_api="v2")
    back = GpuSnapshot.from_dict(snap.to_dict())
    assert back == snap
    assert back.gpus[1].mig_uuids == MIG1
    assert "mig_uuids" not in GPUS[0].to_dict()  # sample lines without MIG stay as they were
    old = GpuSnapshot.from_dict({"available": True, "gpus": [{"index": 0}]})  # a sample from before
    assert old.visible is None and old.mig == () and old.used_api is None


def test_fake_sampler_reads_the_environment(monkeypatch):
    s = FakeGpuSampler(str(DATA / "fake_gpus_shared.json"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-a100e5f6-03,GPU-a100e5f6-02")
    snap = s.sample()
    assert snap.visible == (3, 2) and snap.used_api == "v2"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert s.sample().visible is None


def test_nvml_sampler_lists_mig_devices_and_resolves_them(monkeypatch):
    """A pynvml stand-in: card 1 is in MIG mode with two MIG devices (a third slot empty)."""
    import sys
    import types

    import pynvml

    from fttui.monitor import GpuSampler

    def mig_handle(h, j):
        if j == 2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return ("mig", h, j)

    def uuid(h):
        return MIG1[h[2]] if isinstance(h, tuple) else U[h]

    fake = types.SimpleNamespace(
        NVMLError=pynvml.NVMLError, NVMLError_LibraryNotFound=pynvml.NVMLError_LibraryNotFound,
        NVML_DEVICE_MIG_ENABLE=1,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "550.54.15", nvmlSystemGetCudaDriverVersion=lambda: 12040,
        nvmlDeviceGetCount=lambda: 2, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: "A100", nvmlDeviceGetUUID=uuid,
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=2**30, total=40 * 2**30),
        nvmlDeviceGetMigMode=lambda h: [1, 1] if h == 1 else [0, 0],
        nvmlDeviceGetMaxMigDeviceCount=lambda h: 3,
        nvmlDeviceGetMigDeviceHandleByIndex=mig_handle,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", MIG1[1])
    with GpuSampler() as s:
        snap = s.sample()
    assert snap.gpus[0].mig_uuids == () and snap.gpus[1].mig_uuids == MIG1
    assert snap.visible == (1,) and snap.mig == (1,)
    assert visible_indices(MIG1[0], snap.gpus) == [1]  # what a reader of the sample lines resolves


def test_preflight_counts_cards_named_by_uuid(monkeypatch):
    """Preflight's count of usable cards resolves UUIDs too (a UUID list is not 'all cards')."""
    from pathlib import Path

    from fttui.core.run.launching.preflight import visible_gpu_count

    shared = Path(__file__).resolve().parents[1] / "data" / "fake_gpus_shared.json"
    monkeypatch.setenv("FTTUI_FAKE_GPUS", str(shared))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-a100e5f6-0000-1111-2222-333300000000")
    assert visible_gpu_count() == (1, None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert visible_gpu_count() == (2, None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_gpu_count() == (4, None)
