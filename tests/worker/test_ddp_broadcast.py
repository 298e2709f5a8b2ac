"""DDP's start-up broadcast of a LoRA-style model (frozen base, trained adapter) on two gloo ranks:
with equal frozen weights on both ranks only the trained parameters are broadcast
(fttui.worker.partition.skip_frozen_broadcast; before, the wrap copied the whole model once more
on every rank); with different ones everything is broadcast as before and rank 1 ends with rank
0's weights. Two spawned processes, a model of a few KiB."""

from __future__ import annotations

import pytest


def _rank(rank: int, store: str, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    for differ in (False, True):
        _wrap(rank, differ, f"{out}.{differ}")
    dist.destroy_process_group()


def _wrap(rank: int, differ: bool, out: str) -> None:
    import json

    import torch
    import torch.distributed as dist

    from fttui.worker.partition import skip_frozen_broadcast

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4))
    model[0].requires_grad_(False)  # the frozen base
    if differ and rank == 1:
        with torch.no_grad():
            model[0].weight.add_(1.0)
    if rank == 1:
        with torch.no_grad():  # the trained part differs: DDP must still bring rank 0's
            model[1].weight.mul_(2.0)
    skipped = skip_frozen_broadcast(model)
    sent: list[int] = []
    real = dist._broadcast_coalesced

    def counting(group, tensors, size, src):
        sent.extend(t.numel() * t.element_size() for t in tensors)
        return real(group, tensors, size, src)

    dist._broadcast_coalesced = counting
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(model)
    finally:
        dist._broadcast_coalesced = real
    sums = {n: float(p.detach().sum()) for n, p in ddp.module.named_parameters()}
    with open(f"{out}.{rank}", "w") as f:
        json.dump({"skipped": skipped, "sent": sum(sent), "sums": sums}, f)


@pytest.mark.multiprocess
def test_frozen_weights_are_broadcast_only_when_the_ranks_differ(tmp_path):
    import json

    import torch.multiprocessing as mp

    out = str(tmp_path / "out")
    mp.spawn(_rank, args=(str(tmp_path / "store"), out), nprocs=2, join=True)
    frozen_bytes = (16 * 16 + 16) * 4
    trained_bytes = (16 * 4 + 4) * 4
    for differ in (False, True):
        r0, r1 = (json.loads(open(f"{out}.{differ}.{r}").read()) for r in (0, 1))
        if differ:
            assert r0["skipped"] == r1["skipped"] == []
            assert r0["sent"] == r1["sent"] == frozen_bytes + trained_bytes
        else:
            assert r0["skipped"] == r1["skipped"] == ["0.weight", "0.bias"]
            assert r0["sent"] == r1["sent"] == trained_bytes
        assert r1["sums"] == pytest.approx(r0["sums"])  # rank 1 trains on rank 0's weights either way
