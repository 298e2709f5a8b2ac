"""The one change that would fit, in an out of memory's explanation (fttui.core.run.row.oomexplain):
the probe's stored answer for the same setup (fttui.core.experiments.probed, recorded at launch in
the forecast event's memory), else the estimate's own (the micro batch --on-oom shrink would run,
and the largest micro batch that fits by the estimate when larger)."""

from __future__ import annotations

import pytest

from fttui.core.base.event_records import ErrorEvent, ForecastEvent
from fttui.core.base.units import MIB
from fttui.core.experiments.probed import probe_answer
from fttui.core.experiments.quick_forecast import launch_forecast
from fttui.core.experiments.trials import Trial, trial_row
from fttui.core.profiles.resolve import load_profile
from fttui.core.results.store import Store
from fttui.core.run.row.oomexplain import activations_at, explain


def memory(**over) -> dict:
    mem = {
        "device": "gpu",
        "terms": {"weights": 40 * MIB, "gradients": 20 * MIB, "optimizer_states": 40 * MIB, "lora": 0,
                  "quantisation": 0, "communication": 0, "cuda_context": 0},
        "activations": 80 * MIB,
        "attention": 0,
        "step_temporaries": 20 * MIB,
        "allocator_fraction": 0.0,
        "micro_batch": 8,
        "max_seq_len": 512,
        "gradient_checkpointing": False,
        "budget": 150 * MIB,
        "budget_what": "limits.gpu_memory 150MiB",
    }
    mem.update(over)
    return mem


def forward_oom(mem, seq=512):
    return [ForecastEvent(memory=mem, t=1.0),
            ErrorEvent(kind="oom", oom_kind="cuda", phase="forward", phase_step=2, longest_seq=seq, step=1, t=2.0)]


def test_the_estimate_names_the_largest_micro_batch_when_it_is_above_the_shrink_rule_s():
    mem = memory()
    # step 2's forward holds weights and states (80 MiB): 70 MiB left, activations 10 MiB per sample
    text = explain(forward_oom(mem), 8, 1, 512).text
    largest = max(b for b in range(1, 8) if activations_at(mem, b, 512) <= 70 * MIB)
    assert largest > 4  # above the shrink rule's halving
    assert "micro batch 4 x accumulation 2 would fit by the estimate (activations 40 MiB), as --on-oom shrink" in text
    assert text.endswith(f"the largest micro batch that fits by the estimate is {largest} "
                         f"(activations {largest * 10} MiB)")


def test_the_probe_s_answer_comes_first_when_below_what_failed():
    probe = {"param": "batch_size", "largest_fit": 6, "smallest_oom": 7, "probe_id": "p1"}
    text = explain(forward_oom(memory(probe=probe)), 8, 1, 512).text
    assert text.endswith("; micro batch 6 fits by probe p1 of this setup (the largest that fitted)")
    seq = {"param": "max_seq_len", "largest_fit": 384, "smallest_oom": 400, "probe_id": "p2"}
    assert explain(forward_oom(memory(probe=seq)), 8, 1, 512).text.endswith(
        "; data.max_seq_len 384 fits by probe p2 of this setup (the longest that fitted)")
    # a probe that fitted more than failed here is no answer: the estimate's is given
    above = {**probe, "largest_fit": 8}
    assert "would fit by the estimate" in explain(forward_oom(memory(probe=above)), 8, 1, 512).text
    # the estimate expected the setup to fit: the probe still answers
    fits = explain(forward_oom(memory(probe=probe, budget=200 * MIB)), 8, 1, 512).text
    assert fits.endswith("; the estimate expected it to fit; micro batch 6 fits by probe p1 of this setup "
                         "(the largest that fitted)")
    none_fit = {**probe, "largest_fit": None}
    assert explain(forward_oom(memory(probe=none_fit)), 8, 1, 512).text.endswith(
        "; probe p1 of this setup found no micro batch that fits")


def _rows(profile, probe_id, fits, ooms, unclean=(), param="batch_size", ended="2026-01-01T00:00:00"):
    out = []
    trials = [Trial(v, "fit", 1, True) for v in fits] + [Trial(v, "oom", 1, True, oom_kind="cuda") for v in ooms]
    trials += [Trial(v, "fit", 1, False) for v in unclean]
    for i, t in enumerate(trials, 1):
        row = trial_row(t, profile, probe_id, param, i)
        row["ended_at"] = ended
        out.append(row)
    return out


def test_probe_answer_reads_the_latest_clean_probe_of_the_same_setup():
    prof = load_profile("tiny-lora", {"train.batch_size": 8})
    rows = _rows(prof, "old", [1, 2], [3], ended="2026-01-01T00:00:00")
    rows += _rows(prof, "new", [1, 2, 4], [5, 8], unclean=[6], ended="2026-02-01T00:00:00")
    got = probe_answer(prof, rows)
    assert got == {"param": "batch_size", "largest_fit": 4, "smallest_oom": 5, "probe_id": "new"}
    # another length, another method, another cap: not this setup
    assert probe_answer(load_profile("tiny-lora", {"data.max_seq_len": 64}), rows) is None
    assert probe_answer(load_profile("tiny-full", {"train.batch_size": 8}), rows) is None
    capped = load_profile("tiny-lora", {"train.batch_size": 8, "limits.gpu_memory": "1GiB"})
    assert probe_answer(capped, rows) is None


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("FTTUI_HOME", str(tmp_path))
    return tmp_path


def test_the_launch_records_the_probe_s_answer_beside_the_terms(home):
    prof = load_profile("tiny-lora", {"train.batch_size": 8})
    assert launch_forecast(prof)["memory"]["probe"] is None  # no store: nothing probed
    with Store() as store:
        for row in _rows(prof, "probe-a", [1, 2, 3], [4]):
            store.put(row)
    assert launch_forecast(prof)["memory"]["probe"] == {
        "param": "batch_size", "largest_fit": 3, "smallest_oom": 4, "probe_id": "probe-a"}
