"""The step measured by parts (the row's ``step_fit``, fttui.core.results.stepparts) and the forecast
calibrated from one such row (fttui.core.experiments.stepmodel): issue 23's one-run calibration."""

from __future__ import annotations

import json

import pytest

from fttui.core.experiments.forecast import forecast
from fttui.core.experiments.stepmodel import pass_flops, row_parts, step_model
from fttui.core.models.flops import ModelShape, flops_per_token
from fttui.core.profiles import load_profile
from tests.helpers import profile_of
from fttui.core.results.stepparts import step_parts
from fttui.core.run.files import rundir
from fttui.core.run.files.events import parse_event
from fttui.core.run.fold.state import RunState
from fttui.core.run.files.statusfile import FinalStatus
from fttui.core.run.row.summary import build_row

SHAPE = ModelShape(params_total=10**6, params_trainable=10**4, vocab=1000, hidden=64, layers=2, attn_dim=64,
                   tied=False)
FIXED_STEP, FIXED_PASS, S_PER_FLOP, WARM = 0.012, 0.004, 2e-11, 0.3


def _pass_s(batch: int, length: int) -> float:
    return FIXED_PASS + S_PER_FLOP * batch * length * flops_per_token(SHAPE, "lora", length).total


def _events(n: int = 20, batch: int = 4, accum: int = 2, lengths=(64, 96, 128)) -> list[dict]:
    """A run whose micro-batches are padded to lengths in turn (real data), each pass timed as the
    model above, each step ``FIXED_STEP`` beyond its passes, the first one ``WARM`` slower."""
    out = [{"event": "start", "t": 1.0, "rank": 0, "total_steps": n, "world_size": 1}]
    tp = xl = passes = 0
    tt, k = 0.0, 0
    for s in range(1, n + 1):
        pt = 0.0
        for _ in range(accum):
            length = lengths[k % len(lengths)]
            k += 1
            pt += _pass_s(batch, length)
            tp, xl, passes = tp + batch * length, xl + batch * length * length, passes + 1
        tt += FIXED_STEP + pt + (WARM if s == 1 else 0.0)
        out.append({"event": "step", "t": 2.0 + tt, "rank": 0, "step": s, "total_steps": n, "samples": s * batch * accum,
                    "tokens": tp, "tokens_padded": tp, "tokens_padded_x_len": xl, "passes": passes, "pass_time": pt,
                    "train_time": tt, "step_time": FIXED_STEP + pt})
    out.append({"event": "end", "t": 3.0 + tt, "rank": 0, "step": n, "train_time": tt, "samples": n * batch * accum,
                "pass_floor_s": _pass_s(1, 16), "pass_floor_tokens": 16})
    return out


def _by_hand(events: list[dict]) -> dict:
    """The parts computed again from the raw lines (not the fold): steps 2.. of rank 0."""
    steps = [e for e in events if e["event"] == "step"]
    later = steps[1:]
    n = len(later)
    passes = later[-1]["passes"] - steps[0]["passes"]
    step_s = (later[-1]["train_time"] - steps[0]["train_time"]) / n
    pass_s = sum(e["pass_time"] for e in later) / passes
    return {"step_s": step_s, "pass_s": pass_s, "passes": passes / n, "fixed_step_s": step_s - passes / n * pass_s,
            "tokens": (later[-1]["tokens_padded"] - steps[0]["tokens_padded"]) / passes,
            "tokens_x_len": (later[-1]["tokens_padded_x_len"] - steps[0]["tokens_padded_x_len"]) / passes,
            "warmup_s": events[-1]["train_time"] - len(steps) * step_s, "steps": n}


def _row(tmp_path, events: list[dict]) -> dict:
    path = tmp_path / "run"
    path.mkdir(exist_ok=True)
    (path / "profile.json").write_text(json.dumps(load_profile("tiny-lora").to_dict()))
    (path / "command.json").write_text(json.dumps({"argv": ["x"], "env": {}, "kind": "run", "group": None}))
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    snap = RunState(warmup_exclude_steps=1).replay(events).snapshot()
    return build_row(rundir.RunDir(path), snap, FinalStatus(status="completed", returncode=0), t_launch=0.5, t_end=9.0)


