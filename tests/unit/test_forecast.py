"""The time and cost forecast before launch (fttui.core.experiments.forecast)."""

from __future__ import annotations

import json

import pytest

from fttui.core.experiments.forecast import calibration_rows, forecast, planned_steps
from fttui.core.models.flops import ModelShape, flops_per_token
from fttui.core.models.peaks import peak_tflops
from tests.conftest import run_fttui
from tests.helpers import profile_of

SHAPE = ModelShape(params_total=1_000_000, params_trainable=10_000, vocab=1000, hidden=64, layers=2,
                   attn_dim=64, tied=False)


def _profile(batch=8, accum=1, seq=128, gpus=0, method="lora", steps=100):
    return profile_of({"model": {"name_or_path": "m"}, "method": method, "sharding": "none",
                       "train": {"batch_size": batch, "grad_accum": accum, "precision": "bf16" if gpus else "fp32",
                                 "max_steps": steps, "gradient_checkpointing": False},
                       "devices": {"gpus": gpus, "nodes": 1}, "data": {"max_seq_len": seq}})


def _row(run_id, tokens_per_s, fpt, gpu="cpu", batch=8, seq=128, steps=100, fixed=0.0, precision="fp32"):
    tokens = batch * seq * steps
    step_s = batch * seq * fpt / (tokens_per_s * fpt) if tokens_per_s else 0
    return {"run_id": run_id, "kind": "run", "status": "completed", "model": "m", "method": "lora",
            "sharding": "none", "precision": precision, "gpu": gpu, "world_size": 1,
            "flops_per_token": fpt, "steps": steps, "tokens_padded": tokens, "duration_s": steps * (step_s + fixed),
            # the steady rate is measured over whole steps, the fixed cost included
            "tokens_padded_per_s": tokens / (steps * (step_s + fixed)) if tokens_per_s else tokens_per_s}


def test_planned_steps_from_epochs_and_max_steps():
    p = _profile(batch=4, accum=2, steps=-1).with_settings({"train.epochs": 2})
    assert planned_steps(p, samples=100, world=2) == 2 * 7  # ceil(100 / 16) = 7 per epoch
    assert planned_steps(_profile(steps=30), samples=10**6, world=1) == 30


def test_one_row_gives_the_rate_and_scales_with_tokens():
    fpt = flops_per_token(SHAPE, "lora", 128).total
    row = _row("r1", tokens_per_s=1000.0, fpt=fpt)
    f = forecast(_profile(), SHAPE, samples=800, fed_tokens_per_sample=128, real_tokens_per_sample=128,
                 rows=[row], card="cpu", cards=1)
    assert f.calibrated and f.rows == ["r1"]
    assert f.mfu_source.startswith("calibrated from 1 stored run of the same model, method, sharding and precision on CPU;")
    assert f.step_seconds == pytest.approx(8 * 128 / 1000.0, rel=1e-3)  # the row's own speed
    assert f.run_seconds == pytest.approx(100 * f.step_seconds, rel=1e-6)
    g = forecast(_profile(batch=16), SHAPE, samples=800, fed_tokens_per_sample=128, real_tokens_per_sample=100,
                 rows=[row], card="cpu", cards=1)
    assert g.step_seconds == pytest.approx(2 * f.step_seconds, rel=1e-6)
    assert g.tokens == 100 * 16 * 100


def test_rows_at_two_step_sizes_give_the_fixed_cost():
    fpt = flops_per_token(SHAPE, "lora", 128).total
    rows = [_row("a", 1000.0, fpt, batch=4, fixed=0.05), _row("b", 1000.0, fpt, batch=32, fixed=0.05)]
    f = forecast(_profile(batch=8), SHAPE, samples=800, fed_tokens_per_sample=128, real_tokens_per_sample=128,
                 rows=rows, card="cpu", cards=1)
    assert f.fixed_seconds == pytest.approx(0.05, rel=1e-3)
    assert f.step_seconds == pytest.approx(8 * 128 / 1000.0 + 0.05, rel=1e-3)


def test_gpu_rows_of_another_card_carry_their_mfu():
    fpt = flops_per_token(SHAPE, "lora", 128).total
    a100 = "NVIDIA A100-SXM4-80GB"
    tps = 0.4 * peak_tflops(a100, "bf16") * 1e12 / fpt  # a row at 40% MFU on an A100
    row = _row("x", tps, fpt, gpu=a100, precision="bf16")
    h100 = "NVIDIA H100 80GB HBM3"
    f = forecast(_profile(gpus=1), SHAPE, samples=800, fed_tokens_per_sample=128, real_tokens_per_sample=128,
                 rows=[row], card=h100, cards=1, price_per_card_hour=2.0, price_unit="USD")
    assert f.mfu == pytest.approx(0.4, rel=1e-3) and "scaled by peak" in f.mfu_source
    assert f.flop_rate == pytest.approx(0.4 * peak_tflops(h100, "bf16") * 1e12, rel=1e-3)
    assert f.cost == pytest.approx(2.0 * f.run_seconds / 3600, rel=1e-3)


