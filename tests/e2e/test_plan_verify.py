"""`fttui plan --verify K` (issue 23): the fastest setup that fits, run for real (one 2-step
launch of tiny-lora under a host budget)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_fttui

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]  # one launch; minutes on a loaded 2-core machine


def test_verify_runs_the_fastest_setup_for_real(fttui_home):
    """--verify 1: one fresh 2-step launch of the fastest setup that fits, at the longest batch
    (synthetic tiny-lora: max_seq_len), under the host budget; its row is in the store."""
    from fttui.core.results.store import Store

    r = run_fttui("plan", "--profile", "tiny-lora", "--host-memory-limit", "200MiB", "--effective-batch", "8",
                  "--verify", "1", "--json", timeout=900)
    assert r.returncode == 0, r.stderr
    opts = json.loads(r.stdout)
    first = opts[0]
    assert first["fits"] and first["verified"] is True and first["verify_status"] == "completed"
    assert all("verified" not in o for o in opts[1:])
    with Store() as store:
        row = next(x for x in store.rows() if x["run_id"] == first["verify_run"])
    assert (row["batch_size"], row["grad_accum"], bool(row["gradient_checkpointing"])) == (
        first["batch_size"], first["grad_accum"], first["gradient_checkpointing"])
    assert row["status"] == "completed" and row["steps"] == 2 and row["max_seq_len"] == 128
    assert row["limits"]["host_memory"] == "200MiB" and row["forecast_s"] > 0  # forecast beside the measured time
