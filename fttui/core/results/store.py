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

# Column name -> SQL type. Order is the order of `fttui results` columns in JSON and CSV.
COLUMNS: dict[str, str] = {
    "run_id": "TEXT PRIMARY KEY",
    "kind": "TEXT",  # run | probe | sweep | command (`fttui run -- CMD`) | watch (`fttui watch --pid`)
    "group_id": "TEXT",  # the probe or sweep a trial belongs to
    "started_at": "TEXT",
    "ended_at": "TEXT",
    "profile": "TEXT",
    "model": "TEXT",
    "dataset": "TEXT",
    "method": "TEXT",  # full | lora | lora-emb | qlora | lora-int8
    "sharding": "TEXT",  # schema 5: what sharded the run, read back from the engine or wrapper (constants.SHARDINGS)
    "precision": "TEXT",
    "gpu": "TEXT",  # first card's name, or "cpu"
    "gpu_names": "TEXT",  # JSON list
    "num_gpus": "INTEGER",
    "nodes": "INTEGER",
    "batch_size": "INTEGER",  # micro batch per device
    "grad_accum": "INTEGER",
    "world_size": "INTEGER",
    "effective_batch": "INTEGER",
    "max_seq_len": "INTEGER",
    "gradient_checkpointing": "INTEGER",
    "steps": "INTEGER",
    "total_steps": "INTEGER",
    "samples": "INTEGER",
    "tokens": "INTEGER",
    "tokens_padded": "INTEGER",
    "samples_per_s": "REAL",  # steady state (warm-up excluded)
    "tokens_per_s": "REAL",  # steady state, non-padding tokens
    "tokens_padded_per_s": "REAL",
    "samples_per_s_avg": "REAL",  # whole run
    "tokens_per_s_avg": "REAL",
    "duration_s": "REAL",  # time inside the training loop (the reference tables' duration)
    "wall_s": "REAL",  # launch to end, model loading included
    "peak_gpu_mem_mb": "TEXT",  # JSON list, NVML used, one per card
    "peak_gpu_proc_mb": "TEXT",  # JSON list, this run's processes, one per card
    "peak_torch_reserved_mb": "TEXT",  # JSON list, one per rank
    "peak_torch_alloc_mb": "TEXT",  # JSON list, one per rank
    "peak_host_rss_mb": "REAL",  # host peak, MB: what it sums is host_measure
    "host_ram_total_mb": "REAL",
    "host_ram_peak_used_mb": "REAL",
    "params_total": "INTEGER",
    "params_trainable": "INTEGER",
    "status": "TEXT",  # completed | failed | oom | cancelled
    "oom_kind": "TEXT",
    "error": "TEXT",
    "error_step": "INTEGER",
    "error_rank": "INTEGER",
    "exit_code": "INTEGER",
    "signal": "TEXT",
    "stalled": "INTEGER",
    "limits": "TEXT",  # JSON
    "versions": "TEXT",  # JSON
    "env": "TEXT",  # JSON
    "run_dir": "TEXT",
    # schema 2: probe trials
    "param": "TEXT",  # the probed setting (batch_size or max_seq_len)
    "clean": "INTEGER",  # the trial ran in a process that had not run out of memory before
    "step_time_s": "REAL",
    "peak_rank_rss_mb": "TEXT",  # JSON list: each training process's own peak RSS, by rank
    # schema 3
    "interconnect": "TEXT",  # NVLink | PCIe | QPI/UPI between the run's cards; "" for one card
    "fresh": "INTEGER",  # probe trial: the first trial of its process (what a fresh run sees)
    # schema 4: figures that are the run's own (issue 14)
    "mismatch": "TEXT",  # JSON {setting: {"stated", "observed"}}: what the run did differs; {} when all agree
    "peak_tree_rss_mb": "REAL",  # the whole supervised process tree (launchers, build steps included)
    "peak_build_rss_mb": "REAL",  # the tree's build steps (compilers, linkers, ninja)
    "host_measure": "TEXT",  # what peak_host_rss_mb sums: "ranks" | "processes[ (N without a readable VmHWM...)]" | "tree" | "tree (before schema 4)"
    "gpu_mem_total_mb": "TEXT",  # JSON list, each card's total memory
    "gpu_mem_source": "TEXT",  # peak_gpu_proc_mb from "nvml-process" | "torch-reserved+context"; null on CPU
    "alloc_retries": "TEXT",  # JSON list per card: the CUDA caching allocator's retries of its ranks; null on CPU
    "min_headroom_mb": "TEXT",  # JSON list per card: total minus the peak of device used
    "mfu": "TEXT",  # JSON list per card: model FLOPs utilisation (0..1) over the training time; null entries unknown
    "flops_per_token": "REAL",  # model FLOPs per trained token (docs/performance.md)
    "near_oom": "INTEGER",  # a card's allocator retried or its headroom fell under the threshold; null on CPU
    "recorded_by": "TEXT",  # who wrote the row: "supervisor" | "recovered" (a later command: the supervisor died) | "probe"
    # schema 6: results kept (issue 16)
    "resumed_from": "TEXT",  # the run id whose last checkpoint this run continued from
    "resumed_step": "INTEGER",  # the optimizer step of that checkpoint (steps counts on from it)
    "eval_loss": "REAL",  # the latest evaluation loss on the held-out split (data.eval_ratio)
    "eval_step": "INTEGER",  # the optimizer step that evaluation ran after
    "output_dir": "TEXT",  # the folder the run saved its adapter / model or checkpoints in; null when nothing was saved
    "checkpoint": "TEXT",  # the last resumable checkpoint it saved (a folder), else null
    # schema 7: commands (issue 17)
    "loss": "REAL",  # the training loss of the last step (the lowest rank's); null when nothing reported one
}
_ADDED = {2: ("param", "clean", "step_time_s", "peak_rank_rss_mb"), 3: ("interconnect", "fresh"),
          4: ("mismatch", "peak_tree_rss_mb", "peak_build_rss_mb", "host_measure", "gpu_mem_total_mb",
              "gpu_mem_source", "alloc_retries", "min_headroom_mb", "mfu", "flops_per_token", "near_oom",
              "recorded_by"),
          5: ("sharding",),
          6: ("resumed_from", "resumed_step", "eval_loss", "eval_step", "output_dir", "checkpoint"),
          7: ("loss",)}
