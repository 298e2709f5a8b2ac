"""Rows across machines: export the store as JSON lines, import such files into another store.

The file: a header line, then one row per line with every column (JSON columns as JSON)::

    {"fttui_export": 1, "schema": 4, "machine": "gpu-box-1", "exported_at": "2026-11-23T20:00:00+00:00", "rows": 12}
    {"run_id": "...", "kind": "run", ..., "env": {...}}

Import is all or nothing: every file is read and checked first (a malformed line, a header from a
newer fttui, an unknown column: one line naming the file and line, nothing written), then the new
rows go in one transaction. It is idempotent by run id: a row already there and equal is
skipped; a row there with other figures is a conflict, reported and never overwritten. Rows of an
older schema are migrated by the store's own migrations (they are loaded into a scratch store at
their schema version, which is then opened, so the same SQL runs as for an old results file).
Every imported row keeps the machine it ran on: its environment's ``hostname`` (the worker's
start event), else the header's ``machine``, is written into ``env.hostname`` when missing, and
``env.imported_from`` names the file's machine.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fttui.core.base import bounded
from fttui.core.base.errors import FttuiError
from fttui.core.base.inert import inert
from fttui.core.base.redact import mask
from fttui.core.results import store as store_mod
from fttui.core.results.store import COLUMNS, SCHEMA_VERSION, Store
from fttui.core.results.validate import check_row

FORMAT_VERSION = 1
#: Columns that may differ between two copies of the same run without it being a conflict.
_BOOKKEEPING = frozenset({"run_dir"})


class ImportFileError(FttuiError):
    """An export file that cannot be imported (the message names the file and line)."""


@dataclass
class ImportReport:
    """What an import did: rows added, rows already there, conflicts (never overwritten)."""

    added: list[str] = field(default_factory=list)
    same: list[str] = field(default_factory=list)
    conflicts: list[tuple[str, list[str]]] = field(default_factory=list)  # (run_id, differing columns)


def export_lines(rows: Sequence[dict[str, Any]], machine: str | None = None) -> Iterable[str]:
    """The export file's lines (each ends with a newline)."""
    header = {
        "fttui_export": FORMAT_VERSION,
        "schema": SCHEMA_VERSION,
        "machine": machine or socket.gethostname(),
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "rows": len(rows),
    }
    yield json.dumps(header, sort_keys=True) + "\n"
    for row in rows:
        yield json.dumps(mask(row), sort_keys=True, default=str) + "\n"


def export(store: Store, out, machine: str | None = None) -> int:
    """Write every row of ``store`` to the text stream ``out``; returns the number of rows."""
    rows = store.rows(kind=None)
    for line in export_lines(rows, machine):
        out.write(line)
    return len(rows)


