"""The worker's exit codes and OOM classification (stdlib only; torch checked lazily).

Bad configuration or data is any :class:`~fttui.core.base.errors.FttuiError` (the core's one error
base, ``WorkerInputError`` here): the run cannot start, exit code 2, ``str()`` is one line.
"""

from __future__ import annotations

import sys

from fttui.core.base.constants import EXIT_BAD_INPUT, EXIT_ERROR, EXIT_OK, EXIT_OOM
from fttui.core.base.errors import ConfigError, DataError, FttuiError

WorkerInputError = FttuiError


def _chain(exc: BaseException | None):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _is_torch_oom(exc: BaseException) -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    for name in ("OutOfMemoryError",):
        cls = getattr(torch, name, None) or getattr(getattr(torch, "cuda", None), name, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return True
    return False


def classify(exc: BaseException) -> tuple[str, str | None]:
    """Return ``(kind, oom_kind)``: ``("oom", "cuda"|"cpu"|"nccl"|"bnb")`` or ``("error", None)``.

    The exception and its cause/context chain are inspected (type and message).
    """
    for e in _chain(exc):
        if isinstance(e, WorkerInputError):
            return ("error", None)
        msg = str(e)
        low = msg.lower()
        mod = type(e).__module__ or ""
        # CPU first: a CPU allocation failure may also be raised as torch.OutOfMemoryError.
        if "defaultcpuallocator: can't allocate memory" in low or isinstance(e, MemoryError):
            return ("oom", "cpu")
        if "nccl" in low and ("out of memory" in low or "cudaerrormemoryallocation" in low):
            return ("oom", "nccl")
        if _is_torch_oom(e) or "cuda out of memory" in low or "cuda error: out of memory" in low:
            return ("oom", "cuda")
        if ("bitsandbytes" in mod or "bitsandbytes" in low or "bnb" in low) and "memory" in low:
            return ("oom", "bnb")
    return ("error", None)


def exit_code_for(exc: BaseException) -> int:
    if isinstance(exc, WorkerInputError):
        return EXIT_BAD_INPUT
    kind, _ = classify(exc)
    return EXIT_OOM if kind == "oom" else EXIT_ERROR


def one_line(exc: BaseException, limit: int = 500) -> str:
    """First non-empty line of ``str(exc)`` prefixed with the type name, trimmed to ``limit`` chars."""
    text = str(exc).strip()
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if isinstance(exc, WorkerInputError):
        line = first or type(exc).__name__
    else:
        line = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


__all__ = [
    "EXIT_OK",
    "EXIT_ERROR",
    "EXIT_BAD_INPUT",
    "EXIT_OOM",
    "WorkerInputError",
    "ConfigError",
    "DataError",
    "classify",
    "exit_code_for",
    "one_line",
]
