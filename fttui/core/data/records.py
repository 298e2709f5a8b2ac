"""Torch-free loading and validation of instruction / chat data files (.json list or .jsonl).

``load_records(path, fmt)`` returns normalised records and raises :class:`DataError` with a one-line
message naming the file, the line and what is wrong. The launcher reuses it for a fast fail.

Both formats are read in bounded pieces (``iter_records``): a ``.jsonl`` file a line at a time, a
``.json`` list an element at a time, each sample at most ``max_sample_bytes``
(:data:`fttui.core.base.constants.MAX_SAMPLE_BYTES`): a larger one is refused, naming its line, after
reading no more than the bound of it. Only regular files are read (a named pipe would block).

Record shapes returned:
  instruction: ``{"format": "instruction", "instruction": str, "input": str, "output": str, "line": int}``
  chat:        ``{"format": "chat", "messages": [{"role": str, "content": str}, ...], "line": int}``
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from typing import Any, BinaryIO

from fttui.core.base.constants import MAX_SAMPLE_BYTES
from fttui.core.base.errors import DataError

FORMATS = ("auto", "instruction", "chat")
EXTENSIONS = (".json", ".jsonl")
CHUNK = 1 << 20  # bytes read at a time from a .json file
_NON_WS = re.compile(rb"[^ \t\r\n]")
_STRUCT = re.compile(rb'["\[\]{},]')  # outside strings: what begins or ends a value
_STRING_BODY = re.compile(rb'(?:[^"\\]++|\\.)*+', re.S)  # up to a string's closing quote


def _detect(obj: dict[str, Any]) -> str | None:
    if "messages" in obj:
        return "chat"
    if "instruction" in obj or "output" in obj:
        return "instruction"
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(val: str, where: str, field: str) -> None:
    """A JSON escape of half a UTF-16 pair (``"\\ud800"``) parses to a string no tokenizer can
    encode (UnicodeEncodeError in the worker, after the launch): refused here, in one line."""
    m = _SURROGATE.search(val)
    if m:
        raise DataError(
            None,
            f"{where}: field {field} holds a lone surrogate {m.group(0)!r} (half a UTF-16 pair), "
            "not text; mend the file",
        )


def _check(obj: Any, fmt: str, where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise DataError(None, f"{where}: expected a JSON object, got {type(obj).__name__}")
    if fmt == "instruction":
        missing = [k for k in ("instruction", "output") if k not in obj]
        if missing:
            raise DataError(
                None,
                f"{where}: missing field(s) {', '.join(repr(m) for m in missing)} "
                "(instruction format needs instruction, output and optional input)",
            )
        out = {"format": "instruction"}
        for key in ("instruction", "input", "output"):
            val = obj.get(key, "")
            if val is None:
                val = ""
            if not isinstance(val, str):
                raise DataError(None, f"{where}: field {key!r} must be a string, got {type(val).__name__}")
            _text(val, where, repr(key))
            out[key] = val
        if not out["output"]:
            raise DataError(None, f"{where}: field 'output' is empty")
        return out
    # chat
    msgs = obj.get("messages")
    if msgs is None:
        raise DataError(None, f"{where}: missing field 'messages' (chat format needs a list of {{role, content}})")
    if not isinstance(msgs, list) or not msgs:
        raise DataError(None, f"{where}: field 'messages' must be a non-empty list")
    norm = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise DataError(None, f"{where}: messages[{i}] must be an object with role and content")
        for key in ("role", "content"):
            if key not in m:
                raise DataError(None, f"{where}: messages[{i}] is missing field {key!r}")
            if not isinstance(m[key], str):
                raise DataError(None, f"{where}: messages[{i}].{key} must be a string, got {type(m[key]).__name__}")
            _text(m[key], where, f"messages[{i}].{key}")
        norm.append({"role": m["role"], "content": m["content"]})
    if not any(m["role"] == "assistant" for m in norm):
        raise DataError(None, f"{where}: no message with role 'assistant' (nothing to train on)")
    return {"format": "chat", "messages": norm}


def _record(obj: Any, chosen: str | None, where: str, lineno: int) -> tuple[dict[str, Any], str]:
    """One checked record and the format (detected from the first record when ``chosen`` is None)."""
    if chosen is None:
        if not isinstance(obj, dict):
            raise DataError(None, f"{where}: expected a JSON object, got {type(obj).__name__}")
        chosen = _detect(obj)
        if chosen is None:
            keys = ", ".join(sorted(obj)[:6]) or "none"
            raise DataError(
                None,
                f"{where}: cannot detect the data format (keys: {keys}); expected instruction/input/output or messages",
            )
    rec = _check(obj, chosen, where)
    rec["line"] = lineno
    return rec, chosen


def _open(path: str) -> BinaryIO:
    """The data file opened for reading, or a one-line :class:`DataError`. Opened without blocking
    and checked to be a regular file: a named pipe's open or read would wait for a writer forever."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise DataError(None, f"{path}: data file not found") from None
    except OSError as e:
        raise DataError(None, f"{path}: cannot read data file ({e.strerror or e})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise DataError(None, f"{path}: is a directory, expected a .json or .jsonl file")
        raise DataError(
            None,
            f"{path}: not a regular file (a named pipe, device or socket): data.source "
            "must name a .json or .jsonl file",
        )
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def check_file(path: str | os.PathLike[str]) -> None:
    """A one-line :class:`DataError` unless ``path`` is a regular file that can be opened (never
    waits on a named pipe)."""
    _open(os.fspath(path)).close()


def _too_large(where: str, cap: int) -> DataError:
    return DataError(
        None,
        f"{where}: one sample is larger than {_size(cap)}, fttui's bound for a sample (only its "
        "first data.max_seq_len tokens could train: cut it to its head or split it into several "
        "samples)",
    )


def _size(n: int) -> str:
    for shift, unit in ((20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and not n % (1 << shift):
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def _loads(text: str, where: str, what: str = "malformed JSON line") -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise DataError(None, f"{where}: {what} ({getattr(e, 'msg', e)})") from None
    except RecursionError:
        raise DataError(None, f"{where}: {what} (nested too deeply)") from None


def _jsonl_items(f: BinaryIO, path: str, cap: int) -> Iterator[tuple[int, Any, int]]:
    """``(line, value, bytes read)`` of each non-blank line, none of whose lines over ``cap``
    bytes is read further than ``cap + 1`` bytes."""
    done = 0
    lineno = 0
    while True:
        raw = f.readline(cap + 1)
        if not raw:
            return
        lineno += 1
        done += len(raw)
        if len(raw) > cap and not raw.endswith(b"\n"):
            raise _too_large(f"{path}:{lineno}", cap)
        try:
            line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
        except UnicodeDecodeError:
            raise DataError(None, f"{path}:{lineno}: not valid UTF-8") from None
        if line.strip():
            yield lineno, _loads(line, f"{path}:{lineno}"), done


class _JsonList:
    """The elements of a ``.json`` list, read a chunk at a time: the structure (strings, brackets)
    is scanned to find where each element ends, and only the element is parsed, so that memory holds
    one element and a chunk, never the file; an element over ``cap`` bytes is refused."""

    def __init__(self, f: BinaryIO, path: str, cap: int) -> None:
        self.f, self.path, self.cap = f, path, cap
        self.buf = bytearray()
        self.pos = 0  # where scanning goes on
        self.start = 0  # the first byte still needed
        self.cpos, self.cline = 0, 1  # the line of buf[cpos] (counted forwards only)
        self.eof = False
        self.done = 0  # bytes read from the file
        self.empty = False  # nothing but whitespace

    def _more(self) -> bool:
        """One more chunk (the bytes before ``start`` dropped); False at the end of the file."""
        if self.eof:
            return False
        drop = min(self.start, self.cpos)
        if drop:
            del self.buf[:drop]
            self.pos -= drop
            self.start -= drop
            self.cpos -= drop
        chunk = self.f.read(CHUNK)
        if not chunk:
            self.eof = True
            return False
        self.done += len(chunk)
        self.buf += chunk
        return True

    def line(self, i: int) -> int:
        """The line of ``buf[i]`` (``i`` never below an earlier call's)."""
        self.cline += self.buf.count(b"\n", self.cpos, i)
        self.cpos = i
        return self.cline

    def _next_byte(self) -> int | None:
        """Position of the next byte that is not whitespace (from ``pos``); None at the end."""
        while True:
            m = _NON_WS.search(self.buf, self.pos)
            if m:
                self.pos = m.start()
                return self.pos
            self.pos = self.start = len(self.buf)
            if not self._more():
                return None

    def _value_end(self, begin: int) -> int:
        """Where the value at ``begin`` ends, by its structure only (json.loads checks the rest)."""
        depth, in_string = 0, False
        while True:
            if in_string:
                body = _STRING_BODY.match(self.buf, self.pos)
                assert body is not None  # the pattern matches the empty string too
                end = body.end()
                if end < len(self.buf) and self.buf[end] == 0x22:  # the closing quote
                    self.pos, in_string = end + 1, False
                    if not depth:
                        return self.pos
                    continue
                self.pos = end  # the chunk ended in the string (or on a backslash)
            else:
                m = _STRUCT.search(self.buf, self.pos)
                if m:
                    c, self.pos = self.buf[m.start()], m.end()
                    if c == 0x22:
                        in_string = True
                    elif c in b"[{":
                        depth += 1
                    elif not depth:  # a scalar ends before ',' or ']'
                        self.pos = m.start()
                        return len(self.buf[begin : self.pos].rstrip()) + begin
                    elif c in b"]}":
                        depth -= 1
                        if not depth:
                            return self.pos
                    if self.pos - begin > self.cap:
                        raise _too_large(f"{self.path}:{self.line(begin)}", self.cap)
                    continue
                self.pos = len(self.buf)
            if self.pos - begin > self.cap:
                raise _too_large(f"{self.path}:{self.line(begin)}", self.cap)
            if not self._more():
                return len(self.buf)
            begin = self.start

    def items(self) -> Iterator[tuple[int, Any, int]]:
        """``(line, value, bytes read)`` of each element."""
        path = self.path
        while len(self.buf) < 3 and self._more():
            pass
        if self.buf.startswith(b"\xef\xbb\xbf"):
            self.pos = self.start = 3
        first = self._next_byte()
        if first is None:
            self.empty = True
            return
        if self.buf[first] != 0x5B:  # '[': a single JSON value that is not a list, or broken JSON
            head = bytes(self.buf[first:]) + self.f.read(self.cap)
            if len(head) <= self.cap:
                try:
                    json.loads(head.decode("utf-8", "replace"))
                except ValueError as e:
                    raise DataError(
                        None,
                        f"{path}:{self.line(first) + getattr(e, 'lineno', 1) - 1}: malformed "
                        f"JSON ({getattr(e, 'msg', e)})",
                    ) from None
                except RecursionError:
                    raise DataError(None, f"{path}:{self.line(first)}: malformed JSON (nested too deeply)") from None
            raise DataError(None, f"{path}:{self.line(first)}: a .json data file must hold a list of objects")
        self.pos = first + 1
        self.start = self.pos
        at = self._next_byte()
        if at is not None and self.buf[at] == 0x5D:  # ']': an empty list
            self.pos += 1
        else:
            while True:
                begin = self._next_byte()
                if begin is None:
                    raise DataError(
                        None, f"{path}:{self.line(len(self.buf))}: malformed JSON (the list is not closed with ']')"
                    )
                self.start = begin
                lineno = self.line(begin)
                end = self._value_end(begin)
                begin = self.start
                if end - begin > self.cap:
                    raise _too_large(f"{path}:{lineno}", self.cap)
                piece = self.buf[begin:end]
                try:
                    text = piece.decode("utf-8")
                except UnicodeDecodeError as e:
                    bad = lineno + piece.count(b"\n", 0, e.start)
                    raise DataError(None, f"{path}:{bad}: not valid UTF-8") from None
                try:
                    obj = json.loads(text)
                except ValueError as e:
                    raise DataError(
                        None, f"{path}:{lineno + getattr(e, 'lineno', 1) - 1}: malformed JSON ({getattr(e, 'msg', e)})"
                    ) from None
                except RecursionError:
                    raise DataError(None, f"{path}:{lineno}: malformed JSON (nested too deeply)") from None
                del piece, text
                self.pos = self.start = end
                yield lineno, obj, self.done
                sep = self._next_byte()
                if sep is not None and self.buf[sep] == 0x2C:  # ','
                    self.pos = self.start = sep + 1
                    continue
                if sep is not None and self.buf[sep] == 0x5D:
                    self.pos += 1
                    break
                where = len(self.buf) if sep is None else sep
                raise DataError(None, f"{path}:{self.line(where)}: malformed JSON (expected ',' or ']')")
        self.start = self.pos
        extra = self._next_byte()
        if extra is not None:
            raise DataError(None, f"{path}:{self.line(extra)}: malformed JSON (extra data after the list)")


def load_records(
    path: str | os.PathLike[str], fmt: str = "auto", max_sample_bytes: int = MAX_SAMPLE_BYTES
) -> list[dict[str, Any]]:
    """Read and validate a data file; see the module docstring. Raises :class:`DataError`."""
    return [rec for rec, _, _ in iter_records(path, fmt, max_sample_bytes)]


def iter_records(
    path: str | os.PathLike[str], fmt: str = "auto", max_sample_bytes: int = MAX_SAMPLE_BYTES
) -> Iterator[tuple[dict[str, Any], int, int]]:
    """Stream ``(record, bytes_read, total_bytes)``: a ``.jsonl`` file line by line, a ``.json``
    list element by element (a 1 GB file never sits in memory), each sample at most
    ``max_sample_bytes``. One-line :class:`DataError` messages naming the file and line."""
    path = os.fspath(path)
    if fmt not in FORMATS:
        raise DataError(None, f"{path}: unknown data.format {fmt!r} (use one of {', '.join(FORMATS)})")
    if not path.endswith(EXTENSIONS):
        raise DataError(None, f"{path}: unsupported data file type (use .json or .jsonl)")
    chosen = None if fmt == "auto" else fmt
    seen = 0
    with _open(path) as f:
        total = os.fstat(f.fileno()).st_size
        listed = None if path.endswith(".jsonl") else _JsonList(f, path, max_sample_bytes)
        try:
            for lineno, obj, done in _jsonl_items(f, path, max_sample_bytes) if listed is None else listed.items():
                rec, chosen = _record(obj, chosen, f"{path}:{lineno}", lineno)
                seen += 1
                yield rec, done, total
        except OSError as e:
            raise DataError(None, f"{path}: cannot read data file ({e.strerror or e})") from None
    if not seen:  # a .jsonl file without records has blank lines only
        raise DataError(
            None,
            f"{path}: data file holds no records"
            if listed is not None and not listed.empty
            else f"{path}: data file is empty",
        )