#: host_measure of the rows recorded before schema 4: their peak_host_rss_mb was the process tree's
#: (probe trials: the trial process's own peak, the ranks' measure).
HOST_MEASURE_BEFORE_4 = "tree (before schema 4)"
_LATER = {c for cols in _ADDED.values() for c in cols}
JSON_COLUMNS = {
    "alloc_retries",
    "min_headroom_mb",
    "mfu",
    "mismatch",
    "gpu_mem_total_mb",
    "peak_rank_rss_mb",
    "gpu_names",
    "peak_gpu_mem_mb",
    "peak_gpu_proc_mb",
    "peak_torch_reserved_mb",
    "peak_torch_alloc_mb",
    "limits",
    "versions",
    "env",
}

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
    + "".join(f";UPDATE runs SET method = 'full', sharding = '{kind.name}' WHERE method = '{legacy}'"
              for legacy, kind in shardings.LEGACY_METHODS.items())
    + f";UPDATE runs SET sharding = '{shardings.NONE.name}' WHERE sharding IS NULL",
    # schema 6: what a run kept. Before it no run saved, resumed or evaluated: null is true of them.
    ";".join(f"ALTER TABLE runs ADD COLUMN {c} {COLUMNS[c]}" for c in _ADDED[6]),
    # schema 7: the last training loss (rows of any kind); older rows did not keep it: null.
    ";".join(f"ALTER TABLE runs ADD COLUMN {c} {COLUMNS[c]}" for c in _ADDED[7]),
]
SCHEMA_VERSION = len(MIGRATIONS)


class Store:
    """The results store. Open, use, close; every write is its own transaction."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path else paths.store_path()
        paths.ensure_dir(self.path.parent)
        fresh = not self.path.exists()
        self.conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        if fresh:
            os.chmod(self.path, 0o600)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("PRAGMA busy_timeout = 30000")
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self._migrate()

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
        with self.transaction():
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: schema version {version} is newer than this fttui "
                    f"({SCHEMA_VERSION}): upgrade fttui"
                )
            for i in range(version, SCHEMA_VERSION):
                for stmt in MIGRATIONS[i].split(";"):
                    if stmt.strip():
                        self.conn.execute(stmt)
            if version != SCHEMA_VERSION:
                self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def put(self, row: Mapping[str, Any]) -> None:
        """Insert or replace one row (keyed by run_id). Unknown keys are an error."""
        row = mask(dict(row))  # the one secret mask, at the write
        unknown = set(row) - set(COLUMNS)
        if unknown:
            raise StoreError(f"unknown result columns: {sorted(unknown)}")
        if not row.get("run_id"):
            raise StoreError("a result row needs a run_id")
        keys = list(row)
        values = [_encode(k, row[k]) for k in keys]
        sql = (
            f"INSERT OR REPLACE INTO runs ({', '.join(keys)}) "
            f"VALUES ({', '.join('?' for _ in keys)})"
        )
        with self.transaction():
            self.conn.execute(sql, values)

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
            sql = f"SELECT * FROM ({sql[:-len(' ORDER BY started_at, rowid')]} ORDER BY started_at DESC, rowid DESC LIMIT {int(limit)}) ORDER BY started_at, rowid"
        return [_decode(r) for r in self.conn.execute(sql, args)]


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
