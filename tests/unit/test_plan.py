"""The planner (fttui.core.experiments.plan, `fttui plan`): setups over fake cards and a handful of
estimates; every verdict and figure checked against the estimator and the forecast called directly."""

from __future__ import annotations

import json
import re

import pytest

from fttui.core.base import shardings
from fttui.core.base.units import GIB
from fttui.core.experiments.forecast import forecast, profile_shape
from fttui.core.experiments.plan import Budget, PlanError, candidates, plan, variant
from fttui.core.experiments.planning import write_profile
from fttui.core.memory import CONSTANTS, estimate
from fttui.core.profiles import load_profile
from fttui.core.experiments.datalens import data_stats
from tests.conftest import run_fttui


def _stats(p, micro):
    return data_stats(p, micro)[0]


def _plan(profile, budget, **kw):
    return plan(profile, budget, [], stats_for=_stats, **kw)


def test_candidates_keep_the_effective_batch_and_the_registry_kinds():
    got = list(candidates(["lora"], world=2, on_gpu=True, effective=8))
    kinds = {s for _m, s, *_ in got}
    assert kinds == set(shardings.runs_with("lora"))  # every kind that runs LoRA, offload kinds included
    assert all(micro * accum * 2 == 8 for _m, _s, micro, accum, _gc in got)
    assert {(micro, accum) for _m, _s, micro, accum, _gc in got} == {(1, 4), (2, 2), (4, 1)}
    assert len(got) == len(kinds) * 3 * 2  # x checkpointing off/on
    # one CPU process: nothing to shard or offload
    assert {s for _m, s, *_ in candidates(["lora"], 1, False, 4)} == {shardings.NONE.name}
    # qlora never runs under a kind that cannot shard 4-bit weights
    assert not {s for _m, s, *_ in candidates(["qlora"], 2, True, 2)} - set(shardings.runs_with("qlora"))
    with pytest.raises(PlanError, match="not divisible by the 2 rank"):
        list(candidates(["lora"], 2, True, 7))


def test_cpu_plan_against_a_host_budget():
    prof = load_profile("tiny-lora", ["train.max_steps=20"])
    # a budget between the smallest and the largest setup's added host memory
    small = estimate(variant(prof, "lora", "none", 1, 8, True)).host_peak_bytes - CONSTANTS["host_process_bytes"]
    big = estimate(variant(prof, "lora", "none", 8, 1, False)).host_peak_bytes - CONSTANTS["host_process_bytes"]
    assert small < big
    limit = int((small + big) / 2 / 0.95)
    opts = _plan(prof, Budget(gpus=0, card="cpu", host_bytes=limit, host_per_process=True))
    assert len(opts) == 4 * 2 and all(o.effective_batch == 8 for o in opts)
    fits = [o for o in opts if o.fits]
    assert fits and len(fits) < len(opts)
    assert opts[:len(fits)] == fits  # the fitting ones first
    assert [o.run_seconds for o in fits] == sorted(o.run_seconds for o in fits)
    for o in opts:
        e = estimate(variant(prof, o.method, o.sharding, o.batch_size, o.grad_accum, o.gradient_checkpointing))
        assert o.host_peak_bytes == e.host_peak_bytes and o.gpu_peak_bytes is None
        added = e.host_peak_bytes - CONSTANTS["host_process_bytes"]
        assert o.fits == (added <= limit * 0.95)
        if not o.fits:
            assert o.breaks.startswith("host:") and "per process above the imported stack" in o.breaks
    # the forecast of a setup, called directly: the same seconds
    o = fits[0]
    p = variant(prof, o.method, o.sharding, o.batch_size, o.grad_accum, o.gradient_checkpointing)
    s = _stats(p, o.batch_size)
    fc = forecast(p, profile_shape(p, estimate(p).inputs), samples=s.samples,
                  fed_tokens_per_sample=o_fed(s), real_tokens_per_sample=o_fed(s), rows=[], card="cpu", cards=1)
    assert o.run_seconds == fc.run_seconds and o.steps == 20
    # checkpointing recomputes the forward: slower at the same micro batch
    by = {(x.batch_size, x.gradient_checkpointing): x for x in opts}
    assert by[(8, True)].run_seconds > by[(8, False)].run_seconds