def _read(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        text = bounded.read_text(path, bounded.MAX_IMPORT_BYTES)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ImportFileError(f"{path}: cannot read: {e}") from None
    lines = [(i, ln) for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    if not lines:
        raise ImportFileError(f"{path}: empty file, not an fttui export")
    parsed = []
    for i, ln in lines:
        try:
            obj = json.loads(ln)
        except json.JSONDecodeError as e:
            raise ImportFileError(f"{path}:{i}: malformed JSON ({e.msg})") from None
        except (ValueError, RecursionError):  # 100k brackets deep; a number too long for Python's int()
            raise ImportFileError(f"{path}:{i}: malformed JSON (nested too deeply or a number too long)") from None
        if not isinstance(obj, dict):
            raise ImportFileError(f"{path}:{i}: expected a JSON object")
        parsed.append((i, obj))
    (_, header), body = parsed[0], parsed[1:]
    if header.get("fttui_export") != FORMAT_VERSION or not isinstance(header.get("schema"), int):
        raise ImportFileError(f"{path}:1: not an fttui export header (made by `fttui results export`)")
    if header["schema"] > SCHEMA_VERSION:
        raise ImportFileError(
            f"{path}:1: rows of results schema {header['schema']}, newer than this fttui's "
            f"({SCHEMA_VERSION}): upgrade fttui"
        )
    known = _columns_at(header["schema"])
    rows = []
    for i, row in body:
        unknown = sorted(set(row) - known)
        if unknown:
            raise ImportFileError(f"{path}:{i}: unknown column(s) for schema {header['schema']}: {', '.join(unknown)}")
        if not isinstance(row.get("run_id"), str) or not row["run_id"]:
            raise ImportFileError(f"{path}:{i}: a row needs a run_id")
        if row.get("env") is not None and not isinstance(row["env"], dict):
            raise ImportFileError(
                f"{path}:{i}: row {inert(row['run_id'])}: env: expected a JSON object; nothing imported"
            )
        rid = inert(row["run_id"])
        row, problems = check_row(row)  # against the declared figures: true -> 1, no Infinity
        if problems:
            field, problem = problems[0]
            raise ImportFileError(f"{path}:{i}: row {rid}: {field}: {problem}; nothing imported")
        rows.append(row)
    return header, rows


def _columns_at(schema: int) -> set[str]:
    later = {c for v, cols in store_mod._ADDED.items() if v > schema for c in cols}
    return set(COLUMNS) - later


def _migrate(rows: list[dict[str, Any]], schema: int) -> list[dict[str, Any]]:
    """Rows of ``schema`` brought to the current schema by the store's own migrations."""
    if schema == SCHEMA_VERSION or not rows:
        return rows
    with tempfile.TemporaryDirectory(prefix="fttui-import-") as tmp:
        path = Path(tmp) / "old.sqlite"
        conn = sqlite3.connect(path)
        try:
            for migration in store_mod.MIGRATIONS[:schema]:
                for stmt in migration.split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
            conn.execute(f"PRAGMA user_version = {schema}")
            for row in rows:
                keys = list(row)
                conn.execute(
                    f"INSERT INTO runs ({', '.join(keys)}) VALUES ({', '.join('?' for _ in keys)})",
                    [store_mod._encode(k, row[k]) for k in keys],
                )
            conn.commit()
        finally:
            conn.close()
        with Store(path) as scratch:  # runs the migrations from `schema` on
            return scratch.rows(kind=None)


def _with_machine(row: dict[str, Any], machine: str | None) -> dict[str, Any]:
    env = dict(row.get("env") or {})
    if machine:
        env.setdefault("hostname", machine)
        env.setdefault("imported_from", machine)
    return {**row, "env": env}


def _differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The columns in which two copies of a run differ (bookkeeping and the import note aside)."""
    diff = []
    for k in COLUMNS:
        if k in _BOOKKEEPING:
            continue
        va, vb = a.get(k), b.get(k)
        if k == "env":
            va = {x: y for x, y in (va or {}).items() if x != "imported_from"}
            vb = {x: y for x, y in (vb or {}).items() if x != "imported_from"}
        if json.dumps(va, sort_keys=True, default=str) != json.dumps(vb, sort_keys=True, default=str):
            diff.append(k)
    return diff


def import_files(store: Store, paths: Sequence[str | os.PathLike], _retried: bool = False) -> ImportReport:
    """Import export files into ``store`` (all checked before anything is written)."""
    incoming: dict[str, dict[str, Any]] = {}
    report = ImportReport()
    for p in paths:
        header, rows = _read(Path(p))
        for row in _migrate(rows, header["schema"]):
            row = _with_machine(row, header.get("machine"))
            prev = incoming.get(row["run_id"])
            if prev is not None and _differing(prev, row):
                raise ImportFileError(f"{p}: run {row['run_id']} appears twice with different figures")
            incoming[row["run_id"]] = row
    to_add = []
    for rid, row in incoming.items():
        have = store.get(rid)
        if have is None:
            to_add.append(row)
            report.added.append(rid)
            continue
        diff = _differing(have, row)
        if diff:
            report.conflicts.append((rid, diff))
        else:
            report.same.append(rid)
    try:
        _insert_all(store, to_add)
    except sqlite3.IntegrityError:  # another import stored one of these rows meanwhile: ours is undone
        if _retried:
            raise
        return import_files(store, paths, _retried=True)  # read the store again: those rows are there now
    return report


def _insert_all(store: Store, rows: list[dict[str, Any]]) -> None:
    """Insert new rows in one transaction; plain INSERT, so an existing run is never replaced."""
    with store.transaction() as conn:
        for row in rows:
            row = mask(row)
            keys = [k for k in row if k in COLUMNS]
            conn.execute(
                f"INSERT INTO runs ({', '.join(keys)}) VALUES ({', '.join('?' for _ in keys)})",
                [store_mod._encode(k, row[k]) for k in keys],
            )


__all__ = ["FORMAT_VERSION", "ImportFileError", "ImportReport", "export", "export_lines", "import_files"]
