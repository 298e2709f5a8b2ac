"""Host memory of a run, per node: the process baseline, the CUDA runtime, the model load, and
on CPU the training figures themselves.

Owns the host side of an estimate except the offloaded states of ZeRO-Offload / FSDP offload
(those are filled with the other sharding terms in :mod:`fttui.core.memory.sharding`, per node:
the node's ranks' shares): :func:`host_terms` adds the per-process baseline and CUDA runtime,
the host copy a model load holds, and for CPU training the per-rank figures, which then live in
host memory.
"""

from __future__ import annotations

from fttui.core.memory.breakdown import CONSTANTS
from fttui.core.memory.inputs import Setup
from fttui.core.memory.sharding import zero3_init

__all__ = ["host_terms"]


def _load_copy(c: Setup, weights: float) -> float:
    """Host bytes (this node) that exist only while the model is built or loaded: the copy the
    load holds before the engine takes the model. ZeRO-3 inside zero.Init: rank 0 reads the
    checkpoint, a random init is drawn module by module into the partitions; FSDP: rank 0 alone
    reads the checkpoint or draws the random weights (on the host, on its card when it has one),
    the other ranks build on the meta device. Else every rank builds the whole model.
    ``weights``: the weights term of one card (a GPTQ / AWQ checkpoint's packed bytes as stored)."""
    method, P = c.method, c.a.params
    kbit = method.quantised
    pretrained = c.p.model.init == "pretrained"
    load_b = c.wb
    if kbit and not pretrained:
        load_b = {"bf16": 2, "fp16": 2}.get(c.precision, 4)  # a k-bit random init in the compute dtype
    if c.deepspeed:
        # the dtype the worker loads in under DeepSpeed (fp32 for fp16 full training), cast later
        load_b = {"bf16": 2, "fp16": 4 if method.full else 2}.get(c.precision, 4)
    if c.prequant is not None and pretrained:
        # loaded with a device_map: one checkpoint shard at a time on the host, and a GPTQ / AWQ
        # checkpoint stores its packed weights (on an H100: a 1.1B AWQ checkpoint of 0.73 GiB,
        # host 1,759 MiB against 3,708 when this was P * 2, docs/estimate.md)
        return min(weights, CONSTANTS["host_load_shard_bytes"]) * c.per_node
    if kbit and pretrained:
        # loaded with a device_map: one checkpoint shard at a time on the host, fp16 / bf16
        return min(P * 2, CONSTANTS["host_load_shard_bytes"]) * c.per_node
    if zero3_init(c):
        return P * load_b if pretrained else 0.0  # rank 0 reads the whole checkpoint
    if c.fsdp and not kbit:
        return P * c.wb  # rank 0 only
    if not c.on_gpu:
        return 0.0  # CPU training: the loaded weights are the trained ones (counted below)
    if c.p.model.init == "random" and not c.kind.sharded and not kbit:
        return 0.0  # random weights are drawn on the card (fttui.worker.model)
    # from_pretrained (and the random init of k-bit methods and of DeepSpeed without zero.Init,
    # drawn on the card and kept on the host, which the library moves, partitions or quantises)
    # build the whole model on every rank's host memory
    return P * load_b * c.per_node


def host_terms(c: Setup, bd: dict[str, float], host_bd: dict[str, float]) -> float:
    """Fill ``host_bd`` (this node) from the setup and the finished per-card breakdown ``bd``;
    returns the host's load peak. The load peak (the process, the load's copy and what exists
    while loading: ZeRO-3's parameter partitions, CPU ranks' weights built in place) and the
    training peak are separate: ``model_load`` is what the load peak adds above the training
    peak, so the breakdown sums to the larger of the two."""
    C = CONSTANTS
    procs = c.per_node
    host_bd["process"] = C["host_process_bytes"] * procs
    if c.on_gpu:
        host_bd["cuda_runtime"] = C["host_cuda_bytes"] * procs
    else:
        # CPU training: each rank's "card" figures live in host memory
        for k in ("weights", "gradients", "optimizer_states", "lora", "activations", "communication"):
            host_bd[k] = bd[k] * procs
        # no caching allocator on the host: glibc returns big blocks (fttui sets the mmap
        # threshold for CPU runs, fttui.core.run.launching.launch), so no allocator overhead is added
        host_bd["activations"] += bd["quantisation"] * procs
    # what exists during the load too: under zero.Init the parameter partitions are built as the
    # model is (offloaded to the host, or on CPU ranks the weights themselves)
    during = host_bd["process"] + host_bd["cuda_runtime"]
    if zero3_init(c):
        during += host_bd["offload_param_partitions"]
    if not c.on_gpu and zero3_init(c):
        during += host_bd["weights"]
    load_peak = during + _load_copy(c, bd["weights"])
    train_peak = sum(v for k, v in host_bd.items() if k != "model_load")
    host_bd["model_load"] = max(0.0, load_peak - train_peak)
    return load_peak
