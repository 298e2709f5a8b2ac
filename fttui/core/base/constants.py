"""Facts fttui states once: the methods, the probe's parameters, run statuses and exit codes.

Every other module reads these names; none keeps its own copy.
"""

from __future__ import annotations

from types import MappingProxyType

from fttui.core.base import methods, shardings

# The names a profile's ``method`` may hold, in the order the views list them: the method
# registry's (:mod:`fttui.core.base.methods` declares each method once), with the legacy names of
# a method under a sharding kind (``full-zero3-offload``: ``full`` under ZeRO-3 offload) from the
# sharding registry after full fine-tuning's.
METHODS: tuple[str, ...] = (
    *(k.name.value for k in methods.KINDS.values() if k.full),
    *shardings.LEGACY_METHODS,
    *(k.name.value for k in methods.KINDS.values() if not k.full),
)
#: the sharding kinds' names (:mod:`fttui.core.base.shardings` declares each kind once)
SHARDINGS: tuple[str, ...] = shardings.NAMES
#: sharding -> the methods it runs, and the legacy method name (both read off the registry)
SHARDING_METHODS: MappingProxyType[str, tuple[str, ...]] = MappingProxyType(
    {k.name: k.methods for k in shardings.KINDS.values()}
)
ZERO3_OFFLOAD: str = next(iter(shardings.LEGACY_METHODS))

# The settings the probe and `estimate --max` search, with the profile key each one sets.
PROBE_PARAMS: MappingProxyType[str, str] = MappingProxyType(
    {"batch_size": "train.batch_size", "max_seq_len": "data.max_seq_len"}
)

# The optimizer steps that carry the data's longest samples under ``train.longest_first``, and a
# probe trial's steps: the first step's forward and backward run before the optimizer has any
# state (Adam's two moments are made in its first ``step()``: 8 bytes a trained parameter) and
# before the allocator has settled (tiny-lora's peak address space grew 0.4 to 0.7 MiB from the
# first step to the second, then stayed), so the second step is the first at the steady peak.
# A run and a trial at the same value then feed the same batches in the same steps.
LONGEST_FIRST_STEPS = 2
PROBE_STEPS = LONGEST_FIRST_STEPS

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
#: ``fttui plan --link``: the link test itself failed (its launcher, a rank, its result), not the input
EXIT_LINK_FAILED = 5
EXIT_INTERRUPTED = 130
EXIT_CODES: MappingProxyType[str, int] = MappingProxyType(
    {"completed": EXIT_OK, "failed": EXIT_ERROR, "oom": EXIT_OOM, "cancelled": EXIT_CANCELLED, WATCHED: EXIT_OK}
)

# CUDA context + cuBLAS/cuDNN workspaces + NCCL per card, in bytes: counted by NVML but not by
# torch's reserved memory. The memory model's fitted constant (CONSTANTS["cuda_context_bytes"],
# docs/estimate.md); here so that the summary row's fallback (reserved + context) uses it too.
CUDA_CONTEXT_BYTES = 800 * 2**20

# The most bytes one data sample (a .jsonl line, an element of a .json list) may hold: a larger one is
# refused in one line, having read no more of it than this (docs/data.md, "One sample's size"). Fixed,
# not derived from max_seq_len: a sample longer than max_seq_len is ordinary data cut to its head, and
# `fttui data` caches a file's lengths for every max_seq_len. 4 MiB is about a million tokens of English,
# the longest contexts models are fine-tuned at; only a sample's first max_seq_len tokens train, so
# cutting a longer one loses nothing a run uses. `fttui data` tokenises a sample whole (a Hugging Face
# tokenizer holds about 300 bytes a token), so this bounds one sample's cost to about 1 GB.
MAX_SAMPLE_BYTES = 4 << 20

__all__ = [
    "METHODS",
    "SHARDINGS",
    "SHARDING_METHODS",
    "ZERO3_OFFLOAD",
    "PROBE_PARAMS",
    "LONGEST_FIRST_STEPS",
    "PROBE_STEPS",
    "FINAL_STATUSES",
    "WATCHED",
    "EXIT_OK",
    "EXIT_ERROR",
    "EXIT_BAD_INPUT",
    "EXIT_OOM",
    "EXIT_CANCELLED",
    "EXIT_LINK_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_CODES",
    "CUDA_CONTEXT_BYTES",
    "MAX_SAMPLE_BYTES",
]
