"""Host memory of a run, per node: the process baseline, the CUDA runtime, the model load, and
on CPU the training figures themselves.

Owns the host side of an estimate except the offloaded states of ZeRO-Offload / FSDP offload
(those are filled with the other sharding terms in :mod:`fttui.core.memory.sharding`, per node:
the node's ranks' shares): :func:`host_terms` adds the per-process baseline and CUDA runtime,
the host copy a model load holds, and for CPU training the per-rank figures, which then live in
host memory.
"""

from __future__ import annotations

from fttui.core.base.constants import KBIT_METHODS
from fttui.core.memory.breakdown import CONSTANTS
from fttui.core.memory.inputs import Setup

__all__ = ["host_terms"]


def host_terms(c: Setup, bd: dict[str, float], host_bd: dict[str, float]) -> None:
    """Fill ``host_bd`` (this node) from the setup and the finished per-card breakdown ``bd``."""
    s, method, P = c.s, c.method, c.a.params
    C = CONSTANTS
    procs = c.per_node
    host_bd["process"] = C["host_process_bytes"] * procs
    if c.on_gpu:
        host_bd["cuda_runtime"] = C["host_cuda_bytes"] * procs
        offloaded = sum(v for k, v in host_bd.items() if k.startswith("offload_"))
        if method in KBIT_METHODS and s["init"] == "pretrained":
            host_bd["model_load"] = min(P * 2, C["host_load_shard_bytes"]) * procs
        elif s["init"] == "random" and not c.kind.sharded and method not in KBIT_METHODS:
            # random weights are drawn on the card (fttui.worker.model)
            host_bd["model_load"] = 0
        else:
            # from_pretrained (and the random init of k-bit methods, DeepSpeed and FSDP, drawn on
            # the card and kept on the host, which the library moves, partitions or quantises)
            # build the whole model on the host; under DeepSpeed in the dtype the worker loads
            # (fp32 for fp16 full training), cast later; a k-bit random init in the compute dtype
            load_b = c.wb
            if method in KBIT_METHODS and s["init"] == "random":
                load_b = {"bf16": 2, "fp16": 2}.get(c.precision, 4)
            if c.deepspeed:
                load_b = {"bf16": 2, "fp16": 4 if method == "full" else 2}.get(c.precision, 4)
            # offloaded states are built after the copy is gone: the host holds the larger
            # (DeepSpeed's estimators: max(4 bytes x processes, 18 bytes) per parameter)
            host_bd["model_load"] = max(0.0, P * load_b * procs - offloaded)
    else:
        # CPU training: each rank's "card" figures live in host memory
        for k in ("weights", "gradients", "optimizer_states", "lora", "activations",
                  "communication"):
            host_bd[k] = bd[k] * procs
        # no caching allocator on the host: glibc returns big blocks (fttui sets the mmap
        # threshold for CPU runs, fttui.core.run.launch), so no allocator overhead is added
        host_bd["activations"] += bd["quantisation"] * procs
