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

# The settings the probe and `estimate --max` search, with the profile key each one sets.
PROBE_PARAMS: MappingProxyType[str, str] = MappingProxyType(
    {"batch_size": "train.batch_size", "max_seq_len": "data.max_seq_len"})

# A run's final statuses (status.json, the row) and the exit codes of `fttui run`.
FINAL_STATUSES: tuple[str, ...] = ("completed", "failed", "oom", "cancelled")
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_OOM = 3
EXIT_CANCELLED = 4
EXIT_INTERRUPTED = 130
EXIT_CODES: MappingProxyType[str, int] = MappingProxyType(
    {"completed": EXIT_OK, "failed": EXIT_ERROR, "oom": EXIT_OOM, "cancelled": EXIT_CANCELLED})

# CUDA context + cuBLAS/cuDNN workspaces + NCCL per card, in bytes: counted by NVML but not by
# torch's reserved memory. The memory model's fitted constant (CONSTANTS["cuda_context_bytes"],
# docs/estimate.md); here so that the summary row's fallback (reserved + context) uses it too.
CUDA_CONTEXT_BYTES = 800 * 2**20

__all__ = [
    "METHODS", "FULL_METHODS", "LORA_METHODS", "KBIT_METHODS", "ZERO3_OFFLOAD", "PROBE_PARAMS",
    "FINAL_STATUSES", "EXIT_OK", "EXIT_ERROR", "EXIT_BAD_INPUT", "EXIT_OOM", "EXIT_CANCELLED",
    "EXIT_INTERRUPTED", "EXIT_CODES", "CUDA_CONTEXT_BYTES",
]
