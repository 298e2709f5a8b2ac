"""The end-of-run lines of issue 25 (why slow, data wait, the creep warning) and this run's MFU
against the store's earlier rows of the same model, method, sharding and card."""

from __future__ import annotations

from fttui.cli.insight_lines import insight_lines
from fttui.core.results.compare import mfu_against, mfu_history_text


def _row(run_id: str, started: str, mfu, **kw) -> dict:
    return {"run_id": run_id, "started_at": started, "status": "completed", "model": "m", "method": "lora",
            "sharding": "none", "gpu": "NVIDIA H100 80GB HBM3", "mfu": mfu, **kw}


def test_mfu_against_earlier_comparable_rows():
    me = _row("r9", "2026-01-09", [0.30, 0.32])
    rows = [_row("r1", "2026-01-01", [0.40, 0.44]), _row("r2", "2026-01-02", [0.42]),
            _row("r3", "2026-01-03", [0.46]),
            _row("x1", "2026-01-04", [0.9], method="full"),  # another method
            _row("x2", "2026-01-05", [0.9], gpu="NVIDIA A100-SXM4-40GB"),  # another card
            _row("x3", "2026-01-06", [0.9], status="oom"),  # not completed
            _row("x4", "2026-02-01", [0.9]),  # later
            _row("x5", "2026-01-07", None), me]
    mine, median, n = mfu_against(me, rows)
    assert (round(mine, 4), round(median, 4), n) == (0.31, 0.42, 3)
    text = mfu_history_text(me, rows)
    # 0.31 against 0.42: (0.31 - 0.42) / 0.42 = -26%
    assert text == "MFU 31% against 42% (median of 3 earlier runs of this model, method and card): 26% lower"
    assert mfu_history_text(_row("c", "2026-01-09", None), rows) is None  # a CPU run: nothing said
    assert mfu_history_text(me, [me]) is None


def test_insight_lines():
    row = _row("r9", "2026-01-09", None, why_slow="input pipeline: 38% of step time waiting for data",
               data_wait_pct=38.2, step_outliers=2, memory_warning="rank 0 RSS +32 MiB/step: out of memory in ~20 steps")
    assert insight_lines(row, rows=[]) == [
        "  why slow: input pipeline: 38% of step time waiting for data (data wait 38% of step time, 2 step-time outliers)",
        "  memory creep warned: rank 0 RSS +32 MiB/step: out of memory in ~20 steps"]
    assert insight_lines(_row("q", "2026", None), rows=[]) == []