def test_uncalibrated_says_so():
    f = forecast(_profile(gpus=1), SHAPE, samples=8, fed_tokens_per_sample=128, real_tokens_per_sample=128,
                 rows=[], card="NVIDIA H100 80GB HBM3", cards=1)
    assert not f.calibrated and f.mfu_source.startswith("uncalibrated: no stored run to calibrate from, so a default MFU")
    assert f.words().endswith("(uncalibrated: no stored run to calibrate from, so a default MFU of 30% for lora and "
                              "10.8 ms fixed per micro batch, 5.4 ms per layer)")
    f = forecast(_profile(), SHAPE, samples=8, fed_tokens_per_sample=128, real_tokens_per_sample=128,
                 rows=[], card="cpu", cards=1)
    assert f.mfu is None and "uncalibrated" in f.mfu_source and "CPU" in f.mfu_source
    # the stated default fixed cost per pass: 1.9 ms per layer on CPU ranks, 5.4 ms on a card
    assert f.fixed_seconds == pytest.approx(2 * 1.9e-3) and "and 3.8 ms fixed per micro batch" in f.mfu_source
    flops = 8 * 128 * flops_per_token(SHAPE, "lora", 128).total
    assert f.step_seconds == pytest.approx(flops / 5e9 + 2 * 1.9e-3, rel=1e-4)


def test_uncalibrated_forecast_orders_fewer_micro_batches_first():
    """The same effective batch in fewer, larger micro batches is forecast faster (the planner's
    order), not a tie: 4 x 8 < 2 x 16 < 1 x 32, by the default fixed cost of each pass."""
    times = [forecast(_profile(batch=b, accum=a), SHAPE, samples=3200, fed_tokens_per_sample=128,
                      real_tokens_per_sample=128, rows=[], card="cpu", cards=1).run_seconds
             for b, a in ((4, 8), (2, 16), (1, 32))]
    assert times == sorted(times) and len(set(times)) == 3


def test_only_completed_rows_of_the_same_kind_of_card_calibrate():
    fpt = 1e6
    rows = [_row("gpu", 10.0, fpt, gpu="NVIDIA H100 80GB HBM3"), {**_row("oom", 10.0, fpt), "status": "oom"},
            {**_row("other", 10.0, fpt), "model": "n"}, _row("same", 10.0, fpt)]
    chosen, score = calibration_rows(_profile(), rows, "cpu")
    assert [r["run_id"] for r in chosen] == ["same"] and score == 15


def test_estimate_json_has_the_forecast_and_bad_prices_are_one_line(tmp_path):
    out = json.loads(run_fttui("estimate", "--profile", "tiny-lora", "--json", check=True).stdout)
    fc = out["forecast"]
    assert set(fc) >= {"step_seconds", "run_seconds", "mfu", "mfu_source", "cost"}
    assert fc["cost"] is None and fc["mfu_source"].startswith("uncalibrated")
    prices = tmp_path / "p.toml"
    prices.write_text('"RTX 4090" = 0.7\n')
    p = run_fttui("estimate", "--profile", "tiny-lora", "--prices", str(prices))
    assert p.returncode == 2 and "no price for 'cpu'" in p.stderr and "Traceback" not in p.stderr
    prices.write_text('"RTX 4090" = 0.7\ncpu = 0.1\n')
    fc = json.loads(run_fttui("estimate", "--profile", "tiny-lora", "--prices", str(prices), "--json",
                              check=True).stdout)["forecast"]
    assert fc["cost"] == pytest.approx(0.1 * fc["run_seconds"] / 3600, rel=1e-2)


def test_one_row_gives_the_warm_up_beyond_its_steady_steps():
    """A row whose training time is longer than its steps at the steady rate (the first steps):
    the difference is added once to every forecast calibrated from it, not per step."""
    fpt = flops_per_token(SHAPE, "lora", 128).total
    row = _row("w", tokens_per_s=1000.0, fpt=fpt, steps=100)
    row["duration_s"] += 1.5  # 100 steps at the steady rate + 1.5 s of warm-up
    f = forecast(_profile(steps=100), SHAPE, samples=800, fed_tokens_per_sample=128, real_tokens_per_sample=128,
                 rows=[row], card="cpu", cards=1)
    assert f.warmup_seconds == pytest.approx(1.5, rel=1e-3)
    assert f.run_seconds == pytest.approx(row["duration_s"], rel=1e-4)  # its own setup: its own time
    g = forecast(_profile(steps=10), SHAPE, samples=800, fed_tokens_per_sample=128, real_tokens_per_sample=128,
                 rows=[row], card="cpu", cards=1)
    assert g.run_seconds == pytest.approx(1.5 + 10 * f.step_seconds, rel=1e-4) and "warm-up 1.5 s" in g.mfu_source


