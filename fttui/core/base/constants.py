"""Facts fttui states once: the methods, the probe's parameters, run statuses and exit codes.

Every other module reads these names; none keeps its own copy.
"""

from __future__ import annotations

from types import MappingProxyType

# Fine-tuning methods, in the order the views list them.
METHODS: tuple[str, ...] = ("full", "full-zero3-offload", "lora", "lora-emb", "qlora", "lora-int8")
FULL_METHODS: tuple[str, ...] = ("full", "full-zero3-offload")
LORA_METHODS: tuple[str, ...] = ("lora", "lora-emb", "qlora", "lora-int8")
KBIT_METHODS: tuple[str, ...] = ("qlora", "lora-int8")
ZERO3_OFFLOAD = "full-zero3-offload"
#: How a run's model, gradients and optimizer states are spread over ranks (profile key
#: ``sharding``, orthogonal to ``method``): ``none`` = one process per card (DDP when several);
#: ``zero*`` = DeepSpeed ZeRO stage 2/3 (``-offload``: optimizer states, and for stage 3 the
#: parameters too, on the host); ``fsdp*`` = PyTorch FSDP through accelerate / the Trainer.
SHARDINGS: tuple[str, ...] = ("none", "zero2", "zero2-offload", "zero3", "zero3-offload", "fsdp", "fsdp-offload")
DEEPSPEED_SHARDINGS: tuple[str, ...] = ("zero2", "zero2-offload", "zero3", "zero3-offload")
FSDP_SHARDINGS: tuple[str, ...] = ("fsdp", "fsdp-offload")
#: The methods each sharding runs (docs/launchers.md, "Which method with which sharding"). ZeRO-2
#: partitions only what trains (gradients, optimizer states), so the frozen, quantised base of
#: qlora / lora-int8 is left as it is. ZeRO-3 and FSDP shard the parameters themselves: the
#: libraries do that for 4-bit weights only when they are stored in a float dtype
#: (bnb_4bit_quant_storage) and, under ZeRO-3, loaded inside zero.Init, which fttui's loader does
#: not do; 8-bit weights cannot be sharded at all. ``full-zero3-offload`` is ``full`` here.
SHARDING_METHODS: MappingProxyType[str, tuple[str, ...]] = MappingProxyType({
    "none": ("full", "lora", "lora-emb", "qlora", "lora-int8"),
    "zero2": ("full", "lora", "lora-emb", "qlora", "lora-int8"),
    "zero2-offload": ("full", "lora", "lora-emb", "qlora", "lora-int8"),
    "zero3": ("full", "lora", "lora-emb"),
    "zero3-offload": ("full", "lora", "lora-emb"),
    "fsdp": ("full", "lora", "lora-emb"),
    "fsdp-offload": ("full", "lora", "lora-emb"),
})

# The settings the probe and `estimate --max` search, with the profile key each one sets.
PROBE_PARAMS: MappingProxyType[str, str] = MappingProxyType(
    {"batch_size": "train.batch_size", "max_seq_len": "data.max_seq_len"})

# A run's final statuses (status.json, the row) and the exit codes of `fttui run`.
#: ``lost``: the supervisor died and nothing recorded how the training ended (its row, written by the
#: next fttui command that looked, has the figures up to the last step).
#: ``watched``: a process fttui watched but did not start (`fttui watch --pid`) ended, or the watch
#: was stopped; fttui knows no exit code for it.
WATCHED = "watched"
FINAL_STATUSES: tuple[str, ...] = ("completed", "failed", "oom", "cancelled", "lost", WATCHED)
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_OOM = 3
EXIT_CANCELLED = 4
EXIT_INTERRUPTED = 130
EXIT_CODES: MappingProxyType[str, int] = MappingProxyType(
    {"completed": EXIT_OK, "failed": EXIT_ERROR, "oom": EXIT_OOM, "cancelled": EXIT_CANCELLED, WATCHED: EXIT_OK})

# CUDA context + cuBLAS/cuDNN workspaces + NCCL per card, in bytes: counted by NVML but not by
# torch's reserved memory. The memory model's fitted constant (CONSTANTS["cuda_context_bytes"],
# docs/estimate.md); here so that the summary row's fallback (reserved + context) uses it too.
CUDA_CONTEXT_BYTES = 800 * 2**20

__all__ = [
    "METHODS", "FULL_METHODS", "LORA_METHODS", "KBIT_METHODS", "ZERO3_OFFLOAD", "SHARDINGS", "DEEPSPEED_SHARDINGS", "FSDP_SHARDINGS",
    "SHARDING_METHODS", "PROBE_PARAMS",
    "FINAL_STATUSES", "WATCHED", "EXIT_OK", "EXIT_ERROR", "EXIT_BAD_INPUT", "EXIT_OOM", "EXIT_CANCELLED",
    "EXIT_INTERRUPTED", "EXIT_CODES", "CUDA_CONTEXT_BYTES",
]
