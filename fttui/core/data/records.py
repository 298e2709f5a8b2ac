"""Torch-free loading and validation of instruction / chat data files (.json list or .jsonl).

``load_records(path, fmt)`` returns normalised records and raises :class:`DataError` with a one-line
message naming the file, the line and what is wrong. The launcher reuses it for a fast fail.

Record shapes returned:
  instruction: ``{"format": "instruction", "instruction": str, "input": str, "output": str, "line": int}``
  chat:        ``{"format": "chat", "messages": [{"role": str, "content": str}, ...], "line": int}``
"""

from __future__ import annotations

import json
import os
from typing import Any

from fttui.core.base.errors import DataError

FORMATS = ("auto", "instruction", "chat")
EXTENSIONS = (".json", ".jsonl")


def _detect(obj: dict[str, Any]) -> str | None:
    if "messages" in obj:
        return "chat"
    if "instruction" in obj or "output" in obj:
        return "instruction"
    return None


def _check(obj: Any, fmt: str, where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise DataError(None, f"{where}: expected a JSON object, got {type(obj).__name__}")
    if fmt == "instruction":
        missing = [k for k in ("instruction", "output") if k not in obj]
        if missing:
            raise DataError(None, f"{where}: missing field(s) {', '.join(repr(m) for m in missing)} "
                            "(instruction format needs instruction, output and optional input)")
        out = {"format": "instruction"}
        for key in ("instruction", "input", "output"):
            val = obj.get(key, "")
            if val is None:
                val = ""
            if not isinstance(val, str):
                raise DataError(None, f"{where}: field {key!r} must be a string, got {type(val).__name__}")
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
        norm.append({"role": m["role"], "content": m["content"]})
    if not any(m["role"] == "assistant" for m in norm):
        raise DataError(None, f"{where}: no message with role 'assistant' (nothing to train on)")
    return {"format": "chat", "messages": norm}


def _raw_items(path: str, text: str) -> list[tuple[int, Any]]:
    """(line number, parsed value) pairs of a .jsonl or .json file."""
    items: list[tuple[int, Any]] = []
    if path.endswith(".jsonl"):
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                items.append((lineno, json.loads(line)))
            except ValueError as e:
                msg = getattr(e, "msg", str(e))
                raise DataError(None, f"{path}:{lineno}: malformed JSON line ({msg})") from None
        return items
    # .json: a list of objects; find each element's line with raw_decode.
    dec = json.JSONDecoder()
    n = len(text)
    i = 0

    def skip_ws(j: int) -> int:
        while j < n and text[j] in " \t\r\n":
            j += 1
        return j

    def line_of(j: int) -> int:
        return text.count("\n", 0, j) + 1

    i = skip_ws(i)
    if i >= n or text[i] != "[":
        # maybe a single valid JSON value that is not a list
        try:
            json.loads(text)
        except ValueError as e:
            raise DataError(None, f"{path}:{getattr(e, 'lineno', 1)}: malformed JSON ({getattr(e, 'msg', e)})") from None
        raise DataError(None, f"{path}:1: a .json data file must hold a list of objects")
    i = skip_ws(i + 1)
    if i < n and text[i] == "]":
        return items
    while True:
        i = skip_ws(i)
        try:
            obj, end = dec.raw_decode(text, i)
        except ValueError as e:
            raise DataError(None, f"{path}:{line_of(getattr(e, 'pos', i))}: malformed JSON ({getattr(e, 'msg', e)})") from None
        items.append((line_of(i), obj))
        i = skip_ws(end)
        if i < n and text[i] == ",":
            i += 1
            continue
        if i < n and text[i] == "]":
            break
        raise DataError(None, f"{path}:{line_of(i)}: malformed JSON (expected ',' or ']')")
    if skip_ws(i + 1) < n:
        raise DataError(None, f"{path}:{line_of(skip_ws(i + 1))}: malformed JSON (extra data after the list)")
    return items


def _record(obj: Any, chosen: str | None, where: str, lineno: int) -> tuple[dict[str, Any], str]:
    """One checked record and the format (detected from the first record when ``chosen`` is None)."""
    if chosen is None:
        if not isinstance(obj, dict):
            raise DataError(None, f"{where}: expected a JSON object, got {type(obj).__name__}")
        chosen = _detect(obj)
        if chosen is None:
            keys = ", ".join(sorted(obj)[:6]) or "none"
            raise DataError(None, f"{where}: cannot detect the data format (keys: {keys}); expected "
                            "instruction/input/output or messages")
    rec = _check(obj, chosen, where)
    rec["line"] = lineno
    return rec, chosen


def _open(path: str):
    """The data file opened for reading, or a one-line :class:`DataError`."""
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise DataError(None, f"{path}: data file not found") from None
    except IsADirectoryError:
        raise DataError(None, f"{path}: is a directory, expected a .json or .jsonl file") from None
    except OSError as e:
        raise DataError(None, f"{path}: cannot read data file ({e.strerror or e})") from None


def load_records(path: str | os.PathLike[str], fmt: str = "auto") -> list[dict[str, Any]]:
    """Read and validate a data file; see the module docstring. Raises :class:`DataError`."""
    path = os.fspath(path)
    if fmt not in FORMATS:
        raise DataError(None, f"{path}: unknown data.format {fmt!r} (use one of {', '.join(FORMATS)})")
    if not path.endswith(EXTENSIONS):
        raise DataError(None, f"{path}: unsupported data file type (use .json or .jsonl)")
    with _open(path) as f:
        try:
            raw = f.read()
        except OSError as e:
            raise DataError(None, f"{path}: cannot read data file ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        lineno = raw.count(b"\n", 0, e.start) + 1
        raise DataError(None, f"{path}:{lineno}: not valid UTF-8") from None
    if not text.strip():
        raise DataError(None, f"{path}: data file is empty")
    items = _raw_items(path, text)
    if not items:
        raise DataError(None, f"{path}: data file holds no records")
    out: list[dict[str, Any]] = []
    chosen = None if fmt == "auto" else fmt
    for lineno, obj in items:
        rec, chosen = _record(obj, chosen, f"{path}:{lineno}", lineno)
        out.append(rec)
    return out


def iter_records(path: str | os.PathLike[str], fmt: str = "auto"):
    """Stream ``(record, bytes_read, total_bytes)``: a ``.jsonl`` file line by line (a 1 GB file
    never sits in memory), a ``.json`` list through :func:`load_records`. Same checks and
    one-line :class:`DataError` messages as :func:`load_records`."""
    path = os.fspath(path)
    if not path.endswith(".jsonl"):
        records = load_records(path, fmt)
        total = os.path.getsize(path)
        for i, rec in enumerate(records, 1):
            yield rec, (total if i == len(records) else 0), total
        return
    if fmt not in FORMATS:
        raise DataError(None, f"{path}: unknown data.format {fmt!r} (use one of {', '.join(FORMATS)})")
    f = _open(path)
    chosen = None if fmt == "auto" else fmt
    seen = 0
    with f:
        total = os.fstat(f.fileno()).st_size
        done = 0
        for lineno, raw in enumerate(f, 1):
            done += len(raw)
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError:
                raise DataError(None, f"{path}:{lineno}: not valid UTF-8") from None
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise DataError(None, f"{where}: malformed JSON line ({getattr(e, 'msg', e)})") from None
            rec, chosen = _record(obj, chosen, where, lineno)
            seen += 1
            yield rec, done, total
    if not seen:
        raise DataError(None, f"{path}: data file holds no records")