def test_accumulation_pays_the_fixed_cost_per_micro_batch():
    fpt = flops_per_token(SHAPE, "lora", 128).total
    rows = [_row("a", 1000.0, fpt, batch=4, fixed=0.05), _row("b", 1000.0, fpt, batch=32, fixed=0.05)]
    one = forecast(_profile(batch=8, accum=1), SHAPE, samples=800, fed_tokens_per_sample=128,
                   real_tokens_per_sample=128, rows=rows, card="cpu", cards=1)
    four = forecast(_profile(batch=2, accum=4), SHAPE, samples=800, fed_tokens_per_sample=128,
                    real_tokens_per_sample=128, rows=rows, card="cpu", cards=1)
    assert one.fixed_seconds == pytest.approx(0.05, rel=1e-3)
    assert four.step_seconds - one.step_seconds == pytest.approx(3 * 0.05, rel=1e-3)


def test_a_gpu_profile_of_no_known_card_gets_no_hours_from_a_cpu_default():
    """No card visible or named, or a card of no known peak, and no row of it: no time at all
    (a CPU's default rate says nothing of a card); the words say so and how to name the card
    (issue 40 item 7a). A card of known peak and a CPU profile are timed as before."""
    from fttui.core.experiments.forecast import NO_CARD

    kw = dict(samples=800, fed_tokens_per_sample=128, real_tokens_per_sample=128, rows=[], cards=1)
    f = forecast(_profile(gpus=1), SHAPE, card=NO_CARD, **kw)
    assert f.run_seconds is None and f.step_seconds is None and f.flop_rate is None and not f.calibrated
    assert f.words() == (
        "not forecast for the 100 steps: no GPU is visible here and no card is named; name the card the run will "
        "use with --card NAME (`fttui estimate --help` lists the cards fttui knows)"
    )
    assert "GFLOP/s" not in f.words() and " h " not in f.words()
    g = forecast(_profile(gpus=1), SHAPE, card="Imaginary Card 9000", price_per_card_hour=2.0, **kw)
    assert g.run_seconds is None and g.cost is None
    assert g.words().startswith("not forecast for the 100 steps: fttui knows no peak rate of 'Imaginary Card 9000'")
    # a row of that card times it (its own rate), a known card and the CPU by their defaults
    row = _row("x", 1000.0, flops_per_token(SHAPE, "lora", 128).total, gpu="Imaginary Card 9000", precision="bf16")
    assert forecast(_profile(gpus=1), SHAPE, card="Imaginary Card 9000", **{**kw, "rows": [row]}).run_seconds
    assert forecast(_profile(gpus=1), SHAPE, card="NVIDIA H100 80GB HBM3", **kw).run_seconds
    assert forecast(_profile(), SHAPE, card="cpu", **kw).run_seconds


def test_estimate_without_a_card_names_how_to_give_one(tmp_path):
    """`fttui estimate` of a GPU profile on a machine with no card: the plain line, no hours;
    `--card` names the card; the launch's forecast (the first ETA) is none rather than made up."""
    from tests.conftest import fttui_env

    env = {**fttui_env(), "FTTUI_FAKE_GPUS": str(tmp_path / "no-gpus.json")}  # no file: no card visible
    out = run_fttui("estimate", "--profile", "llama2-7b-lora", env=env, check=True).stdout
    line = out.strip().splitlines()[-1]
    assert line.startswith("time: not forecast for the ") and "no GPU is visible here and no card is named" in line
    assert "--card NAME" in line and "fttui estimate --help" in line and " h " not in line + " "
    fc = json.loads(run_fttui("estimate", "--profile", "llama2-7b-lora", "--json", env=env, check=True).stdout)
    assert fc["forecast"]["run_seconds"] is None
    named = run_fttui("estimate", "--profile", "llama2-7b-lora", "--card", "H100 80GB HBM3", env=env, check=True)
    assert named.stdout.strip().splitlines()[-1].startswith("time: 69 steps x ")
    assert "H100 80GB HBM3" in run_fttui("estimate", "--help", env=env, check=True).stdout.replace("\n", " ")
    cpu = run_fttui("estimate", "--profile", "tiny-lora", "--card", "T4", env=env)
    assert cpu.returncode == 2 and "runs on CPU processes" in cpu.stderr
