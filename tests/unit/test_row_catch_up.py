"""A results store that cannot be written (issue 40 item 4): the rows runs kept in ``row.json``
while the store could not take them are stored once it opens again, once each."""

from __future__ import annotations

import json
import multiprocessing
import time

from fttui.core.base import paths
from fttui.core.results.store import Store
from fttui.core.run.files.rundir import RunDir, list_runs
from fttui.core.run.supervising import recover
from fttui.core.run.supervising.kept_rows import store_kept_rows, unsaved_line
from fttui.core.run.supervising.recover import save_row

ROW = {"run_id": "", "kind": "run", "status": "completed", "steps": 2, "samples_per_s": 120.5, "model": "llama"}


def _finished(home, run_id: str, *, row_saved: bool | None = False) -> RunDir:
    """A run directory as a supervisor leaves it: its row in row.json, status.json last."""
    run = home / "runs" / run_id
    run.mkdir(parents=True)
    (run / "profile.json").write_text("{}")
    (run / "row.json").write_text(json.dumps({**ROW, "run_id": run_id}))
    status = {"status": "completed", "returncode": 0, "ended": 1.0}
    if row_saved is not None:
        status["row_saved"] = row_saved
    (run / "status.json").write_text(json.dumps(status))
    return RunDir(run)


def _corrupt_store():
    path = paths.store_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"this is not sqlite" * 100)
    return path


def _rows() -> list[dict]:
    with Store() as s:
        return s.rows()


def test_kept_rows_are_stored_once_the_store_opens_and_only_once(fttui_home):
    a = _finished(fttui_home, "20260101-000000-a-0001")
    saved = _finished(fttui_home, "20260101-000001-b-0002", row_saved=True)  # in the old store: not ours
    old = _finished(fttui_home, "20260101-000002-c-0003", row_saved=None)  # a watch without a row, an old run
    path = _corrupt_store()
    errors: list[str] = []
    assert store_kept_rows(list_runs(), errors) == []  # still corrupt: nothing marked, one line why
    assert a.final_status().row_saved is False
    assert len(errors) == 1 and f"mv {path} {path}.damaged" in errors[0]
    line = unsaved_line(a)
    assert line is not None and str(a.row_path) in line and f"mv {path} {path}.damaged" in line

    path.rename(path.with_name("results.sqlite.damaged"))  # the mend the line names
    assert [r.run_id for r in store_kept_rows(list_runs())] == [a.run_id]
    rows = _rows()
    assert [r["run_id"] for r in rows] == [a.run_id]
    assert rows[0]["steps"] == 2 and rows[0]["samples_per_s"] == 120.5
    assert a.final_status().row_saved is True and a.final_status().status == "completed"
    assert saved.final_status().row_saved is True and old.final_status().row_saved is None
    assert unsaved_line(a) is None

    assert store_kept_rows(list_runs()) == []  # again: nothing to do, no second row
    recover.recover_all()  # what `fttui results`, `ls` and the app call
    assert [r["run_id"] for r in _rows()] == [a.run_id]


def test_a_row_the_store_has_already_is_kept_and_only_marked(fttui_home):
    a = _finished(fttui_home, "20260101-000000-a-0001")
    with Store() as s:  # stored meanwhile (an import, another command) with other figures
        s.put({"run_id": a.run_id, "status": "completed", "steps": 40})
    assert [r.run_id for r in store_kept_rows([a])] == [a.run_id]
    assert [(r["run_id"], r["steps"]) for r in _rows()] == [(a.run_id, 40)]
    assert a.final_status().row_saved is True


def _catch_up(home: str, out) -> None:
    import os

    os.environ["FTTUI_HOME"] = home
    out.put(len(store_kept_rows(list_runs())))


def test_several_commands_at_once_store_each_row_once(fttui_home):
    runs = [_finished(fttui_home, f"20260101-00000{i}-r-000{i}") for i in range(6)]
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_catch_up, args=(str(fttui_home), out)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    counts = [out.get(timeout=5) for _ in procs]
    rows = _rows()
    assert sorted(r["run_id"] for r in rows) == sorted(r.run_id for r in runs)  # each once
    assert sum(counts) <= len(runs)
    # a command that found a run locked by another left it for later: the next one finishes it
    store_kept_rows(list_runs())
    assert all(r.final_status().row_saved is True for r in runs)
    assert len(_rows()) == len(runs)


def test_a_corrupt_store_is_not_retried(fttui_home):
    """The supervisor's save gives up at once on a store that a retry cannot mend (it slept 7.5 s
    over five attempts), keeping the row in row.json."""
    _corrupt_store()
    rd = _finished(fttui_home, "20260101-000000-a-0001")
    t0 = time.monotonic()
    assert save_row({**ROW, "run_id": rd.run_id}, rd) is False
    assert time.monotonic() - t0 < 2.0
    assert rd.row()["run_id"] == rd.run_id


def test_the_apps_status_line_says_the_row_was_not_saved():
    """The app's status bar (status_line's ``detail``) says it; the CLI's status line stays
    ``COMPLETED``, its summary ending with the ``ROW NOT SAVED`` line."""
    from fttui.core.run.files.statusfile import FinalStatus
    from fttui.core.run.fold.state import RunState
    from fttui.core.run.fold.status import ROW_NOT_SAVED, status_line

    state = RunState()
    state.set_final(FinalStatus("completed", 0, row_saved=False))
    snap = state.snapshot()
    assert status_line(snap, detail=True).text == f"COMPLETED; {ROW_NOT_SAVED}"
    assert status_line(snap).text == "COMPLETED"
    state.set_final(FinalStatus("completed", 0, row_saved=True))
    assert status_line(state.snapshot(), detail=True).text == "COMPLETED"
