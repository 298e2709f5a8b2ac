"""The results store's write transactions: an interrupt that lands anywhere in a write (even
inside COMMIT, as a Ctrl-C during a probe can) leaves the store whole and re-raises the interrupt."""
from __future__ import annotations

import sqlite3

import pytest

from fttui.core.results.store import Store


class _InterruptAfter:
    """Stands in for the connection: runs each statement, then raises KeyboardInterrupt right
    after the one named, as a signal handler does when it fires as the C call returns."""

    def __init__(self, conn: sqlite3.Connection, statement: str):
        self._conn, self._statement = conn, statement

    def execute(self, sql, *args):
        cur = self._conn.execute(sql, *args)
        if sql.strip().upper().startswith(self._statement):
            raise KeyboardInterrupt
        return cur

    def __getattr__(self, name):
        return getattr(self._conn, name)


@pytest.mark.parametrize("statement, kept", [("COMMIT", True), ("INSERT", False)])
def test_an_interrupt_inside_a_write_reraises_and_keeps_the_store_whole(tmp_path, statement, kept):
    path = tmp_path / "results.db"
    with Store(path) as store:
        store.put({"run_id": "before", "profile": "p", "status": "completed"})
        real = store.conn
        store.conn = _InterruptAfter(real, statement)
        with pytest.raises(KeyboardInterrupt):
            store.put({"run_id": "during", "profile": "p", "status": "completed"})
        store.conn = real
        assert not real.in_transaction
    with Store(path) as store:
        assert store.get("before") is not None
        assert (store.get("during") is not None) is kept
        store.put({"run_id": "after", "profile": "p", "status": "completed"})
        assert store.get("after") is not None


# ------------------------------------------------------------------ schema 5: the sharding column
def _store_at(path, version: int, rows: list[dict]) -> None:
    """A results file exactly as an fttui of schema ``version`` wrote it."""
    from fttui.core.results import store as store_mod

    conn = sqlite3.connect(path)
    for ddl in store_mod.MIGRATIONS[:version]:
        for stmt in ddl.split(";"):
            if stmt.strip():
                conn.execute(stmt)
    conn.execute(f"PRAGMA user_version = {version}")
    for r in rows:
        conn.execute(f"INSERT INTO runs ({', '.join(r)}) VALUES ({', '.join('?' for _ in r)})", list(r.values()))
    conn.commit()
    conn.close()


def test_schema_4_rows_get_their_sharding(tmp_path):
    from fttui.core.results import store as store_mod
    from fttui.core.results.tables import reference_table

    path = tmp_path / "results.sqlite"
    _store_at(path, 4, [
        {"run_id": "z", "kind": "run", "method": "full-zero3-offload", "status": "completed", "model": "m"},
        {"run_id": "l", "kind": "run", "method": "lora", "status": "oom", "model": "m"},
        {"run_id": "p", "kind": "probe", "method": "qlora", "status": "fit", "model": "m"},
    ])
    with Store(path) as store:
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == store_mod.SCHEMA_VERSION == 7
        rows = {r["run_id"]: r for r in store.rows(kind=None)}
    assert (rows["z"]["method"], rows["z"]["sharding"]) == ("full", "zero3-offload")
    assert (rows["l"]["method"], rows["l"]["sharding"]) == ("lora", "none")
    assert (rows["p"]["method"], rows["p"]["sharding"]) == ("qlora", "none")
    # the tables label the migrated row as they labelled the old method name
    headers, body = reference_table([rows["z"], rows["l"]])
    method = headers.index("method")
    assert [line[method] for line in body] == ["full (ZeRO-3 offload)", "lora"]
    with Store(path) as store:  # opening again changes nothing
        assert store.get("z")["sharding"] == "zero3-offload" and len(store.rows(kind=None)) == 3


def test_method_labels_carry_the_sharding():
    from fttui.core.base import fmt

    assert fmt.method_label("full", "zero3-offload") == "full (ZeRO-3 offload)"
    assert fmt.method_label("full-zero3-offload") == "full (ZeRO-3 offload)"  # rows of an old export
    assert fmt.method_label("lora-emb", "fsdp") == "lora (+emb, FSDP)"
    assert fmt.method_label("lora", "none") == fmt.method_label("lora") == "lora"
    assert fmt.method_label("qlora", "zero2", optimizer="paged_adamw_8bit") == "qlora (paged, ZeRO-2)"


def test_matrices_and_bar_labels_keep_shardings_apart():
    from fttui.core.results.labels import bar_labels
    from fttui.core.results.matrices import matrix_tables

    def row(rid, sharding, bs, seq, gb):
        return {"run_id": rid, "model": "m", "dataset": "d", "gpu": "NVIDIA A100-SXM4-80GB", "num_gpus": 2,
                "method": "full", "sharding": sharding, "precision": "bf16", "batch_size": bs, "grad_accum": 1,
                "max_seq_len": seq, "status": "completed", "peak_gpu_mem_mb": [gb * 1024], "duration_s": 10.0,
                "steps": 10}

    rows = [row(f"{s}-{bs}-{seq}", s, bs, seq, gb)
            for s, gb in (("zero2", 40), ("zero3", 20)) for bs in (1, 2) for seq in (512, 1024)]
    tables = matrix_tables(rows, None)
    assert len(tables) == 2  # one batch x sequence table per sharding, never one table mixing them
    titles = sorted(t.title for t in tables)
    assert "ZeRO-2" in titles[0] and "ZeRO-3" in titles[1]
    for t in tables:
        want = "40.00" if "ZeRO-2" in t.title else "20.00"
        assert all(c.startswith(want) for line in t.cells for c in line[1:])
    labels = bar_labels([rows[0], rows[4]])
    assert labels == ["ZeRO-2", "ZeRO-3"]


def test_a_figure_declared_after_schema_7_gets_its_column_when_the_store_opens(tmp_path, monkeypatch):
    """A figure added to the row (fttui.core.results.columns) needs no migration: the store adds
    the column it lacks when it opens; the rows stored before keep it null and lose nothing."""
    from fttui.core.results import store as store_mod

    path = tmp_path / "r.sqlite"
    with Store(path) as s:
        s.put({"run_id": "old", "kind": "run", "samples_per_s": 1.5, "gpu_names": ["A"]})
    monkeypatch.setitem(store_mod.COLUMNS, "fake_figure", "REAL")
    with Store(path) as s:
        version = s.conn.execute("PRAGMA user_version").fetchone()[0]
        s.put({"run_id": "new", "kind": "run", "fake_figure": 2.5})
        old, new = s.get("old"), s.get("new")
    assert version == store_mod.SCHEMA_VERSION
    assert old["fake_figure"] is None and old["samples_per_s"] == 1.5 and old["gpu_names"] == ["A"]
    assert new["fake_figure"] == 2.5


def test_the_store_columns_are_the_declared_row():
    from fttui.core.results import columns, store as store_mod

    assert list(store_mod.COLUMNS) == [f.name for f in columns.FIGURES]
    assert store_mod.JSON_COLUMNS == {f.name for f in columns.FIGURES if f.json}
