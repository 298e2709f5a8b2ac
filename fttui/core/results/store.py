"""The results store: one SQLite row per run, probe trial or sweep cell.

Safe with several writers (WAL, busy timeout, one short transaction per row) and with a writer
killed mid-transaction (SQLite's journal rolls it back on the next open). The schema carries a
version (``PRAGMA user_version``) and is brought up to date by ordered migrations.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from fttui.core.base import paths, shardings
from fttui.core.base.errors import StoreError
from fttui.core.base.redact import mask
from fttui.core.results.columns import COLUMNS as _COLUMNS
from fttui.core.results.columns import FIGURES
from fttui.core.results.columns import JSON_COLUMNS as _JSON_COLUMNS

# Column name -> SQL type, JSON columns: declared once with the row (fttui.core.results.columns).
# Order is the order of `fttui results` columns in JSON and CSV.
COLUMNS: dict[str, str] = dict(_COLUMNS)
#: the columns each schema version added (the versioned migrations below); a column declared with
#: a later ``since`` is added by :meth:`Store._add_declared` when the store opens
_ADDED = {v: tuple(f.name for f in FIGURES if f.since == v) for v in range(2, 8)}
#: host_measure of the rows recorded before schema 4: their peak_host_rss_mb was the process tree's
#: (probe trials: the trial process's own peak, the ranks' measure).
HOST_MEASURE_BEFORE_4 = "tree (before schema 4)"
_LATER = {f.name for f in FIGURES if f.since > 1}
JSON_COLUMNS = set(_JSON_COLUMNS)

# Migrations, in order; migration i brings the schema from version i to i + 1.
MIGRATIONS: list[str] = [
    "CREATE TABLE runs (" + ", ".join(f"{k} {v}" for k, v in COLUMNS.items() if k not in _LATER) + ");"
    "CREATE INDEX runs_started ON runs(started_at);"
    "CREATE INDEX runs_group ON runs(group_id);",
    ";".join(f"ALTER TABLE runs ADD COLUMN {c} {COLUMNS[c]}" for c in _ADDED[2]),
    ";".join(f"ALTER TABLE runs ADD COLUMN {c} {COLUMNS[c]}" for c in _ADDED[3]),
    ";".join(f"ALTER TABLE runs ADD COLUMN {c} {COLUMNS[c]}" for c in _ADDED[4])
    + f";UPDATE runs SET host_measure = '{HOST_MEASURE_BEFORE_4}', peak_tree_rss_mb = peak_host_rss_mb"
    " WHERE kind IS NULL OR kind != 'probe'"
    ";UPDATE runs SET host_measure = 'ranks' WHERE kind = 'probe'"
    ";UPDATE runs SET recorded_by = 'supervisor' WHERE kind IS NULL OR kind != 'probe'"
    ";UPDATE runs SET recorded_by = 'probe' WHERE kind = 'probe'",
    # schema 5: sharding is its own column. Before it, the only sharded runs were the full runs
    # under ZeRO-3 offload, stored under its legacy method name (the registry's
    # shardings.LEGACY_METHODS, "full-zero3-offload"); every other run had none.
    f"ALTER TABLE runs ADD COLUMN sharding {COLUMNS['sharding']}"
    + "".join(
        f";UPDATE runs SET method = 'full', sharding = '{kind.name}' WHERE method = '{legacy}'"
        for legacy, kind in shardings.LEGACY_METHODS.items()
    )
    + f";UPDATE runs SET sharding = '{shardings.NONE.name}' WHERE sharding IS NULL",
    # schema 6: what a run kept. Before it no run saved, resumed or evaluated: null is true of them.
    ";".join(f"ALTER TABLE runs ADD COLUMN {c} {COLUMNS[c]}" for c in _ADDED[6]),
    # schema 7: the last training loss (rows of any kind); older rows did not keep it: null.
    ";".join(f"ALTER TABLE runs ADD COLUMN {c} {COLUMNS[c]}" for c in _ADDED[7]),
]
SCHEMA_VERSION = len(MIGRATIONS)
#: How long a writer waits for another writer's transaction (readers never wait: WAL).
BUSY_TIMEOUT_S = 30.0


class Store:
    """The results store. Open, use, close; every write is its own transaction."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path else paths.store_path()
        paths.ensure_dir(self.path.parent)
        if self.path.is_dir():
            raise StoreError(
                f"{self.path}: is a folder, not a results store; move it aside (fttui then starts a new store):"
                f" {mend_command(self.path)}",
                lasting=True,
            )
        fresh = not self.path.exists()
        try:
            self.conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            if fresh:
                os.chmod(self.path, 0o600)
            self.conn.row_factory = sqlite3.Row
            self.conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            if self.conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
        except sqlite3.Error as e:
            raise self._error(e) from None

    def _error(self, e: sqlite3.Error) -> StoreError:
        """One line naming the store and what to do."""
        text = str(e)
        if "readonly" in text or "read-only" in text:
            return StoreError(
                f"{self.path}: read-only ({text}); make it writable (chmod u+w) or set FTTUI_HOME to another folder",
                lasting=True,
            )
        corrupt = isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.OperationalError)
        if corrupt or "malformed" in text:
            return StoreError(
                f"{self.path}: not a readable results store ({text}: corrupt or truncated); move it "
                f"aside (fttui then starts a new one): {mend_command(self.path)}; or restore a copy",
                lasting=True,
            )
        return StoreError(f"{self.path}: {text}")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction. An interrupt can land anywhere, even inside COMMIT (then
        SQLite has already committed or rolled back): roll back only what is still open."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise

    def _migrate(self) -> None:
        """Bring the schema up to date; a store already up to date is only read (no write lock:
        a reader never waits for a writer)."""
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            have = {r[1] for r in self.conn.execute("PRAGMA table_info(runs)")}
            if set(COLUMNS) <= have:
                return
        with self.transaction():
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: schema version {version} is newer than this fttui ({SCHEMA_VERSION}): upgrade fttui",
                    lasting=True,
                )
            for i in range(version, SCHEMA_VERSION):
                for stmt in MIGRATIONS[i].split(";"):
                    if stmt.strip():
                        self.conn.execute(stmt)
            if version != SCHEMA_VERSION:
                self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            self._add_declared()

    def _add_declared(self) -> None:
        """Add every declared column the table lacks (a figure added to the row after schema 7):
        its older rows keep it null, which is true of them. No version to bump, so two figures
        added at once never collide."""
        have = {r[1] for r in self.conn.execute("PRAGMA table_info(runs)")}
        for name, sql in COLUMNS.items():
            if name not in have:
                self.conn.execute(f"ALTER TABLE runs ADD COLUMN {name} {sql}")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def put(self, row: Mapping[str, Any]) -> None:
        """Insert or replace one row (keyed by run_id). Unknown keys are an error."""
        from fttui.core.results.validate import coerce_row

        row = coerce_row(mask(dict(row)))  # the one secret mask, and every value as declared
        unknown = set(row) - set(COLUMNS)
        if unknown:
            raise StoreError(f"unknown result columns: {sorted(unknown)}", lasting=True)
        if not row.get("run_id"):
            raise StoreError("a result row needs a run_id", lasting=True)
        keys = list(row)
        values = [_encode(k, row[k]) for k in keys]
        sql = f"INSERT OR REPLACE INTO runs ({', '.join(keys)}) VALUES ({', '.join('?' for _ in keys)})"
        try:
            with self.transaction():
                self.conn.execute(sql, values)
        except sqlite3.Error as e:
            raise self._error(e) from None

    def delete(self, run_id: str) -> bool:
        """Remove one row (``fttui results delete``); ``False`` when there was none."""
        try:
            with self.transaction():
                return self.conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,)).rowcount > 0
        except sqlite3.Error as e:
            raise self._error(e) from None

    def get(self, run_id: str) -> dict[str, Any] | None:
        cur = self.conn.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,))
        r = cur.fetchone()
        return _decode(r) if r else None

    def rows(
        self,
        *,
        kind: str | Iterable[str] | None = None,
        group_id: str | None = None,
        where: Mapping[str, Any] | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Rows, oldest first, filtered by equality on columns."""
        clauses, args = [], []
        if kind is not None:
            kinds = [kind] if isinstance(kind, str) else list(kind)
            clauses.append(f"kind IN ({', '.join('?' for _ in kinds)})")
            args += kinds
        if group_id is not None:
            clauses.append("group_id = ?")
            args.append(group_id)
        for k, v in (where or {}).items():
            if k not in COLUMNS:
                raise StoreError(f"unknown column {k!r}")
            clauses.append(f"{k} = ?")
            args.append(v)
        sql = "SELECT * FROM runs"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY started_at, rowid"
        if limit:
            unordered = sql[: -len(" ORDER BY started_at, rowid")]
            newest = f"{unordered} ORDER BY started_at DESC, rowid DESC LIMIT {int(limit)}"
            sql = f"SELECT * FROM ({newest}) ORDER BY started_at, rowid"
        try:
            return [_decode(r) for r in self.conn.execute(sql, args)]
        except sqlite3.Error as e:
            raise self._error(e) from None


def mend_command(path: Path) -> str:
    """The shell command that moves a damaged store aside, its journal files with it (a stale
    ``-wal`` left beside a new store would be replayed into it): ``mv /h/results.sqlite
    /h/results.sqlite.damaged``; each file gets the first free ``.damaged``, ``.damaged-2``, ..."""
    import shlex

    files = [path] + [p for p in (path.with_name(path.name + x) for x in ("-wal", "-shm")) if p.exists()]
    suffix = ".damaged"
    n = 1
    while any(f.with_name(f.name + suffix).exists() for f in files):
        n += 1
        suffix = f".damaged-{n}"
    return " && ".join(f"mv {shlex.quote(str(f))} {shlex.quote(str(f) + suffix)}" for f in files)


def _encode(key: str, value: Any) -> Any:
    if key in JSON_COLUMNS:
        return None if value is None else json.dumps(value, sort_keys=True)
    if isinstance(value, bool):
        return int(value)
    return value


def _decode(r: sqlite3.Row) -> dict[str, Any]:
    out = dict(r)
    for k in JSON_COLUMNS:
        if out.get(k) is not None:
            try:
                out[k] = json.loads(out[k])
            except ValueError:
                pass
    return out
