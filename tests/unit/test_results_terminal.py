"""`fttui results` as a table: every row named (run id, name) with its world size, the columns
picked for the width (COLUMNS, the terminal, 100 on a pipe), the status never cut (issue 27.6)."""

from __future__ import annotations

from fttui.core.results.terminal import COLUMNS, fit_table
from tests.conftest import fttui_env, run_fttui
from tests.tui.fixtures import fill_store, make_row


def _lines(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.strip()]


def test_piped_table_fits_100_columns_and_names_every_row(fttui_home):
    rows = fill_store()
    env = fttui_env()
    env.pop("COLUMNS", None)
    out = run_fttui("results", env=env, check=True).stdout
    lines = _lines(out)
    assert max(len(ln.rstrip()) for ln in lines) <= 100
    head = lines[0].split()
    assert head[0] == "run" and "name" in head and "world" in head and head[-1] == "status"
    for r in rows:  # the whole id and the whole status of each row
        line = next(ln for ln in lines if ln.startswith(r["run_id"] + " "))
        assert line.rstrip().endswith(r["status"] + (" (cpu)" if r["status"] == "oom" else ""))
    two = next(ln for ln in lines if ln.startswith("20231114-221420-demo-lora-0002"))
    assert two.split()[head.index("world")] == "2"  # the 2-rank row is told from the others


def test_columns_env_is_honoured(fttui_home):
    fill_store()
    narrow = _lines(run_fttui("results", env=fttui_env(COLUMNS="72"), check=True).stdout)
    assert max(len(ln.rstrip()) for ln in narrow) <= 72
    assert narrow[0].split()[0] == "run" and narrow[0].split()[-1] == "status"
    assert "completed" in narrow[1] and "oom (cpu)" in "\n".join(narrow)
    wide = _lines(run_fttui("results", env=fttui_env(COLUMNS="250"), check=True).stdout)
    assert {"dataset", "GPUs", "accum", "seq", "tokens/s", "time", "host"} <= set(wide[0].split())  # every column
    assert "alpaca-1k" in wide[1] and "TinyLlama-1.1B" in "\n".join(wide)


def test_fit_cuts_long_names_not_the_status():
    rows = [make_row("20231114-221320-demo-lora-0001") | {"profile": "a-very-long-profile-name-indeed"}]
    full_headers, _ = fit_table(rows, 1000)
    assert full_headers == [c.header for c in COLUMNS]  # a wide terminal shows every column
    headers, body = fit_table(rows, 70)  # the least important columns go first (name after samples/s)
    assert headers == ["run", "method", "world", "samples/s", "status"], headers
    assert body[0][0] == "20231114-221320-demo-lora-0001" and body[0][-1] == "completed"
    three = [c for c in COLUMNS if c.header in ("run", "name", "status")]
    headers, body = fit_table(rows, 55, three)
    assert headers == ["run", "name", "status"] and body[0][-1] == "completed"
    assert body[0][1] == "a-very-long…"  # cut just enough: 30 + 2 + 12 + 2 + 9 = 55
    assert fit_table(rows, 40, three)[0] == ["run", "status"]  # below its shortest cut it goes


def test_world_cell_of_a_rank_clash_says_what_was_claimed_and_what_ran():
    """A row whose two processes each claimed rank 0 of world 1 (issue 27.2) reads "1 (ran 2)"."""
    row = make_row("20231114-221320-demo-lora-0001") | {
        "world_size": 2, "mismatch": {"world_size": {"stated": 1, "observed": 2, "note": "RANK CLASH: ..."}}}
    headers, body = fit_table([row], 1000)
    assert body[0][headers.index("world")] == "1 (ran 2)"
