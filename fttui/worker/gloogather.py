"""ZeRO-3 on CPU ranks: DeepSpeed's parameter gathers in slices, so a gathered module costs its
own bytes and not twice them.

DeepSpeed gathers a module's partitions into one flat buffer of the whole module
(``deepspeed.comm.all_gather_into_tensor``). Over gloo, both
``all_gather_into_tensor`` and ``all_gather`` first gather into a flat tensor of gloo's own of the
same size and then copy it out, so every gather of a module held the module twice: for a 128 MiB
gather a rank's peak grew by 259 MiB with either call (2 gloo ranks, torch 2.13). On the issue's
375M Llama the largest modules, its embedding and output layer, are 125 MiB each (8.8% of it),
gathered in every step. :func:`chunked_gloo_gathers` makes the gathers above
:data:`SLICE_BYTES` go in slices straight into DeepSpeed's buffer (gloo's copy is then a slice),
synchronously (the handle's ``wait`` returns at once); NCCL and GPU buffers keep DeepSpeed's call.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SLICE_BYTES", "chunked_gloo_gathers", "sliced_all_gather", "sliced_so_far"]

_SLICED = [0]  # gathers made in slices in this process

#: the bytes one slice of a gather spans over every rank (gloo's own copy holds one); a test may
#: set ``FTTUI_GATHER_SLICE_BYTES`` to slice a tiny model's gathers too
SLICE_BYTES = 8 << 20


def _slice_bytes() -> int:
    import os

    text = os.environ.get("FTTUI_GATHER_SLICE_BYTES", "")
    return int(text) if text.isdigit() and int(text) > 0 else SLICE_BYTES


class _Done:
    """The handle of a gather that is over (DeepSpeed waits on it)."""

    def wait(self) -> None:
        return None

    def is_completed(self) -> bool:
        return True


def sliced_all_gather(output: Any, part: Any, group: Any = None, slice_bytes: int = SLICE_BYTES) -> None:
    """``all_gather_into_tensor(output, part)`` over ``group``, in slices of at most
    ``slice_bytes`` over all ranks: rank ``r``'s part lands at ``output[r * n:(r + 1) * n]``."""
    import torch.distributed as dist

    world = dist.get_world_size(group)
    src, out = part.reshape(-1), output.reshape(-1)
    n = src.numel()
    step = max(1, slice_bytes // (src.element_size() * world))
    for c in range(0, n, step):
        k = min(step, n - c)
        dist.all_gather([out.narrow(0, r * n + c, k) for r in range(world)], src.narrow(0, c, k), group=group)


def chunked_gloo_gathers(applies: bool) -> bool:
    """From here to the end of the process, DeepSpeed's gathers into one tensor
    (``deepspeed.comm.all_gather_into_tensor``: the steps' module gathers through ``allgather_fn``
    and ``GatheredParameters`` while a checkpoint is loaded) go in slices over gloo when they span
    more than :data:`SLICE_BYTES` (or ``FTTUI_GATHER_SLICE_BYTES``); True when set. A no-op
    without DeepSpeed."""
    if not applies:
        return False
    try:
        import deepspeed.comm as ds_comm
        from deepspeed.comm import comm as ds_comm_module
    except ImportError:
        return False
    import torch.distributed as dist

    original = getattr(ds_comm_module, "all_gather_into_tensor", None)
    if original is None:
        return False
    if getattr(original, "fttui_sliced", False):
        return True
    limit = _slice_bytes()

    def all_gather_into_tensor(output_tensor, tensor, group=None, async_op=False, **kw):
        world = dist.get_world_size(group)
        n = tensor.numel()
        if (
            output_tensor.device.type != "cpu"
            or dist.get_backend(group) != "gloo"
            or output_tensor.numel() != n * world
            or n * tensor.element_size() * world <= limit
        ):
            return original(output_tensor, tensor, group=group, async_op=async_op, **kw)
        sliced_all_gather(output_tensor, tensor, group, slice_bytes=limit)
        _SLICED[0] += 1
        return _Done() if async_op else None

    vars(all_gather_into_tensor)["fttui_sliced"] = True  # a function's attribute: the mark read above
    ds_comm_module.all_gather_into_tensor = all_gather_into_tensor  # allgather_fn's
    ds_comm.all_gather_into_tensor = all_gather_into_tensor  # dist.all_gather_into_tensor of ZeRO-3
    return True


def sliced_so_far() -> int | None:
    """Gathers this process made in slices; None when DeepSpeed's gathers are its own."""
    import sys

    comm = sys.modules.get("deepspeed.comm")
    if comm is None or not getattr(getattr(comm, "all_gather_into_tensor", None), "fttui_sliced", False):
        return None
    return _SLICED[0]