def o_fed(s):
    return s.random_order["fed_tokens"] / s.samples


def test_gpu_plan_on_two_fake_24gib_cards():
    prof = load_profile("llama2-7b-lora", ["train.max_steps=10"])
    budget = Budget(gpus=2, card="NVIDIA GeForce RTX 3090", gpu_bytes=24 * GIB, host_bytes=256 * GIB)
    opts = _plan(prof, budget, effective_batch=8)
    assert {o.sharding for o in opts} == set(shardings.runs_with("lora"))
    assert all(o.batch_size * o.grad_accum * 2 == 8 for o in opts)
    fits = [o for o in opts if o.fits]
    assert fits and fits != opts and opts[:len(fits)] == fits
    for o in opts[:6] + opts[-6:]:  # a handful, against the estimator on the same card size
        e = estimate(variant(prof, o.method, o.sharding, o.batch_size, o.grad_accum, o.gradient_checkpointing, 2),
                     None, 24 * GIB)
        assert o.gpu_peak_bytes == max(e.gpu_peak_bytes)
        assert o.fits == (max(e.gpu_peak_bytes) <= 24 * GIB * 0.95 and e.gpu_load_peak_bytes <= 24 * GIB)
        if not o.fits:
            assert o.breaks.startswith("GPU")
    # without sharding and checkpointing, a 7B LoRA at micro batch 4 x 512 does not fit 24 GB
    nogc = next(o for o in opts if o.sharding == "none" and o.batch_size == 4 and not o.gradient_checkpointing)
    assert not nogc.fits and "activations" in nogc.breaks
    # priced: cards x hours x price
    priced = _plan(prof, budget, effective_batch=8, price_per_card_hour=0.5, price_unit="USD")
    assert priced[0].cost == pytest.approx(0.5 * 2 * priced[0].run_seconds / 3600, rel=1e-4)


def test_a_gpu_memory_limit_caps_the_allocator_not_the_context():
    """Under ``limits.gpu_memory`` (the cap ``run --gpu-memory-limit`` puts on PyTorch's
    allocator) the verdict leaves the CUDA context out; as a card size it counts it. On an H100 a
    setup predicted at 12.0 GiB with the context completed under a 12 GiB cap."""
    from fttui.core.experiments.planning import machine_budget

    prof = load_profile("llama2-7b-lora", ["train.max_steps=10", "model.arch_config.num_hidden_layers=4",
                                           "limits.gpu_memory=12GiB", "devices.gpus=1"])
    capped = machine_budget(prof, cards=[])
    assert capped.gpu_cap and capped.gpu_bytes == 12 * GIB
    card = machine_budget(prof, gpu_memory="12GiB", cards=[])
    assert not card.gpu_cap
    a, b = _plan(prof, capped, effective_batch=32), _plan(prof, card, effective_batch=32)
    assert sum(o.fits for o in a) > sum(o.fits for o in b)
    for o in a:
        e = estimate(variant(prof, o.method, o.sharding, o.batch_size, o.grad_accum, o.gradient_checkpointing, 1),
                     None, 12 * GIB)
        torch_part = max(e.gpu_peak_bytes) - e.breakdown["cuda_context"]
        assert o.fits == (torch_part <= 12 * GIB * 0.95 and e.gpu_load_peak_bytes - e.breakdown["cuda_context"] <= 12 * GIB)
        if not o.fits:
            assert "in PyTorch's allocator (the cap)" in o.breaks