def test_the_row_keeps_the_step_parts_the_events_give(tmp_path):
    events = _events()
    fit = _row(tmp_path, events)["step_fit"]
    want = _by_hand(events)
    for k, v in want.items():
        assert fit[k] == pytest.approx(v, rel=1e-4, abs=1e-6), k
    assert fit["fixed_step_s"] == pytest.approx(FIXED_STEP, rel=1e-4) and fit["passes"] == 2
    assert fit["warmup_s"] == pytest.approx(WARM, rel=0.05)  # step 1 also fed other lengths than the mean
    assert fit["floor_s"] == pytest.approx(_pass_s(1, 16), rel=1e-4) and fit["floor_tokens"] == 16
    # the fold over the typed records is the same function the row uses
    assert step_parts([parse_event(e) for e in events]) == fit
    # an older fttui's events (no pass_time): no parts, never a guess
    old = [{k: v for k, v in e.items() if k not in ("pass_time", "passes")} for e in events]
    assert _row(tmp_path, old)["step_fit"] is None


def test_one_row_with_its_floor_forecasts_other_sizes(tmp_path):
    """One synthetic-like row (every micro-batch alike) plus its pass floor: the line through the two
    gives the fixed cost per pass and the time per FLOP, the row the fixed cost per step."""
    fit = _row(tmp_path, _events(lengths=(128,)))["step_fit"]
    stored = {"run_id": "r", "kind": "run", "status": "completed", "model": "m", "method": "lora",
              "sharding": "none", "precision": "fp32", "gpu": "cpu", "world_size": 1, "grad_accum": 2, "steps": 20,
              "tokens_padded": 20 * 2 * 4 * 128, "tokens_padded_per_s": 1000.0, "duration_s": 5.0,
              "flops_per_token": 1e6, "gradient_checkpointing": False, "step_fit": json.dumps(fit)}
    model = step_model([stored], SHAPE, "lora")
    assert model.fixed_pass_s == pytest.approx(FIXED_PASS, rel=1e-3)
    assert model.seconds_per_flop == pytest.approx(S_PER_FLOP, rel=1e-3)
    assert model.fixed_step_s == pytest.approx(FIXED_STEP, rel=1e-3) and "pass floor measured" in model.words
    for batch, seq, accum in ((2, 64, 1), (16, 256, 1), (8, 96, 4)):
        prof = profile_of({"model": {"name_or_path": "m"}, "method": "lora", "sharding": "none",
                           "train": {"batch_size": batch, "grad_accum": accum, "precision": "fp32", "max_steps": 10,
                                     "gradient_checkpointing": False}, "devices": {"gpus": 0, "nodes": 1},
                           "data": {"max_seq_len": seq}})
        f = forecast(prof, SHAPE, samples=1000, fed_tokens_per_sample=seq, real_tokens_per_sample=seq,
                     rows=[stored], card="cpu", cards=1)
        want = FIXED_STEP + accum * _pass_s(batch, seq)
        assert f.step_seconds == pytest.approx(want, rel=1e-3), (batch, seq, accum)
        assert f.run_seconds == pytest.approx(fit["warmup_s"] + 10 * want, rel=1e-3)
        assert f.fixed_seconds == pytest.approx(FIXED_PASS, rel=1e-3)
        assert f.step_fixed_seconds == pytest.approx(FIXED_STEP, rel=1e-3) and f.calibrated


def test_the_row_forecasts_its_own_run(tmp_path):
    """Real data (lengths differ per micro-batch): the forecast at the row's own setting, fed its
    measured lengths, is its own training time."""
    events = _events()
    fit = _row(tmp_path, events)["step_fit"]
    stored = {"run_id": "r", "kind": "run", "status": "completed", "model": "m", "method": "lora",
              "sharding": "none", "precision": "fp32", "gpu": "cpu", "world_size": 1, "grad_accum": 2,
              "steps": 20, "duration_s": events[-1]["train_time"], "tokens_padded": events[-2]["tokens_padded"],
              "tokens_padded_per_s": 1000.0, "flops_per_token": 1e6, "step_fit": fit}
    prof = profile_of({"model": {"name_or_path": "m"}, "method": "lora", "sharding": "none",
                       "train": {"batch_size": 4, "grad_accum": 2, "precision": "fp32", "max_steps": 20,
                                 "gradient_checkpointing": False}, "devices": {"gpus": 0, "nodes": 1},
                       "data": {"max_seq_len": 128}})
    fed = fit["tokens"] / 4
    f = forecast(prof, SHAPE, samples=1000, fed_tokens_per_sample=fed, real_tokens_per_sample=fed,
                 rows=[stored], card="cpu", cards=1, attn_len=fit["tokens_x_len"] / fit["tokens"])
    assert f.run_seconds == pytest.approx(events[-1]["train_time"], rel=1e-3)


