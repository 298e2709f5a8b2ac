"""A resume's load peak as its own term of the estimate (fttui.core.memory.resume, issue 44 item 3):
what each sharding holds while the Trainer loads a checkpoint, against the training's peak; the
note of a run that keeps checkpoints when the resume goes above it. FSDP's checkpoints are
sharded: every rank reads its own shard, none goes above (its lowest rank did, reading every
rank's states, while they were the full state dict)."""

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
    ddp = resume_peak(rank, train, DDP, trained_weights=100.0)
    assert ddp["peak"] == static + 200 and ddp["rank"] == "every" and ddp["above"] == 0
    zero = resume_peak(rank, train, DEEPSPEED, trained_weights=200.0)
    assert zero["peak"] == static + 2 * 200 and zero["above"] == max(0, zero["peak"] - train)
    # FSDP: its own shards; the states made by a step of zero gradients, then read into
    fsdp = resume_peak(rank, train, FSDP, trained_weights=400.0)
    assert fsdp["rank"] == "every" and fsdp["peak"] == static + rank["gradients"] + rank["optimizer_states"]
    assert fsdp["above"] == 0 and fsdp["peak"] < train


@pytest.mark.parametrize("sharding", ["none", "zero2", "zero3", "fsdp"])
def test_every_sharding_resumes_below_the_training_peak(sharding):
    e = est(sharding)
    r = e.resume
    assert r["train_peak"] == sum(e.rank_breakdown.values())
    assert r["peak"] < r["train_peak"] and r["above"] == 0
    assert not any("a resume from a checkpoint" in n for n in e.notes)


def test_fsdp_every_rank_reads_its_own_shard():
    e = est("fsdp")
    r = e.resume
    static = sum(e.rank_breakdown.get(k, 0) for k in STATIC)
    own = static + e.rank_breakdown["gradients"] + e.rank_breakdown["optimizer_states"]
    assert r["rank"] == "every" and abs(r["peak"] - own) <= 2  # rounding of the per-rank terms
    # the states of one rank, not of every rank: more ranks, a smaller share each
    wider = est("fsdp", **{"devices.cpu_processes": 4}).resume
    assert wider["peak"] < r["peak"]
    # the record is the estimate's, in its JSON too
    assert est("fsdp").to_dict()["resume"] == r


def test_a_resume_above_the_training_peak_is_noted_for_a_run_that_keeps_checkpoints(monkeypatch):
    # no sharding's rule goes above now (the test above): a rule that would is noted, for a run
    # that keeps checkpoints only
    import sys

    module = sys.modules["fttui.core.memory.estimate"]
    real = module.resume_peak

    def above(*args, **kwargs):
        r = real(*args, **kwargs)
        return {**r, "peak": r["train_peak"] + 2**28, "above": 2**28}

    monkeypatch.setattr(module, "resume_peak", above)
    e = est("fsdp")
    assert any(n.startswith("a resume from a checkpoint peaks at") and "0.25 GiB above its training peak" in n
               for n in e.notes), e.notes
    quiet = est("fsdp", save="end")
    assert quiet.resume == e.resume and not any("a resume from a checkpoint" in n for n in quiet.notes)


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
    r = e.resume
    assert explain(events, 4, 1, 128).text == (
        "resume-load of the checkpoint of step 2, longest sequence 128: loading the checkpoint resumed from: "
        f"{fmt_bytes(r['peak'])} predicted on a rank, below its training peak ({fmt_bytes(r['train_peak'])}) "
        "(of limits.host_memory 700MiB)")
    # the record of an fttui before FSDP's checkpoints were sharded: its lowest rank read every rank's states
    older = {**r, "rank": "lowest", "peak": r["train_peak"] + 2**26, "above": 2**26}
    events[0] = ForecastEvent(memory={**mem, "resume": older}, t=1.0)
    text = explain(events, 4, 1, 128).text
    assert (f"{fmt_bytes(older['peak'])} predicted on the lowest rank, {fmt_bytes(2**26)} above its training peak"
            in text)
    assert text.endswith("; the FSDP full state dict reads every rank's optimizer states there")
    ddp = load_profile("tiny-full", {**WIDE, "sharding": "none", "train.save": "steps"})
    ed = estimate(ddp)
    events[0] = ForecastEvent(memory=oom_terms(ddp, ed), t=1.0)
    assert f"predicted on a rank, below its training peak ({fmt_bytes(ed.resume['train_peak'])})" in \
        explain(events, 4, 1, 128).text
