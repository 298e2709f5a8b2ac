"""Rows across machines (issue 16): `fttui results export` / `import`: every column round-trips,
import is idempotent by run id, conflicts are reported and never overwritten, old-schema rows are
migrated, each row keeps its machine, bad files change nothing."""

from __future__ import annotations

import json
import sqlite3

import pytest

from fttui.core.results import store as store_mod
from fttui.core.results.exchange import ImportFileError, export, import_files
from fttui.core.results.store import SCHEMA_VERSION, Store
from tests.conftest import ROOT, run_fttui

ROWS = json.loads((ROOT / "tests" / "data" / "report_rows.json").read_text())["rows"]


def _export_file(tmp_path, rows, name: str, machine: str):
    path = tmp_path / name
    with Store(tmp_path / f"{name}.sqlite") as s:
        for r in rows:
            s.put(r)
        with open(path, "w") as f:
            export(s, f, machine=machine)
    return path


def test_export_then_import_round_trips_every_column_and_keeps_the_machine(tmp_path):
    src = _export_file(tmp_path, ROWS[:5], "a.jsonl", "box-a")
    lines = src.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["schema"] == SCHEMA_VERSION and header["machine"] == "box-a" and header["rows"] == 5
    with Store(tmp_path / "dest.sqlite") as dest:
        rep = import_files(dest, [src])
        assert sorted(rep.added) == sorted(r["run_id"] for r in ROWS[:5]) and not rep.conflicts
        with Store(tmp_path / "a.jsonl.sqlite") as orig:
            for r in orig.rows(kind=None):
                got = dest.get(r["run_id"])
                env = got.pop("env")
                want_env = dict(r.pop("env") or {})
                assert got == r
                assert env["hostname"] == want_env.get("hostname", "box-a") and env["imported_from"] == "box-a"
        # Idempotent: the same file again adds nothing.
        again = import_files(dest, [src])
        assert not again.added and len(again.same) == 5 and not again.conflicts
        assert len(dest.rows(kind=None)) == 5


def test_a_conflicting_row_is_reported_and_never_overwritten(tmp_path):
    src = _export_file(tmp_path, ROWS[:2], "a.jsonl", "box-a")
    changed = dict(ROWS[0], samples_per_s=123.0)
    with Store(tmp_path / "dest.sqlite") as dest:
        dest.put(changed)
        rep = import_files(dest, [src])
        assert rep.conflicts == [(ROWS[0]["run_id"], ["samples_per_s"])]
        assert rep.added == [ROWS[1]["run_id"]]
        assert dest.get(ROWS[0]["run_id"])["samples_per_s"] == 123.0


def test_rows_of_an_older_schema_are_migrated(tmp_path):
    old = {k: v for k, v in ROWS[0].items() if k not in {c for cols in store_mod._ADDED.values() for c in cols}}
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps({"fttui_export": 1, "schema": 1, "machine": "old-box", "rows": 1}) + "\n"
                    + json.dumps(old) + "\n")
    with Store(tmp_path / "dest.sqlite") as dest:
        rep = import_files(dest, [path])
        assert rep.added == [old["run_id"]]
        got = dest.get(old["run_id"])
    # What the store's schema-4 migration does to an old run row, the import does too.
    assert got["host_measure"] == store_mod.HOST_MEASURE_BEFORE_4
    assert got["peak_tree_rss_mb"] == old["peak_host_rss_mb"]
    assert got["env"]["imported_from"] == "old-box"