def test_pass_flops_count_attention_at_each_micro_batch_length():
    a, b = pass_flops(SHAPE, "full", False, 64, 64 * 64), pass_flops(SHAPE, "full", False, 128, 128 * 128)
    assert a == pytest.approx(64 * flops_per_token(SHAPE, "full", 64).total)
    assert b == pytest.approx(128 * flops_per_token(SHAPE, "full", 128).total)
    # two micro-batches of 64 and 128: the sum, not 192 tokens at their mean length
    assert pass_flops(SHAPE, "full", False, 192, 64 * 64 + 128 * 128) == pytest.approx(a + b)


def test_rows_without_parts_or_floor():
    assert row_parts({"step_fit": json.dumps({"s_per_token": 1e-4, "fixed_s": 0.05})}) is None  # an older fttui's
    assert step_model([{"step_fit": None}], SHAPE, "lora") is None
    parts = {"pass_s": 0.1, "fixed_step_s": 0.01, "tokens": 1024, "tokens_x_len": 1024 * 128, "floor_s": None}
    m = step_model([{"step_fit": parts}], SHAPE, "lora")
    assert m.fixed_pass_s == 0 and "no fixed cost per micro batch" in m.words
    assert m.seconds_per_flop == pytest.approx(0.1 / pass_flops(SHAPE, "lora", False, 1024, 1024 * 128))
    # a launch-bound card: the pass no slower than its floor, no slope to measure, said so
    m = step_model([{"step_fit": {**parts, "floor_s": 0.11, "floor_tokens": 16}}], SHAPE, "lora")
    assert m.fixed_pass_s == 0 and "no longer than its pass floor" in m.words


def test_on_a_card_a_pass_takes_the_longer_of_its_floor_and_its_work():
    """The H100's figures (docs/forecast.md, "On the card"): a 4-layer Llama-2-7B shape, LoRA, one
    row at 8 x 512 (pass 61.9 ms, floor 41.4 ms, 10.5 ms outside the passes). Overlapped, its
    forecast of 4 x 256 and 16 x 1024 is within 16% of their measured steps (46.0 and 221.8 ms);
    as a sum of floor and work it was 1.24 and 0.60."""
    shape = ModelShape(params_total=894_000_000, params_trainable=4_194_304, vocab=32000, hidden=4096,
                       layers=4, attn_dim=4096, tied=False)
    cal = {"fixed_step_s": 0.010457, "floor_s": 0.041429, "floor_tokens": 16.0, "pass_s": 0.061904,
           "passes": 1.0, "tokens": 4043.9, "tokens_x_len": 2070493.3, "warmup_s": 0.7}
    row = {"step_fit": cal, "gradient_checkpointing": True}
    card = step_model([row], shape, "lora", overlap=True)
    assert card.overlap and card.fixed_pass_s == pytest.approx(0.041429)
    assert "the longer of 41.4 ms" in card.words
    f_cal = pass_flops(shape, "lora", True, 4043.9, 2070493.3)
    assert card.pass_seconds(f_cal) == pytest.approx(0.061904)  # the row's own pass, through the origin
    small, big = pass_flops(shape, "lora", True, 1024, 1024 * 256), pass_flops(shape, "lora", True, 15655.1, 16030772.1)
    assert card.pass_seconds(small) == pytest.approx(0.041429)  # launch-bound: the floor
    assert card.step_seconds(small, 1) / 0.045967 == pytest.approx(1.13, abs=0.03)
    assert card.step_seconds(big, 1) / 0.221827 == pytest.approx(1.16, abs=0.03)
    line = step_model([row], shape, "lora")
    assert line.step_seconds(big, 1) / 0.221827 < 0.7  # the sum model's miss
    # a card's row no longer than its floor: launch-bound, said so, a bound on the time per FLOP
    slow = step_model([{**row, "step_fit": {**cal, "pass_s": 0.040}}], shape, "lora", overlap=True)
    assert "launch-bound" in slow.words and slow.pass_seconds(small) == pytest.approx(0.041429)
