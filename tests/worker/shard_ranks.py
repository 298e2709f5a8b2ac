"""Per-rank live tensors of a sharded training step on CPU: the harness of
tests/worker/test_estimate_sharding.py, run by torchrun (gloo) with one process per rank.

    python -m torch.distributed.run --nproc_per_node 2 tests/worker/shard_ranks.py OUT.json CASES.json

``CASES.json`` is a list of ``{"name", "profile", "overrides", "sharding"}``. For each case every
rank builds the model as the worker does (:func:`fttui.worker.model.build_model`), wraps it in
the real DeepSpeed engine with the worker's DeepSpeed config (ZeRO stage 2 / 3, optimizer and
parameter offload to the CPU; the bucket sizes the HF Trainer fills in for its ``auto`` keys; the
optimizer the Trainer hands over, torch AdamW, or DeepSpeed's CPU Adam where the states are
offloaded) or in FSDP2 (``fully_shard`` per decoder layer, then the root; ``fsdp-offload``: the
CPU offload policy, which on a CPU rank moves nothing but runs the same code), runs two training
steps, then measures a third (the live storages summed after every operator of that step only): every CPU
storage created since the model build is counted while alive (:class:`LiveStorages`, which,
unlike :class:`fttui.worker.memtrace.LiveTensors`, follows storages FSDP resizes in place and
the local shards of DTensors), so the peak of the third step is everything the
rank holds then: its parameter shards, gathered parameters, gradient partitions, fp32 masters,
optimizer states, buckets and activations. Rank 0 writes ``{name: [bytes per rank]}``, plus
each rank's parameter-storage bytes, to ``OUT.json``.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import weakref

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from fttui.core.profiles import load_profile  # noqa: E402
from fttui.worker.model import build_model  # noqa: E402
from fttui.worker.startup import stack_imported  # noqa: E402


class LiveStorages(TorchDispatchMode):
    """The bytes of every CPU storage an operator made inside the mode, while it is alive, at
    their current size (FSDP frees and re-allocates unsharded parameters by resizing their
    storage in place); ``peak`` is the largest sum seen after an operator."""

    def __init__(self, external: set[int]) -> None:
        super().__init__()
        self.external = set(external)
        self.refs: dict[int, weakref.ref] = {}
        self.current = 0
        self.peak = 0
        self.measuring = False  # sums the live storages after every operator only while measuring

    def total(self) -> int:
        return sum(st.nbytes() for st in (r() for r in list(self.refs.values())) if st is not None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            t = getattr(t, "_local_tensor", t)  # a DTensor: its shard on this rank
            if t.device.type != "cpu":
                continue
            try:
                st = t.untyped_storage()
            except (RuntimeError, NotImplementedError):  # a wrapper without storage
                continue
            key = st._cdata
            if key in self.refs or key in self.external:
                continue
            self.refs[key] = weakref.ref(st, lambda _r, k=key: self.refs.pop(k, None))
        if self.measuring:
            self.current = self.total()
            self.peak = max(self.peak, self.current)
        return out


def ds_config(r, world: int) -> dict:
    """The DeepSpeed config the worker hands the Trainer (:func:`fttui.worker.sharding.deepspeed_config`),
    with the values the Trainer fills in for its ``auto`` keys (transformers.integrations.deepspeed:
    bucket sizes from the hidden size, ``gradient_clipping`` = ``max_grad_norm``)."""
    from fttui.worker.sharding import deepspeed_config

    h = int(r.model.arch_config["hidden_size"])
    auto = {"reduce_bucket_size": h * h, "stage3_prefetch_bucket_size": int(0.9 * h * h),
            "stage3_param_persistence_threshold": 10 * h}
    conf = deepspeed_config(r, world)
    conf["gradient_clipping"] = 1.0
    zero = conf["zero_optimization"]
    for k, v in auto.items():
        if zero.get(k) == "auto":
            zero[k] = v
    for off in ("offload_optimizer", "offload_param"):
        if off in zero:
            zero[off]["pin_memory"] = False  # nothing to pin for on a CPU rank
    return conf


def wrap(model, r, sharding: str, world: int):
    """(forward-backward-step function, the module whose parameters the rank holds)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    if sharding.startswith("zero"):
        import deepspeed

        if sharding.endswith("offload"):  # the optimizer DeepSpeed steps on the host
            from deepspeed.ops.adam import DeepSpeedCPUAdam

            opt = DeepSpeedCPUAdam(trainable, lr=1e-4)
        else:
            opt = torch.optim.AdamW(trainable, lr=1e-4)
        engine, *_ = deepspeed.initialize(model=model, optimizer=opt, model_parameters=trainable,
                                          config=ds_config(r, world))

        def step(ids):
            loss = engine(input_ids=ids, labels=ids).loss
            engine.backward(loss)
            engine.step()

        return step, engine
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    policy = CPUOffloadPolicy(pin_memory=False) if sharding == "fsdp-offload" else OffloadPolicy()
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    for layer in inner.model.layers:
        fully_shard(layer, offload_policy=policy)
    fully_shard(model, offload_policy=policy)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)

    def step(ids):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, model


def measure(case: dict, world: int) -> int:
    r = load_profile(case["profile"], case["overrides"]).with_settings({"sharding": case["sharding"]})
    torch.manual_seed(0)
    b, s = int(r.train.batch_size), int(r.data.max_seq_len)
    ids = torch.randint(0, int(r.model.arch_config["vocab_size"]), (b, s))
    live = LiveStorages({ids.untyped_storage()._cdata})
    with live:
        model, _info = build_model(r)
        model.train()
        step, holder = wrap(model, r, case["sharding"], world)
        step(ids)  # optimizer states created; ZeRO-3 records its trace
        step(ids)
        live.measuring = True
        live.peak = live.current = live.total()
        step(ids)
    peak = live.peak
    del step, holder, model, live
    gc.collect()
    return peak


def main() -> int:
    out, cases_path = sys.argv[1], sys.argv[2]
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    with stack_imported():  # as the worker: full collections (one per case) skip the libraries' objects
        import deepspeed  # noqa: F401
        import peft  # noqa: F401
        import transformers  # noqa: F401
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    results: dict[str, list[int]] = {}
    for case in cases:
        mine = measure(case, world)
        got: list = [None] * world
        dist.all_gather_object(got, mine)
        results[case["name"]] = got
    if rank == 0:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
