"""Host memory of a run, per node: the process baseline, the CUDA runtime, the model load, and
on CPU the training figures themselves.

Owns the host side of an estimate except ZeRO-3's offloaded states (those are filled with the
other ZeRO-3 terms in :mod:`fttui.core.memory.states`): :func:`host_terms` adds the per-process
baseline and CUDA runtime, the host copy a model load holds, and for CPU training the per-card
figures, which then live in host memory.
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
    procs = c.world // s["nodes"]
    host_bd["process"] = C["host_process_bytes"] * procs
    if c.on_gpu:
        host_bd["cuda_runtime"] = C["host_cuda_bytes"] * procs
        if method in KBIT_METHODS and s["init"] == "pretrained":
            host_bd["model_load"] = min(P * 2, C["host_load_shard_bytes"]) * procs
        elif s["init"] == "random" and not c.zero3 and method not in KBIT_METHODS:
            host_bd["model_load"] = 0  # random weights are drawn on the card (fttui.worker.model)
        else:
            # from_pretrained (and the quantised random init) build the whole model on the host
            load_b = c.wb if not c.zero3 else 4
            host_bd["model_load"] = P * load_b * procs
            if c.zero3:
                host_bd["model_load"] = 0  # the fp32 master copy takes its place in time
    else:
        # CPU training: the "card" figures live in host memory
        for k in ("weights", "gradients", "optimizer_states", "lora", "activations"):
            host_bd[k] = bd[k] * procs
        # no caching allocator on the host: glibc returns big blocks (fttui sets the mmap
        # threshold for CPU runs, fttui.core.run.launch), so no allocator overhead is added
        host_bd["activations"] += bd["quantisation"] * procs
