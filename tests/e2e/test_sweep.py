"""End to end: `fttui sweep` over a 2x2 grid with a host-memory limit that stops the big cells."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_fttui
from tests.helpers import processes_mentioning

pytestmark = pytest.mark.e2e


def test_sweep_rows_matrix_and_skipped_cells(tmp_path, fttui_home):
    out = tmp_path / "sweep.md"
    # Cells run in grid order: (2,32) (2,64) (128,32) (128,64). Batch 128 runs out of memory under
    # 40MiB at either length; (128,64) dominates the OOM cell (128,32) and is skipped.
    # --json prints the cells, --out writes the Markdown table (what stdout holds without --json)
    proc = run_fttui("sweep", "--profile", "tiny-lora", "--grid", "batch_size=2,128", "--grid", "max_seq_len=32,64",
                     "--steps", "2", "--host-memory-limit", "40MiB", "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(proc.stdout)
    text = out.read_text()
    lines = text.splitlines()
    assert lines[0].startswith("## tiny-lora: sweep ")

    # The row table: one row per cell, in grid order.
    rows = [ln for ln in lines if ln.startswith("| ")]
    header = rows[0]
    for col in ("batch_size", "max_seq_len", "status", "peak_mem_gb", "s_per_step", "samples_per_s", "run"):
        assert col in header
    cells = {}
    for ln in rows:
        parts = [p.strip() for p in ln.strip("|").split("|")]
        if parts[0].isdigit() and len(parts) > 3:
            cells[(int(parts[0]), int(parts[1]))] = parts
    assert set(cells) == {(2, 32), (2, 64), (128, 32), (128, 64)}
    assert cells[(2, 32)][2] == "completed" and cells[(2, 64)][2] == "completed"
    assert float(cells[(2, 32)][3]) > 0 and cells[(2, 32)][4] == "host RSS"
    assert cells[(128, 32)][2] == "OOM (cpu)"
    assert cells[(128, 64)][2].startswith("OOM (skipped") and "batch_size=128, max_seq_len=32" in cells[(128, 64)][2]
    assert cells[(128, 64)][-1] == ""  # never launched

    # The matrix: batch_size down, max_seq_len across, "GB / s" cells, OOM cells marked.
    i = next(k for k, ln in enumerate(lines) if ln.startswith("| batch_size \\ max_seq_len"))
    matrix = [[p.strip() for p in ln.strip("|").split("|")] for ln in lines[i:i + 4]]
    assert matrix[0][1:] == ["32", "64"]
    assert matrix[2][0] == "2" and all(" GB / " in c for c in matrix[2][1:])
    assert matrix[3] == ["128", "OOM", "OOM (skipped)"]
    assert "host RSS memory" in text

    # Every cell that ran is a row of kind sweep in the store; the skipped one is not.
    stored = json.loads(run_fttui("results", "--kind", "sweep", "--format", "json", check=True).stdout)
    assert len(stored) == 3
    assert {r["kind"] for r in stored} == {"sweep"}
    assert len({r["group_id"] for r in stored}) == 1
    by = {(r["batch_size"], r["max_seq_len"]): r for r in stored}
    assert set(by) == {(2, 32), (2, 64), (128, 32)}
    assert by[(2, 32)]["status"] == by[(2, 64)]["status"] == "completed"
    assert by[(2, 32)]["steps"] == 2
    assert by[(128, 32)]["status"] == "oom" and by[(128, 32)]["oom_kind"] == "cpu"
    assert {r["run_id"] for r in stored} == {cells[k][-1] for k in by}
    for r in stored:
        assert not processes_mentioning(r["run_id"])

    # The JSON cells are the stored rows.
    assert res["profile"] == "tiny-lora" and not res["interrupted"]
    assert res["grid"] == {"batch_size": [2, 128], "max_seq_len": [32, 64]}
    assert [c["settings"] for c in res["cells"]] == [{"batch_size": b, "max_seq_len": n} for b in (2, 128) for n in (32, 64)]
    assert [c["status"] for c in res["cells"]] == ["completed", "completed", "oom", "skipped"]
    for c in res["cells"]:
        if c["run_id"] is None:
            assert c["status"] == "skipped" and c["skipped_because"]
            continue
        row = by[(c["settings"]["batch_size"], c["settings"]["max_seq_len"])]
        assert row["run_id"] == c["run_id"] and row["batch_size"] == c["row"]["batch_size"]
        assert row["samples_per_s"] == c["row"]["samples_per_s"]


@pytest.mark.slow
def test_sweep_of_two_sharded_ranks(fttui_home):
    """Each cell is a supervised `fttui run` launch of all ranks: two CPU ranks under FSDP
    (torchrun), one cell that fits and one that runs out of memory on a rank."""
    proc = run_fttui("sweep", "--profile", "tiny-lora", "--set", "devices.gpus=0", "--set", "devices.cpu_processes=2",
                     "--set", "sharding=fsdp", "--grid", "batch_size=1,64", "--steps", "1",
                     "--host-memory-limit", "128MiB", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stored = json.loads(run_fttui("results", "--kind", "sweep", "--format", "json", check=True).stdout)
    by = {r["batch_size"]: r for r in stored}
    assert set(by) == {1, 64}
    assert by[1]["status"] == "completed" and by[1]["steps"] == 1
    assert by[64]["status"] == "oom" and by[64]["oom_kind"] == "cpu"
    for r in stored:
        assert r["world_size"] == 2 and r["sharding"] == "fsdp"  # read back from the ranks
        assert len(r["peak_rank_rss_mb"]) == 2 or r["status"] == "oom"
        assert not processes_mentioning(r["run_id"])