def test_kinds_this_installation_cannot_run_are_left_out(monkeypatch):
    """Without DeepSpeed the plan offers no ZeRO setup (``--verify`` would launch one the
    preflight refuses) and the CLI says which kinds it left out and the extra to install."""
    import importlib.util

    from fttui.core.run.launching.extras import uninstalled_shardings

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: None if name.split(".")[0] == "deepspeed" else real(name, *a, **k))
    missing = uninstalled_shardings()
    zero = {k.name for k in shardings.KINDS.values() if "deepspeed" in k.packages}
    assert set(missing) == zero and all("pip install 'fttui[zero3]'" in v for v in missing.values())
    prof = load_profile("llama2-7b-lora", ["train.max_steps=10"])
    budget = Budget(gpus=2, card="NVIDIA GeForce RTX 3090", gpu_bytes=24 * GIB, host_bytes=256 * GIB)
    opts = _plan(prof, budget, effective_batch=8, left_out=tuple(missing))
    assert {o.sharding for o in opts} == set(shardings.runs_with("lora")) - zero
    # the CLI, in this process: the note on stderr, one line per kind
    from fttui.cli.main import main

    out = []
    monkeypatch.setattr("sys.stderr", type("E", (), {"write": lambda self, t: out.append(t), "flush": lambda self: None})())
    assert main(["plan", "--profile", "llama2-7b-lora", "--gpus", "2", "--gpu-memory", "24GiB",
                 "--card", "NVIDIA GeForce RTX 3090", "--effective-batch", "8", "--json"]) == 0
    said = "".join(out)
    assert all(f"left out: sharding {name} (deepspeed not installed" in said for name in zero)


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    prof = load_profile("llama2-7b-lora")
    with pytest.raises(PlanError, match="below the model's weights"):
        _plan(prof, Budget(gpus=1, card="x", gpu_bytes=2 * GIB))
    for args, words in ((["--gpus", "2", "--gpu-memory", "24GiB", "--effective-batch", "7"], "not divisible"),
                        (["--gpus", "1", "--gpu-memory", "1GiB"], "below the model's weights"),
                        (["--gpus", "1", "--gpu-memory", "80GiB", "--card", "T4", "--prices",
                          str(tmp_path / "p.toml")], "no price for 'Tesla T4'")):
        (tmp_path / "p.toml").write_text('"RTX 3090" = 0.3\n')
        r = run_fttui("plan", "--profile", "llama2-7b-lora", *args)
        assert r.returncode == 2, r.stderr
        assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_cli_json_and_write(tmp_path):
    r = run_fttui("plan", "--profile", "tiny-lora", "--host-memory-limit", "200MiB", "--json",
                  "--write", "tiny-planned", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    opts = json.loads(r.stdout)
    need = {"sharding", "batch_size", "grad_accum", "gradient_checkpointing", "fits", "run_seconds", "gpu_peak_gib",
            "host_peak_gib", "breaks"}
    assert opts and all(need <= set(o) for o in opts)
    assert opts[0]["fits"] and opts[0]["host_peak_gib"] == pytest.approx(opts[0]["host_peak_bytes"] / GIB, abs=1e-3)
    written = load_profile(str(tmp_path / "profiles" / "tiny-planned.toml"))
    assert written.train.batch_size == opts[0]["batch_size"]
    assert written.train.grad_accum == opts[0]["grad_accum"]
    assert written.train.gradient_checkpointing == opts[0]["gradient_checkpointing"]
    assert written.data == load_profile("tiny-lora").data  # everything else from the planned profile
    with pytest.raises(PlanError, match="exists"):
        write_profile("tiny-planned", written, plan(written, Budget(gpus=0, card="cpu"), [], stats_for=_stats)[0],
                      folder=tmp_path / "profiles")



def test_the_piped_table_has_no_trailing_spaces():
    """`fttui plan`'s table, piped: no line ends in spaces (issue 40 item 7c)."""
    r = run_fttui("plan", "--profile", "tiny-lora")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) > 3 and lines[1].startswith("#")
    assert [line for line in lines if line != line.rstrip()] == []


def test_a_plan_on_no_named_card_shows_no_times(tmp_path):
    """No card visible or named: no hours from a CPU's default rate; the table's times are '-'
    and the lines say why and how to name the card (issue 40 item 7a)."""
    from tests.conftest import fttui_env

    env = {**fttui_env(), "FTTUI_FAKE_GPUS": str(tmp_path / "no-gpus.json")}  # no file: no card visible
    r = run_fttui("plan", "--profile", "llama2-7b-lora", "--gpu-memory", "80GiB", env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert re.match(r"llama2-7b-lora: \d+ setups on 1 GPU of no named card; \d+ fit, keeping 5% of each memory budget free; ", lines[0])
    assert lines[0].endswith("fitting setups first, simplest first (no time to order by)")
    at = lines[1].index(" time ") + 1  # the column's start
    assert {line[at:].split()[0] for line in lines[2:-1]} == {"-"}
    assert lines[-1].startswith("time: not forecast: no GPU is visible here and no card is named; name the card")
    assert " h " not in r.stdout
