"""Reading JSON-lines files (``events.jsonl``, ``samples.jsonl``) that other processes append
to: a tolerant incremental reader and a whole-file reader. Only stdlib. Re-exported by
:mod:`fttui.core.run.events` (the writer and the typed event records); docs/architecture.md,
"Monitor core".
"""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["JsonlTail", "read_jsonl", "parse_line"]

_READ_CHUNK = 1 << 20


def parse_line(raw: bytes) -> dict[str, Any] | None:
    """Parse one line (without or with its newline); ``None`` if it is not a JSON object.

    Invalid UTF-8, invalid JSON and JSON values that are not objects all give ``None``.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    text = text.strip()
    if not text:
        return None
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


class JsonlTail:
    """Incremental reader of a JSON-lines file that another process appends to.

    ``read_new()`` returns the complete objects appended since the last call. It keeps the byte
    offset between calls (opening, seeking, reading and closing the file each time, so a deleted
    or recreated file is handled), buffers a trailing partial line until its newline arrives,
    skips lines that are not JSON objects (counted in ``corrupt``) and starts over from the
    beginning when the file shrank or was replaced (different inode). A missing file gives ``[]``.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.offset = 0  # bytes consumed (including the buffered partial line)
        self.corrupt = 0  # lines skipped since creation (also across restarts)
        self.restarts = 0  # times the file was found truncated or replaced
        self._partial = b""
        self._ident: tuple[int, int] | None = None  # (st_dev, st_ino) of the file being read

    def reset(self) -> None:
        """Forget the position: the next ``read_new()`` reads the file from the start."""
        self.offset = 0
        self._partial = b""
        self._ident = None

    def read_new(self) -> list[dict[str, Any]]:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return []
        try:
            try:
                st = os.fstat(fd)
            except OSError:
                return []
            ident = (st.st_dev, st.st_ino)
            if self._ident is not None and (ident != self._ident or st.st_size < self.offset):
                self.restarts += 1
                self.offset = 0
                self._partial = b""
            elif self._ident is None and st.st_size < self.offset:
                self.offset = 0
                self._partial = b""
            self._ident = ident
            if st.st_size == self.offset:
                return []
            chunks: list[bytes] = []
            try:
                os.lseek(fd, self.offset, os.SEEK_SET)
                while True:
                    chunk = os.read(fd, _READ_CHUNK)
                    if not chunk:
                        break
                    chunks.append(chunk)
            except OSError:
                pass
        finally:
            os.close(fd)
        if not chunks:
            return []
        data = b"".join(chunks)
        self.offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()  # b"" when data ended with a newline
        out: list[dict[str, Any]] = []
        for raw in lines:
            if not raw.strip():
                continue
            obj = parse_line(raw)
            if obj is None:
                self.corrupt += 1
            else:
                out.append(obj)
        return out

    @property
    def pending(self) -> bytes:
        """The buffered partial last line (no newline yet)."""
        return self._partial


def read_jsonl(path: str | os.PathLike[str], *, include_partial: bool = True) -> list[dict[str, Any]]:
    """Read every JSON object of a whole file, skipping corrupt lines; missing file -> ``[]``.

    With ``include_partial`` (default) a last line without newline is parsed too (a finished file
    whose writer omitted the final newline); it is skipped silently if it does not parse.
    """
    tail = JsonlTail(path)
    out = tail.read_new()
    if include_partial and tail.pending.strip():
        obj = parse_line(tail.pending)
        if obj is not None:
            out.append(obj)
    return out
