"""The row flags a training precision other than the profile's (issue 14: stated vs observed)."""

from __future__ import annotations

from fttui.core.run.files.events import parse_event
from fttui.core.run.row.row_figures import mismatch
from fttui.core.run.fold.state import RunState


def _snap(events):
    st = RunState()
    for e in events:
        st.apply(e)
    return st.snapshot()


def _start(rank: int, precision: str | None) -> dict:
    return {"event": "start", "t": 1.0, "rank": rank, "world_size": 2, "micro_batch": 2, "grad_accum": 1,
            "max_seq_len": 64, "total_steps": 1, "config": {}, "precision": precision}


def test_precision_that_ran_differs_from_the_profile():
    events = [_start(1, "fp32"), _start(0, "bf16")]
    stated = {"batch_size": 2, "grad_accum": 1, "max_seq_len": 64, "world_size": 2, "precision": "fp16"}
    records = [parse_event(e) for e in events]
    assert mismatch(stated, _snap(events), records)["precision"] == {"stated": "fp16", "observed": "bf16"}


def test_same_precision_or_nothing_observed_is_no_mismatch():
    stated = {"batch_size": 2, "grad_accum": 1, "max_seq_len": 64, "world_size": 2, "precision": "bf16"}
    for events in ([_start(0, "bf16")], [_start(0, None)], []):
        assert "precision" not in mismatch(stated, _snap(events), map(parse_event, events))


def test_worker_reads_the_precision_back_from_the_trainer_and_the_engine():
    from types import SimpleNamespace

    from fttui.worker.runtime import training_precision

    assert training_precision(SimpleNamespace(bf16=True, fp16=False)) == "bf16"
    assert training_precision(SimpleNamespace(bf16=False, fp16=True)) == "fp16"
    assert training_precision(SimpleNamespace(bf16=False, fp16=False)) == "fp32"
    engine = SimpleNamespace(bfloat16_enabled=lambda: False, fp16_enabled=lambda: True)
    assert training_precision(SimpleNamespace(bf16=True, fp16=False), engine) == "fp16"
