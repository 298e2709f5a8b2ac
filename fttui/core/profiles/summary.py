"""The one-line figures of a profile that ``fttui profiles`` and the picker show.

:func:`profile_summary` reads a resolved profile (model label, method, batch, devices, data);
its effective batch is :meth:`fttui.core.profiles.typed.Profile.effective_batch`, the one
definition.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fttui.core.profiles.typed import Profile


def sharding_label(prof: Profile) -> str:
    """The sharding in words: ``zero3-offload (DeepSpeed ZeRO-3; optimizer states, parameters on
    the host)``, ``none (DDP over 2 processes)``..."""
    kind, ds = prof.sharding_kind(), prof.deepspeed
    if not kind.sharded:
        procs = prof.world_size()
        return f"{kind} (DDP over {procs} processes)" if procs > 1 else str(kind)
    if kind.deepspeed:
        host = []
        if kind.offload:
            host = (["optimizer states"] if ds.offload_optimizer else []) + (
                ["parameters"] if kind.zero3 and ds.offload_params else []
            )
        return f"{kind} (DeepSpeed ZeRO-{kind.stage}" + (f"; {', '.join(host)} on the host)" if host else ")")
    return f"{kind} (PyTorch FSDP2" + (
        "; parameters, gradients, optimizer states on the host)" if kind.offload else ")"
    )


def profile_summary(prof: Profile) -> dict[str, Any]:
    """The figures ``fttui profiles`` shows for one resolved profile."""
    model, data, train, devices = prof.model, prof.data, prof.train, prof.devices
    label = str(model.name_or_path)
    if os.path.isabs(label):
        label = Path(label).name
    return {
        "name": prof.name,
        "description": prof.description,
        "model": label,
        "method": prof.method,
        "sharding": prof.sharding_asked(),
        "batch_size": train.batch_size,
        "grad_accum": train.grad_accum,
        "gpus": devices.gpus,
        "nodes": devices.nodes,
        "effective_batch": prof.effective_batch().effective,
        "max_seq_len": data.max_seq_len,
        "dataset": data.name,
        "source": prof.source,
        "origin": prof.origin,
    }


__all__ = ["profile_summary", "sharding_label"]
