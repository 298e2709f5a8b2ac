"""Hostile text in rows and names (issue 36, items 3 and 4): nothing a row carries reaches a
terminal as a control byte or a spreadsheet as a formula; an import that carries one is refused
in one line naming the row and the field; a row received from a run is stored inert."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from fttui.core.base.inert import control_chars, csv_cell, inert
from fttui.core.results.store import SCHEMA_VERSION, Store
from tests.conftest import run_fttui

#: a title change (OSC 0), a clipboard write (OSC 52), a screen clear, a bell, a direction override
HOSTILE = "m\x1b]0;pwned\x07x\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2J\u202ey\rz"
#: any control character but newline; SGR colours are fttui's own only where it styles, never here
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
FORMULA = "=cmd|' /C calc'!A0"


def test_inert_escapes_what_a_terminal_obeys_and_keeps_the_rest():
    assert inert("plain-name_1.0 Ünïcode 模型") == "plain-name_1.0 Ünïcode 模型"
    out = inert(HOSTILE)
    assert not CONTROL.search(out)
    assert out == "m\\x1b]0;pwned\\x07x\\x1b]52;c;ZWNobyBwd25lZA==\\x07\\x1b[2J\\u202ey\\x0dz"
    assert inert("a\tb\nc") == "a b c" and inert("a\tb\nc", lines=True) == "a\tb\nc"
    assert inert("lone \ud800 surrogate").encode("utf-8") == b"lone \\ud800 surrogate"
    assert inert(inert(HOSTILE)) == inert(HOSTILE)  # once is enough
    assert control_chars(HOSTILE) == ["\\x1b", "\\x07", "\\u202e", "\\x0d"]


@pytest.mark.parametrize("cell, out", [
    ("=1+1", "'=1+1"), ("+SUM(A1)", "'+SUM(A1)"), ("-2+3", "'-2+3"), ("@cmd", "'@cmd"),
    ("\t=1", "' =1"), ("\r=1", "'\\x0d=1"), (FORMULA, "'" + FORMULA),
    ("-1.5", "-1.5"), ("+3", "+3"), ("1e-3", "1e-3"), ("-", "-"), ("", ""), ("qwen-7b", "qwen-7b"),
])
def test_csv_cells_that_start_like_a_formula_are_text(cell, out):
    assert csv_cell(cell) == out


def _export(tmp_path, rows):
    path = tmp_path / "rows.jsonl"
    head = {"fttui_export": 1, "schema": SCHEMA_VERSION, "machine": "m", "exported_at": "2026", "rows": len(rows)}
    path.write_text("\n".join(json.dumps(x) for x in [head, *rows]) + "\n")
    return path


@pytest.mark.parametrize("field, value", [
    ("model", HOSTILE), ("run_id", "r\x1b[2J"), ("dataset", "d\u202e"), ("error", "boom\x07"),
    ("env", {"hostname": "h\x1b]0;t\x07"}), ("env", {"k\x1b": "v"}),
])
def test_import_refuses_a_control_character_naming_row_and_field(fttui_home, tmp_path, field, value):
    row = {"run_id": "bad1", "status": "completed", field: value}
    path = _export(tmp_path, [{"run_id": "ok", "status": "completed"}, row])
    proc = run_fttui("results", "import", str(path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr
    assert len(err.strip().splitlines()) == 1 and not CONTROL.search(err), repr(err)
    assert f": {field}: carries control characters" in err and "nothing imported" in err
    assert f"row {inert(row['run_id'])}:" in err
    with Store() as s:
        assert s.rows(kind=None) == []


def _hostile_rows():
    base = {"kind": "run", "status": "completed", "method": "lora", "batch_size": 2, "max_seq_len": 64,
            "samples_per_s": 1.5, "tokens_per_s": -2.0, "num_gpus": 0, "duration_s": 3.0}
    return [
        base | {"run_id": "r1\x1b[2J", "profile": "p\x1b]0;t\x07", "model": HOSTILE, "dataset": FORMULA,
                "gpu": "@SUM(1)", "error": "line1\nline2\x1b[31m"},
        base | {"run_id": "r2", "profile": "+x", "model": "-1+1", "dataset": "ok", "gpu": "\tcpu",
                "status": "failed", "error": "=HYPERLINK(\"http://example.invalid\")"},
    ]


def test_a_received_row_is_stored_inert_and_every_output_is_clean(fttui_home, tmp_path):
    with Store() as s:
        for r in _hostile_rows():
            s.put(r)
        stored = s.rows(kind=None)
    assert len(stored) == 2  # never lost
    for r in stored:
        for k, v in r.items():
            if isinstance(v, str):  # a stored text keeps its tabs and lines, nothing else
                assert not CONTROL.search(v.replace("\t", " ")), (k, v)
    assert any(r["model"] == inert(HOSTILE, lines=True) for r in stored)
    assert any(r["error"] == "line1\nline2\\x1b[31m" for r in stored)  # its lines kept, the escape shown

    for fmt in ("table", "markdown", "csv", "json"):
        out = run_fttui("results", "--format", fmt, check=True).stdout
        assert not CONTROL.search(out), (fmt, out)
    rows = list(csv.reader(io.StringIO(run_fttui("results", "--format", "csv", check=True).stdout)))
    for row in rows[1:]:
        for cell in row:
            assert not cell.startswith(("=", "+", "@", "\t", "\r")) and not (cell.startswith("-") and cell != "-"
                                                                              and not _number(cell)), row
    md = run_fttui("report", check=True).stdout
    assert not CONTROL.search(md)
    out = tmp_path / "rep"
    run_fttui("report", "--out", str(out), check=True)
    for f in out.iterdir():
        if f.suffix in (".md", ".csv"):
            text = f.read_text()
            assert not CONTROL.search(text), f.name
        if f.suffix == ".csv":
            for row in list(csv.reader(io.StringIO(f.read_text())))[1:]:
                for cell in row:
                    assert not cell.startswith(("=", "+", "@", "\t", "\r")), (f.name, row)
                    assert not cell.startswith("-") or cell == "-" or _number(cell), (f.name, row)


def _number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def test_a_chart_label_with_dollars_is_drawn_as_text(tmp_path):
    pytest.importorskip("matplotlib")
    from fttui.core.results.charts import Bar, ChartSpec, render

    spec = ChartSpec(name="x", title="t $\\frac{1}{$", xlabel="samples/s",
                     bars=[Bar(label="m$\\invalid{$\x1b]0;t\x07", group="g$", value=1.0, note="", run_id="r")])
    assert render(spec, tmp_path / "x.png").stat().st_size > 0
