"""A results store that cannot be written (issue 40 item 4): a run over a corrupt store ends
saying that its row was not saved, where it is kept and how to mend the store; once the store is
moved aside, `fttui results` lists the row without running anything again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import fttui_env, run_fttui

pytestmark = pytest.mark.e2e


def test_a_run_over_a_corrupt_store_says_so_and_its_row_is_stored_once_the_store_is_moved_aside(fttui_home):
    store = fttui_home / "results.sqlite"
    fttui_home.mkdir(parents=True, exist_ok=True)
    store.write_bytes(b"this is not sqlite" * 100)
    proc = run_fttui("run", "--profile", "tiny-lora", "--headless", "--set", "train.max_steps=2", env=fttui_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the training completed: its code (docs/architecture.md)
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert "COMPLETED" in lines
    run_dir = Path(lines[0].split("(", 1)[1].rstrip(")"))
    last = lines[-1]
    mend = f"mv {store} {store}.damaged"
    assert last.startswith("ROW NOT SAVED in the results store"), last
    assert str(run_dir / "row.json") in last and mend in last and "not a readable results store" in last, last
    assert json.loads((run_dir / "status.json").read_text())["row_saved"] is False

    broken = run_fttui("results", env=fttui_env())  # the store itself: one line with the same mend
    assert broken.returncode == 2 and mend in broken.stderr and "Traceback" not in broken.stderr
    assert len(broken.stderr.strip().splitlines()) == 1, broken.stderr

    store.rename(store.with_name(store.name + ".damaged"))  # the mend the line names
    shown = run_fttui("results", "--format", "json", env=fttui_env(), check=True)
    rows = json.loads(shown.stdout)
    kept = json.loads((run_dir / "row.json").read_text())
    assert [r["run_id"] for r in rows] == [run_dir.name]
    for key in ("status", "steps", "samples", "tokens", "samples_per_s", "tokens_per_s", "loss", "duration_s",
                "peak_host_rss_mb", "model", "method"):
        assert rows[0][key] == kept[key], key
    assert json.loads((run_dir / "status.json").read_text())["row_saved"] is True
    again = run_fttui("results", "--format", "json", env=fttui_env(), check=True)  # stored once
    assert [r["run_id"] for r in json.loads(again.stdout)] == [run_dir.name]
    attach = run_fttui("attach", run_dir.name, env=fttui_env(), check=True)  # no line once stored
    assert "ROW NOT SAVED" not in attach.stdout
