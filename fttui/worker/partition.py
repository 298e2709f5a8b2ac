"""How a sharded run builds its model, so that no rank holds more of it than the sharding needs.

- ZeRO-3 (``zero3``, ``zero3-offload``): the run's ``TrainingArguments``, and with them
  transformers' DeepSpeed config, exist while the model is built (:func:`build_context`), so
  transformers builds it inside DeepSpeed's ``zero.Init``, as it documents for ZeRO-3: each module
  is partitioned over the ranks as soon as it is constructed. Random init (``from_config``) draws
  each module's weights gathered, one module at a time; ``from_pretrained`` reads the checkpoint
  on rank 0 only (the others map it on the meta device) and fills each module's partitions from
  it. A quantised model (QLoRA under ZeRO-3) is built whole and partitioned by the engine:
  transformers builds no quantised model inside ``zero.Init``. On CPU ranks the build runs
  with :func:`return_freed_blocks` (glibc keeps the freed whole modules otherwise) and the gathers
  go in slices (:func:`fttui.worker.gloogather.chunked_gloo_gathers`: gloo holds a second copy
  of what it gathers).
- FSDP (``fsdp``, ``fsdp-offload``): RAM-efficient loading. The lowest rank builds or reads the
  model; the others build it on the meta device (parameters without storage, buffers real), and
  accelerate (``cpu_ram_efficient_loading``, set by :func:`fttui.worker.sharding.fsdp_arguments`)
  shards the empty model and broadcasts rank 0's weights into every rank's shards. QLoRA under
  FSDP loads on every rank (accelerate broadcasts no 4-bit parameters). On CPU ranks the run
  goes with :func:`return_freed_blocks` too (each parameter is received whole and freed once
  sharded, each layer gathered and freed in every step).

PEFT adapters go on top in both cases (:func:`fttui.worker.model.build_model`).

- DDP (``none`` over several ranks): every rank builds the whole model from the same seed or
  file, and DDP's wrap broadcasts rank 0's parameters to the others in 250 MiB flattened buckets
  (``_sync_module_states``): a transient copy of the whole model on every rank, frozen weights
  included (a LoRA run's peak was its model's bytes again above the model itself).
  :func:`skip_frozen_broadcast` leaves the frozen parameters out of that broadcast once the ranks
  have shown they hold equal ones. Imports nothing heavy at import time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from fttui.core.profiles.typed import Profile

from .errors import ConfigError
from .gloogather import chunked_gloo_gathers
from .limits import glibc as _glibc  # (tests replace it here)
from .model import META, WHOLE, ZERO_INIT

__all__ = ["build_mode", "build_context", "ram_efficient_fsdp", "return_freed_blocks", "skip_frozen_broadcast"]

#: glibc's ``mallopt`` parameter: blocks at least this big are mmapped (and unmapped when freed)
M_MMAP_THRESHOLD = -3
#: the threshold of a ZeRO-3 rank on the host: glibc's own initial one (128 KiB)
ZERO3_MMAP_THRESHOLD = 128 * 1024


def ram_efficient_fsdp(profile: Profile) -> bool:
    """FSDP whose ranks other than the lowest build on the meta device (every method but the
    quantised ones, whose 4-bit parameters accelerate does not broadcast)."""
    prof = profile
    return prof.sharding_kind().fsdp and not prof.method_kind().quantised


def build_mode(profile: Profile, rank: int) -> str:
    """:data:`~.model.ZERO_INIT`, :data:`~.model.META` or :data:`~.model.WHOLE` for this rank."""
    prof = profile
    if prof.sharding_kind().zero3 and not prof.method_kind().quantised and prof.deepspeed.zero3_init:
        return ZERO_INIT
    if ram_efficient_fsdp(prof) and rank != 0:
        return META
    return WHOLE


@contextlib.contextmanager
def build_context(profile: Profile, run_dir: str, world: int, use_cuda: bool, rank: int) -> Iterator[str]:
    """The context the model is built in; yields its :func:`build_mode`. Under ZeRO-3 the run's
    ``TrainingArguments`` are created first and kept alive until the build is over (transformers
    holds its DeepSpeed config by a weak reference); the Trainer later creates its own."""
    prof = profile
    mode = build_mode(prof, rank)
    if mode != ZERO_INIT:
        # FSDP on the host: the same freed-block pattern as ZeRO-3 (each parameter received whole
        # and freed once sharded; each layer gathered and freed in every step)
        return_freed_blocks(not use_cuda and prof.sharding_kind().fsdp)
        yield mode
        return
    import deepspeed
    from transformers.integrations import is_deepspeed_zero3_enabled

    from .arguments import training_args

    args = training_args(prof, run_dir, world, use_cuda)
    # the process group first, as DeepSpeed's communication layer sees it: zero.Init checks its
    # batch sizes against the world size it reads there (1 without a group)
    _ = args.device
    deepspeed.init_distributed()
    if not is_deepspeed_zero3_enabled():
        raise ConfigError(
            f"sharding {prof.sharding}: transformers does not see the ZeRO-3 config before the "
            "model is built (no zero.Init); refusing to build the whole model on every rank"
        )
    return_freed_blocks(not use_cuda)
    chunked_gloo_gathers(not use_cuda)
    try:
        yield mode
    finally:
        del args


def return_freed_blocks(applies: bool, libc: Any = None) -> bool:
    """From a ZeRO-3 or FSDP rank's model build on the host to the end of its run, glibc returns
    every freed block of 128 KiB or more to the system; True when it was set. Why: glibc's mmap
    threshold is dynamic; once a mmapped block is freed, blocks up to its size (up to 32 MiB) come
    from the heap from then on, and a freed heap block stays resident. ``zero.Init`` draws each
    module's weights whole and frees them once partitioned, and each step gathers modules whole and
    frees them, so with the dynamic threshold the freed modules stay resident as heap holes
    (2 CPU ranks, docs/estimate.md "Partitioned build on CPU ranks": a rank's peak above the
    baseline was 2.2 to 2.8 models, 1.6 to 1.7 with 128 KiB for the run; 128 KiB for the build
    only, 32 MiB after it: 2.5 again; 4 MiB for the run: 1.8 to 2.2). Kept for the run: its step
    time did not grow beyond the load's noise. Not applied on GPU
    ranks (the weights are drawn on the card, the gathered modules live there) nor without glibc
    (a no-op). ``libc`` is for tests."""
    libc = libc if libc is not None else (_glibc() if applies else None)
    if not applies or libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, ZERO3_MMAP_THRESHOLD))


def frozen_digest(model):
    """One number per frozen parameter (its sum, in its own dtype: no copy of the weights), in
    ``named_parameters`` order: equal on two ranks that hold equal frozen weights."""
    import torch

    sums = [p.detach().sum().double() for _, p in model.named_parameters() if not p.requires_grad]
    return torch.stack(sums) if sums else torch.zeros(0, dtype=torch.float64)


def skip_frozen_broadcast(model, log=None) -> list[str]:
    """Before a DDP wrap: name the frozen parameters as ones DDP leaves alone
    (``DistributedDataParallel._set_params_and_buffers_to_ignore_for_model``), so its start-up
    broadcast copies only the trained ones. Only when every rank's frozen parameters equal rank
    0's (a per-parameter sum gathered from every rank; the others would silently train against
    different weights); otherwise nothing changes and DDP broadcasts them as usual. Returns the
    names left out (none without a process group of more than one rank)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return []
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    digest = frozen_digest(model)
    top, low = digest.clone(), digest.clone()
    dist.all_reduce(top, op=dist.ReduceOp.MAX)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    if not torch.equal(top, low):
        if log is not None:
            log("DDP: the ranks' frozen weights differ; rank 0's are broadcast to every rank")
        return []
    torch.nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, frozen)
    return frozen
