"""What held a card's memory at a CUDA out of memory: the caching allocator's history, recorded
while it matters, and its snapshot saved in the run directory at the out of memory.

On a card (CUDA present; nothing is done on CPU ranks) :func:`start` turns on
``torch.cuda.memory._record_memory_history`` with :data:`ON`: ``enabled="all"`` (the trace of
the allocator's actions, at most :data:`MAX_ENTRIES` entries, the out of memory's own among
them), ``context="state"`` (a stack for each live block, none kept in the trace: the snapshot
symbolizes the live blocks' frames only, which keeps the dump at the out of memory short; C++
frames of a long trace take minutes to symbolize), ``stacks="all"`` (C++ frames too: the
backward runs on the autograd engine's device thread, where no Python frame is). After the
profile's ``train.memory_history_steps`` optimizer steps (0: never on) :class:`StopAfter` sets
:data:`FRAMES_OFF` (``context=None``: no stack for later allocations, so they cost nothing; the
trace goes on and nothing recorded is cleared, as ``enabled=None`` would). A probe trial
(``command.json``'s kind ``probe``) and an attempt that recovers from an out of memory (its
``attempt``) keep the frames for the whole run: they exist to run out of memory. Blocks
allocated after the frames went off have none; they are still classed when they are a
parameter, gradient or optimizer state.

:func:`dump_at_oom` (the worker's error path, CUDA out of memory only) takes
``torch.cuda.memory._snapshot()`` and, in the same moment, the storages of the rank's
parameters, gradients and optimizer states, and writes them as ``memory_snapshot.pickle`` and
``memory_tensors.json`` (:mod:`fttui.core.run.files.memsnap`; the first rank to fail writes
them). The row's ``oom_held`` reads them (:mod:`fttui.core.run.row.oomheld`).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from transformers import TrainerCallback

from fttui.core.profiles.typed import Profile
from fttui.core.run.files.memsnap import TensorRanges, write_snapshot, write_tensor_ranges
from fttui.core.run.files.rundir import RunDir

__all__ = [
    "MAX_ENTRIES",
    "ON",
    "FRAMES_OFF",
    "history_steps",
    "start",
    "frames_off",
    "StopAfter",
    "dump_at_oom",
    "tensor_ranges",
]

#: the bound of the recorded trace (torch: "expect each entry to be several KB" with its stack)
MAX_ENTRIES = 20_000
#: the recording while the frames matter, and after (the module's docstring)
ON: dict[str, Any] = {"enabled": "all", "context": "state", "stacks": "all", "max_entries": MAX_ENTRIES}
FRAMES_OFF: dict[str, Any] = {**ON, "context": None}
ADAPTER_TERM = "lora"  # the estimate's term of an adapter's parameters, gradients and states


def history_steps(profile: Profile, run_dir: str) -> int | None:
    """How many optimizer steps to record: ``None`` for the whole run (a probe trial, an attempt
    that recovers from an out of memory), else ``train.memory_history_steps`` (0: off)."""
    rd = RunDir(run_dir)
    cmd = rd.command()
    if rd.kind_and_group()[0] == "probe" or (cmd is not None and cmd.attempt is not None):
        return None
    return max(0, int(profile.train.memory_history_steps))


def _cuda() -> bool:
    return bool(torch.cuda.is_available())


def start(steps: int | None) -> bool:
    """Turn the allocator's history on (a card, ``steps`` not 0); whether it is on."""
    if steps == 0 or not _cuda():
        return False
    torch.cuda.memory._record_memory_history(**ON)
    return True


def frames_off() -> None:
    torch.cuda.memory._record_memory_history(**FRAMES_OFF)


class StopAfter(TrainerCallback):
    """Turns the frames off at the end of optimizer step ``steps``."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.on = True

    def on_step_end(self, args, state, control, **kwargs):
        if self.on and state.global_step >= self.steps:
            frames_off()
            self.on = False


def _innermost(opt: Any) -> Any:
    for _ in range(6):
        inner = getattr(opt, "optimizer", None)
        if inner is None or inner is opt:
            break
        opt = inner
    return opt


def tensor_ranges(model: Any, optimizer: Any, adapters: bool, device_type: str = "cuda") -> TensorRanges:
    """The storages on ``device_type`` of ``model``'s parameters and gradients and the states of
    ``optimizer`` (below accelerate's and DeepSpeed's wrappers), each with its estimate term: an
    adapter run's trainable parameters, their gradients and states are the LoRA term, its frozen
    parameters the weights; otherwise ``weights``, ``gradients``, ``optimizer_states``."""
    seen: dict[int, tuple[int, int, str]] = {}
    trainable: set[int] = set()

    def add(t: Any, term: str) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type != device_type:
            return
        st = t.untyped_storage()
        ptr, size = int(st.data_ptr()), int(st.nbytes())
        if ptr and size and ptr not in seen:
            seen[ptr] = (ptr, size, term)

    params = list(model.named_parameters()) if model is not None else []
    for _, p in params:
        if p.requires_grad:
            trainable.add(id(p))
        add(p, ADAPTER_TERM if adapters and p.requires_grad else "weights")
    for _, p in params:
        if p.grad is not None:
            add(p.grad, ADAPTER_TERM if adapters else "gradients")
    opt = _innermost(optimizer)
    for p, state in (getattr(opt, "state", None) or {}).items():
        if isinstance(state, dict):
            for v in state.values():
                add(v, ADAPTER_TERM if adapters and id(p) in trainable else "optimizer_states")
    dev = f"{device_type}:{torch.cuda.current_device()}" if device_type == "cuda" and _cuda() else device_type
    return TensorRanges(tuple(sorted(seen.values())), dev, time.time())


def dump_at_oom(run_dir: str, trainer: Any, profile: Profile, log=None) -> bool:
    """At a CUDA out of memory: the snapshot and the tensors' storages into the run directory
    (not when another rank wrote them first); whether they were written. Never raises."""
    try:
        if not _cuda():
            return False
        rd = RunDir(run_dir)
        if rd.snapshot_path.exists():
            return False
        snap = torch.cuda.memory._snapshot()
        model = getattr(trainer, "model", None) if trainer is not None else None
        ranges = tensor_ranges(model, getattr(trainer, "optimizer", None), profile.method_kind().adapters)
        write_tensor_ranges(rd.tensors_path, ranges)
        write_snapshot(rd.snapshot_path, snap)
        if log is not None:
            log(f"memory snapshot at the out of memory: {rd.snapshot_path.name} ({len(ranges.ranges)} tensors classed)")
        return True
    except Exception as e:  # evidence only: the error event still goes out
        if log is not None:
            log(f"memory snapshot not saved: {e!r}"[:300])
        return False
