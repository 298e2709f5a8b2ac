"""Input read within bounds (issue 28): a file that is not a regular file (``/dev/zero``, a pipe)
or too large is refused, and a parsed document (YAML with aliases) is walked with a node budget,
so that no input makes fttui read forever or expand without end. Errors are ``ValueError`` with
one line; callers name the file."""

from __future__ import annotations

import math
import os
import stat

#: A profile or a training config (a few KiB in practice).
MAX_CONFIG_BYTES = 4 << 20
#: An export file to import (rows of many machines).
MAX_IMPORT_BYTES = 512 << 20
#: Values in one parsed config, aliases expanded (a YAML alias bomb expands to billions).
MAX_NODES = 200_000


def read_text(path: str | os.PathLike[str], limit: int) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes (ValueError otherwise;
    OSError and UnicodeDecodeError as they come)."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("not a regular file (a device, pipe or folder); give a file")
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit >> 20} MiB; not a file fttui reads")
    return data.decode("utf-8")


def read_tail(path: str | os.PathLike[str], size: int) -> bytes | None:
    """The last ``size`` bytes of a file (a log's end, whatever its length); ``None`` when it
    cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - size))
            return f.read(size)
    except OSError:
        return None


def check_tree(obj: object, max_nodes: int = MAX_NODES) -> None:
    """Walk a parsed document: ValueError when it holds more than ``max_nodes`` values (shared
    aliases count each time they are used) or a number that is not finite (``.inf``, ``.nan``)."""
    todo, seen = [obj], 0
    while todo:
        node = todo.pop()
        seen += 1
        if seen > max_nodes:
            raise ValueError(f"more than {max_nodes} values once aliases are expanded (an alias bomb?); refused")
        if isinstance(node, dict):
            todo.extend(node.values())
            todo.extend(k for k in node if not isinstance(k, str))
        elif isinstance(node, (list, tuple)):
            todo.extend(node)
        elif isinstance(node, float) and not math.isfinite(node):
            raise ValueError(f"{node} is not a finite number")


__all__ = ["MAX_CONFIG_BYTES", "MAX_IMPORT_BYTES", "MAX_NODES", "read_text", "read_tail", "check_tree"]
