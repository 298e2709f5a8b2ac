"""ZeRO-3's gathers over gloo in slices (fttui.worker.gloogather): the same bytes as DeepSpeed's
own call, rank by rank, and DeepSpeed's gather function replaced only on CPU ranks. Two spawned
gloo processes, tensors of a few MiB (the slice made small so that they take several slices)."""

from __future__ import annotations

import pytest


def _rank(rank: int, store: str, out: str) -> None:
    import json

    import torch
    import torch.distributed as dist

    from fttui.worker.gloogather import sliced_all_gather

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    res = {}
    for n in (1, 1000, 262_147):  # one element, one slice, several slices and a short last one
        part = torch.arange(n, dtype=torch.float32) + 1e6 * (rank + 1)
        ref, got = torch.empty(2 * n), torch.full((2 * n,), -1.0)
        dist.all_gather_into_tensor(ref, part)
        sliced_all_gather(got, part, slice_bytes=64 * 1024)
        res[n] = bool(torch.equal(ref, got))
    # DeepSpeed's own layout: the rank's part is a view into the buffer it gathers into
    flat = torch.zeros(2 * 5000)
    mine = flat.narrow(0, rank * 5000, 5000)
    mine.copy_(torch.arange(5000, dtype=torch.float32) * (rank + 1))
    sliced_all_gather(flat, mine, slice_bytes=4096)
    res["view"] = bool(torch.equal(flat[5000:], 2 * flat[:5000]))
    with open(f"{out}.{rank}", "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


@pytest.mark.multiprocess
def test_sliced_gather_equals_all_gather_into_tensor(tmp_path):
    import json

    import torch.multiprocessing as mp

    out = str(tmp_path / "out")
    mp.spawn(_rank, args=(str(tmp_path / "store"), out), nprocs=2, join=True)
    for r in (0, 1):
        assert json.loads(open(f"{out}.{r}").read()) == {"1": True, "1000": True, "262147": True, "view": True}


def test_deepspeeds_gather_is_replaced_on_cpu_ranks_only(monkeypatch):
    ds_comm = pytest.importorskip("deepspeed.comm")
    from deepspeed.comm import comm as module

    from fttui.worker.gloogather import chunked_gloo_gathers, sliced_so_far

    original = module.all_gather_into_tensor
    monkeypatch.setattr(module, "all_gather_into_tensor", original)  # put back after the test
    monkeypatch.setattr(ds_comm, "all_gather_into_tensor", original)
    assert chunked_gloo_gathers(False) is False and module.all_gather_into_tensor is original
    assert sliced_so_far() is None
    assert chunked_gloo_gathers(True) is True and module.all_gather_into_tensor.fttui_sliced
    assert ds_comm.all_gather_into_tensor is module.all_gather_into_tensor and sliced_so_far() == 0
    replaced = module.all_gather_into_tensor
    assert chunked_gloo_gathers(True) is True and module.all_gather_into_tensor is replaced  # once
