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
