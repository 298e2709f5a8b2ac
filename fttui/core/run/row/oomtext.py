"""Out-of-memory errors read from a command's output (``train.log``), for runs fttui did not write
the training of (``fttui run -- CMD``): the worker reports its own OOMs as ``error`` events, a
command only prints them. The same kinds as the worker's (``fttui.worker.errors.classify``):
``cpu`` (a host allocation failed: torch's CPU allocator, Python's ``MemoryError``, C++'s
``std::bad_alloc``), ``nccl``, ``cuda`` and ``bnb``. Stdlib only."""

from __future__ import annotations

from pathlib import Path

from fttui.core.base.bounded import read_tail

__all__ = ["oom_in_text", "oom_in_log", "TAIL_BYTES"]

#: How much of the end of the log is read: a traceback and what follows it.
TAIL_BYTES = 64 * 1024


def _kind(line: str) -> str | None:
    low = line.lower()
    if (
        "defaultcpuallocator: can't allocate memory" in low
        or "std::bad_alloc" in low
        or line.lstrip().startswith("MemoryError")
        or "builtins.MemoryError" in line
    ):
        return "cpu"
    if "nccl" in low and ("out of memory" in low or "cudaerrormemoryallocation" in low):
        return "nccl"
    if "outofmemoryerror" in low or "cuda out of memory" in low or "cuda error: out of memory" in low:
        return "cuda"
    if "bitsandbytes" in low and "out of memory" in low:
        return "bnb"
    return None


def oom_in_text(text: str) -> tuple[str, str] | None:
    """``(oom_kind, the line that says it)`` for the last OOM the text reports, else ``None``.
    A CPU allocation failure wins over a CUDA one in the same line (torch raises host failures as
    ``OutOfMemoryError`` too)."""
    for line in reversed(text.splitlines()):
        kind = _kind(line)
        if kind is not None:
            return kind, line.strip()[:300]
    return None


def oom_in_log(path: Path, tail: int = TAIL_BYTES) -> tuple[str, str] | None:
    """:func:`oom_in_text` of the end of a log file; ``None`` when it cannot be read."""
    data = read_tail(path, tail)
    if data is None:
        return None
    # progress bars redraw with carriage returns: each redraw is a line of its own
    return oom_in_text(data.decode("utf-8", "replace").replace("\r", "\n"))
