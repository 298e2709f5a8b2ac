"""A resume's load peak as its own term of the estimate (fttui.core.memory.resume, issue 44 item 3):
what each sharding holds while the Trainer loads a checkpoint, against the training's peak; the
note of a run that keeps checkpoints when the resume goes above it (FSDP's lowest rank)."""

from __future__ import annotations

import pytest

from fttui.core.memory import estimate
from fttui.core.base.shardings import DDP, DEEPSPEED, FSDP
from fttui.core.memory.resume import STATIC, resume_peak
from fttui.core.profiles.resolve import load_profile

WIDE = {"model.arch_config.hidden_size": 1024, "model.arch_config.intermediate_size": 2752,
        "model.arch_config.num_hidden_layers": 4, "model.arch_config.num_attention_heads": 8,
        "model.arch_config.num_key_value_heads": 8, "data.source": "synthetic", "data.num_samples": 64,
        "devices.cpu_processes": 2}


def est(sharding: str, save: str = "steps", **over):
    return estimate(load_profile("tiny-full", {**WIDE, "sharding": sharding, "train.save": save, **over}))


def test_the_rules_per_sharding_family():
    rank = {"weights": 100.0, "optimizer_states": 200.0, "gradients": 100.0, "activations": 50.0, "cuda_context": 10.0}
    static = sum(rank.get(k, 0) for k in STATIC)
    train = sum(rank.values())
    ddp = resume_peak(rank, train, DDP, 2, trained_weights=100.0)
    assert ddp["peak"] == static + 200 and ddp["rank"] == "every" and ddp["above"] == 0
    zero = resume_peak(rank, train, DEEPSPEED, 2, trained_weights=200.0)
    assert zero["peak"] == static + 2 * 200 and zero["above"] == max(0, zero["peak"] - train)
    fsdp = resume_peak(rank, train, FSDP, 4, trained_weights=400.0)
    assert fsdp["rank"] == "lowest" and fsdp["peak"] == static + 4 * 200 + 200
    assert fsdp["above"] == fsdp["peak"] - train > 0
    # one FSDP rank holds everything anyway: the rule of an unsharded run
    assert resume_peak(rank, train, FSDP, 1, trained_weights=100.0)["rank"] == "every"


@pytest.mark.parametrize("sharding", ["none", "zero2", "zero3"])
def test_ddp_and_zero_resume_below_the_training_peak(sharding):
    e = est(sharding)
    r = e.resume
    assert r["train_peak"] == sum(e.rank_breakdown.values())
    assert r["peak"] < r["train_peak"] and r["above"] == 0
    assert not any("a resume from a checkpoint" in n for n in e.notes)


def test_fsdp_s_lowest_rank_reads_every_rank_s_states_and_goes_above():
    e = est("fsdp")
    r = e.resume
    states = e.rank_breakdown["optimizer_states"]
    static = sum(e.rank_breakdown.get(k, 0) for k in STATIC)
    assert r["rank"] == "lowest"
    assert r["peak"] >= static + 2 * states + states - 2  # rounding of the per-rank terms
    assert r["above"] == r["peak"] - r["train_peak"] > 0
    assert any(n.startswith("a resume from a checkpoint peaks at") and "FSDP full state dict" in n for n in e.notes)
    # a run that keeps no checkpoint is never resumed: no note (the record stays)
    quiet = est("fsdp", save="end")
    assert quiet.resume == r and not any("a resume from a checkpoint" in n for n in quiet.notes)
    assert est("fsdp").to_dict()["resume"] == r


def test_an_oom_in_a_resume_s_load_is_set_against_the_resume_term():
    from fttui.core.base.event_records import ErrorEvent, ForecastEvent
    from fttui.core.base.units import fmt_bytes
    from fttui.core.memory.oomterms import oom_terms
    from fttui.core.run.row.oomexplain import explain

    prof = load_profile("tiny-full", {**WIDE, "sharding": "fsdp", "train.save": "steps",
                                      "limits.host_memory": "700MiB"})
    e = estimate(prof)
    mem = oom_terms(prof, e)
    assert mem["resume"] == e.resume
    events = [ForecastEvent(memory=mem, t=1.0),
              ErrorEvent(kind="oom", oom_kind="cpu", phase="resume-load", phase_step=2, t=2.0)]
    text = explain(events, 4, 1, 128).text
    r = e.resume
    assert text.startswith("resume-load of the checkpoint of step 2, longest sequence 128: loading the checkpoint "
                           f"resumed from: {fmt_bytes(r['peak'])} predicted on the lowest rank, "
                           f"{fmt_bytes(r['above'])} above its training peak (of limits.host_memory 700MiB)")
    assert text.endswith("; the FSDP full state dict reads every rank's optimizer states there")
    ddp = load_profile("tiny-full", {**WIDE, "sharding": "none", "train.save": "steps"})
    ed = estimate(ddp)
    events[0] = ForecastEvent(memory=oom_terms(ddp, ed), t=1.0)
    assert f"predicted on a rank, below its training peak ({fmt_bytes(ed.resume['train_peak'])})" in \
        explain(events, 4, 1, 128).text
