"""The link test before a launch (issue 43 item 2): a short all-reduce test through the launcher
and rendezvous a run uses, whose result file the core parses (:mod:`fttui.core.experiments.link`).

    python -m fttui.integrations.linktest --out FILE [--sizes-mib 1,4,16,64] [--iters 5]

Started under torchrun (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` set: the
plan's ``--link``) or by ``srun`` with one task per node (``fttui submit``'s first step: the
rendezvous is the first node of the allocation, as a job's run finds it, on the link test's own
port, :func:`fttui.core.run.slurm.allocation.link_port`). Gloo on CPU, NCCL when CUDA is there.

Every rank times, after a warm-up, ``--iters`` all-reduces of each size of float32 (the
bandwidth) and of one float (the latency); then, for a few ranks (2 to :data:`MAX_PAIR_RANKS`),
every pair of ranks alone in a group of its own (the pairwise test that names a bad pair). Rank 0
writes the raw seconds (each rank's median, per size and per pair) as JSON to ``--out``; the
core turns them into bandwidths. Nothing here imports torch at import time.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from datetime import timedelta
from itertools import combinations
from typing import Any

#: the pairwise test runs for this many ranks at most (the pairs grow as the square)
MAX_PAIR_RANKS = 4
#: the size each pair is timed at, MiB
PAIR_MIB = 16
FORMAT = 1
#: how long a rank waits for the others (the rendezvous, each collective) before the test fails
RENDEZVOUS_S = 120


def _rendezvous() -> tuple[int, int, int, str]:
    """(rank, world size, local rank, init method) from torchrun's or Slurm's environment."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", "0")), "env://"
    from fttui.core.run.slurm.allocation import link_port, read_allocation, rendezvous_addr

    alloc = read_allocation(env)
    if alloc is None:
        raise SystemExit("linktest: start it under torchrun or srun (no RANK / WORLD_SIZE, no Slurm job step)")
    addr = rendezvous_addr(alloc)
    return alloc.node_rank, alloc.nodes, 0, f"tcp://{addr}:{link_port(alloc.job_id)}"


def _node() -> str:
    return (os.environ.get("SLURMD_NODENAME") or "").strip() or socket.gethostname()


def _timed(dist: Any, torch: Any, tensor: Any, iters: int, group: Any = None) -> float:
    """This rank's median seconds of ``iters`` all-reduces of ``tensor`` (one more before, untimed)."""
    cuda = tensor.is_cuda
    dist.all_reduce(tensor, group=group)
    times = []
    for _ in range(iters):
        dist.barrier(group=group)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        dist.all_reduce(tensor, group=group)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(out: str, sizes_mib: list[float], iters: int) -> int:
    import torch
    import torch.distributed as dist

    rank, world, local, init = _rendezvous()
    cuda = torch.cuda.is_available() and os.environ.get("FTTUI_LINK_BACKEND", "") != "gloo"
    backend = "nccl" if cuda else "gloo"
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend, init_method=init, rank=rank, world_size=world, timeout=timedelta(seconds=RENDEZVOUS_S)
    )
    try:
        nodes: list[Any] = [None] * world
        dist.all_gather_object(nodes, _node())
        sizes = []
        for mib in sizes_mib:
            n = max(1, int(mib * (1 << 20)) // 4)
            sizes.append({"bytes": 4 * n, "seconds": _timed(dist, torch, torch.ones(n, device=device), iters)})
        latency = _timed(dist, torch, torch.ones(1, device=device), max(iters, 10))
        mine = {"rank": rank, "node": _node(), "sizes": [s["seconds"] for s in sizes], "latency_s": latency}
        ranks: list[Any] = [None] * world
        dist.all_gather_object(ranks, mine)
        pairs = []
        if 2 < world <= MAX_PAIR_RANKS:  # two ranks: the pair is the whole world, timed above
            n = int(PAIR_MIB * (1 << 20)) // 4
            for a, b in combinations(range(world), 2):
                group = dist.new_group([a, b])  # every rank takes part in making each group
                if rank in (a, b):
                    t = _timed(dist, torch, torch.ones(n, device=device), iters, group)
                    lat = _timed(dist, torch, torch.ones(1, device=device), max(iters, 10), group)
                    pairs.append({"ranks": [a, b], "bytes": 4 * n, "seconds": t, "latency_s": lat})
                dist.barrier()
        found: list[Any] = [None] * world
        dist.all_gather_object(found, pairs)
        if rank == 0:
            seen: dict[tuple[int, int], dict[str, Any]] = {}
            for per in found:
                for p in per or []:  # both ranks timed the pair: the slower one's figure
                    key = (int(p["ranks"][0]), int(p["ranks"][1]))
                    if key not in seen or p["seconds"] > seen[key]["seconds"]:
                        seen[key] = p
            for i, s in enumerate(sizes):  # the collective's time: the slowest rank's
                s["seconds"] = max(r["sizes"][i] for r in ranks)
            result = {
                "format": FORMAT,
                "backend": backend,
                "device": "cuda" if cuda else "cpu",
                "world": world,
                "nodes": nodes,
                "iters": iters,
                "sizes": sizes,
                "latency_s": max(r["latency_s"] for r in ranks),
                "ranks": ranks,
                "pairs": [seen[k] for k in sorted(seen)],
                "t": time.time(),
            }
            tmp = f"{out}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(result, f)
            os.replace(tmp, out)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fttui.integrations.linktest")
    p.add_argument("--out", required=True)
    p.add_argument("--sizes-mib", default="1,4,16,64")
    p.add_argument("--iters", type=int, default=5)
    a = p.parse_args(argv)
    try:
        sizes = [float(x) for x in a.sizes_mib.split(",") if x.strip()]
    except ValueError:
        print(f"linktest: --sizes-mib {a.sizes_mib!r}: give sizes in MiB, e.g. 1,4,16,64", file=sys.stderr)
        return 2
    if not sizes or any(s <= 0 for s in sizes) or a.iters < 1:
        print("linktest: give sizes above 0 and --iters 1 or more", file=sys.stderr)
        return 2
    return run(a.out, sizes, a.iters)


if __name__ == "__main__":
    sys.exit(main())
