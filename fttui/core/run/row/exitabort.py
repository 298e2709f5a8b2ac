"""A process that aborted at its exit after its training ended: C++'s ``terminate called without
an active exception`` in the log, the command's exit not 0, every reporting rank's end event
folded. PyTorch's own finalisation does this to a rank whose gloo (or NCCL) process group is still
alive when the interpreter exits (``destroy_process_group`` alone only unregisters the group:
a DDP wrapper's reducer keeps it until the interpreter finalises): the training completed, the
launcher then ended the other ranks and exited 1. The row stays ``failed`` (the command failed:
its exit code says so), with the words that tell what happened and what the script can do.
Seen in this project's torchrun tests in about one run of sixteen on a loaded machine; fttui's
own worker releases the model and destroys the group before it exits (``fttui.worker.train``).

Pure (plus :func:`in_log`, which reads a log's tail).
"""

from __future__ import annotations

from pathlib import Path

from fttui.core.base.bounded import read_tail

__all__ = ["ABORT_LINE", "in_log", "text"]

#: what the C++ runtime prints when it aborts a process with a live thread at exit
ABORT_LINE = b"terminate called without an active exception"
_TAIL = 64 * 1024


def in_log(path: Path, tail: int = _TAIL) -> bool:
    """Whether the log's last ``tail`` bytes hold :data:`ABORT_LINE`."""
    data = read_tail(path, tail)
    return data is not None and ABORT_LINE in data


def text(rc: int | None) -> str:
    """The status's error for such a run."""
    return (
        f"exit code {rc}: a process aborted at its exit after its training ended (terminate called "
        "without an active exception: a torch.distributed process group left to the interpreter's "
        "exit; release the model and optimizer, then call torch.distributed.destroy_process_group())"
    )