@pytest.mark.parametrize("content, message", [
    ("", "empty file"),
    ('{"hello": 1}\n', "not an fttui export header"),
    ('{"fttui_export": 1, "schema": 999}\n', "newer than this fttui"),
    ('{"fttui_export": 1, "schema": 1}\n{"run_id": "x"\n', ":2: malformed JSON"),
    ('{"fttui_export": 1, "schema": 1}\n{"run_id": "x", "mismatch": {}}\n', ":2: unknown column(s) for schema 1: mismatch"),
    ('{"fttui_export": 1, "schema": 1}\n{"kind": "run"}\n', ":2: a row needs a run_id"),
])
def test_bad_files_are_one_line_and_write_nothing(tmp_path, content, message):
    good = _export_file(tmp_path, ROWS[:2], "good.jsonl", "box-a")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    with Store(tmp_path / "dest.sqlite") as dest:
        with pytest.raises(ImportFileError) as e:
            import_files(dest, [good, bad])
        assert message in str(e.value) and "\n" not in str(e.value)
        assert dest.rows(kind=None) == []


def test_cli_export_import_between_two_homes(tmp_path, monkeypatch):
    from tests.conftest import fttui_env

    a, b = tmp_path / "home-a", tmp_path / "home-b"
    with Store(a / "results.sqlite") as s:
        for r in ROWS[:3]:
            s.put(r)
    env_a, env_b = fttui_env(FTTUI_HOME=str(a)), fttui_env(FTTUI_HOME=str(b))
    out = tmp_path / "a.jsonl"
    res = run_fttui("results", "export", "--out", str(out), env=env_a)
    assert res.returncode == 0 and "exported 3 row(s)" in res.stderr
    res = run_fttui("results", "import", str(out), env=env_b)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "imported 3 row(s); 0 already there; 0 conflict(s)"
    res = run_fttui("results", "import", str(out), env=env_b)
    assert res.stdout.strip() == "imported 0 row(s); 3 already there; 0 conflict(s)"
    shown = json.loads(run_fttui("results", "--format", "json", env=env_b, check=True).stdout)
    assert sorted(r["run_id"] for r in shown) == sorted(r["run_id"] for r in ROWS[:3])
    # Bad input: one line, exit 2.
    res = run_fttui("results", "import", str(tmp_path / "missing.jsonl"), env=env_b)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    res = run_fttui("results", "import", env=env_b)
    assert res.returncode == 2 and "needs at least one FILE" in res.stderr
    assert sqlite3.connect(b / "results.sqlite").execute("select count(*) from runs").fetchone()[0] == 3


def test_report_over_two_machines_rows_puts_their_gpus_side_by_side(tmp_path):
    from tests.conftest import fttui_env

    same_work = [r for r in ROWS if r.get("model") == "baichuan2-7b" and r.get("method") == "full-zero3-offload"
                 and r.get("num_gpus") == 2 and r.get("batch_size") == 4]
    gpus = sorted({r["gpu"] for r in same_work})
    assert len(gpus) >= 2
    # Each machine exports its own rows; one of them holds the same card model as another.
    files = []
    for i, g in enumerate(gpus):
        rows = [dict(r, env=dict(r.get("env") or {}, hostname=f"box-{i}")) for r in same_work if r["gpu"] == g]
        files.append(_export_file(tmp_path, rows, f"m{i}.jsonl", f"box-{i}"))
    twin = dict(same_work[0], run_id=same_work[0]["run_id"] + "-twin", samples_per_s=0.5,
                env=dict(same_work[0].get("env") or {}, hostname="box-twin"))
    files.append(_export_file(tmp_path, [twin], "twin.jsonl", "box-twin"))
    env = fttui_env(FTTUI_HOME=str(tmp_path / "merged"))
    run_fttui("results", "import", *map(str, files), env=env, check=True)
    report = run_fttui("report", env=env, check=True).stdout
    across = report[report.index("## Across GPUs"):]
    lines = [ln for ln in across.splitlines() if ln.startswith("| baichuan2-7b")]
    assert "| machine |" in across.splitlines()[1] or "machine" in across.splitlines()[2]
    seen = {(ln.split("|")[3].strip(), ln.split("|")[4].strip()) for ln in lines}
    assert {(g, f"box-{i}") for i, g in enumerate(gpus)} <= seen
    assert (twin["gpu"], "box-twin") in seen  # the same card model on another machine: its own line
