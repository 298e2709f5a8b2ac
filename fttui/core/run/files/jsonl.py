"""Reading JSON-lines files (``events.jsonl``, ``samples.jsonl``) that other processes append
to: a tolerant incremental reader, a whole-file reader and a reader of a long file's two ends.
Only stdlib. Lines as JSON objects: an event line becomes its typed record in
:mod:`fttui.core.run.files.events` (which re-exports these), a resource sample its record in
:mod:`fttui.core.run.files.sample_records`; docs/architecture.md, "Monitor core".
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

R = TypeVar("R")

__all__ = ["JsonlTail", "RecordTail", "read_jsonl", "read_head_tail", "parse_line"]

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


def read_head_tail(path: str | os.PathLike[str], head_bytes: int, tail_bytes: int) -> list[dict[str, Any]]:
    """The complete JSON objects of the first ``head_bytes`` and the last ``tail_bytes`` of a
    JSON-lines file (the whole file when it is that small), in file order. Lines cut by either
    window and lines that are not JSON objects are left out; a missing file gives ``[]``."""
    try:
        fd = os.open(os.fspath(path), os.O_RDONLY)
    except OSError:
        return []
    try:
        size = os.fstat(fd).st_size
        if size <= head_bytes + tail_bytes:
            chunks = [os.pread(fd, size, 0)]
        else:
            head = os.pread(fd, head_bytes, 0)
            tail = os.pread(fd, tail_bytes, size - tail_bytes)
            chunks = [head[: head.rfind(b"\n") + 1], tail[tail.find(b"\n") + 1 :]]
    except OSError:
        return []
    finally:
        os.close(fd)
    out: list[dict[str, Any]] = []
    for chunk in chunks:
        for raw in chunk.split(b"\n"):
            obj = parse_line(raw) if raw.strip() else None
            if obj is not None:
                out.append(obj)
    return out


class RecordTail(Generic[R]):
    """The records another process appended to a JSON-lines file since the last :meth:`read_new`,
    each line made a record by ``parse`` (:class:`JsonlTail`'s tolerance: a partial last line
    waits for its newline, corrupt lines are skipped and counted in ``corrupt``, a file that shrank
    or was replaced is read again from the start). The event and sample tails are its two kinds."""

    def __init__(self, path: str | os.PathLike[str], parse: Callable[[list[dict[str, Any]]], Iterable[R]]) -> None:
        self.lines = JsonlTail(path)
        self._parse = parse

    @property
    def path(self) -> str:
        return self.lines.path

    @property
    def corrupt(self) -> int:
        return self.lines.corrupt

    def reset(self) -> None:
        self.lines.reset()

    def read_new(self) -> list[R]:
        return list(self._parse(self.lines.read_new()))
