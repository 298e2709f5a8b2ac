"""``train.longest_first`` and the row's ``longest_seq`` (issue 24 part 3), without training: the
order the sampler gives, the figure folded from step events and from a probe trial."""

from __future__ import annotations

from fttui.core.experiments.trials import Trial, trial_row
from fttui.core.profiles import load_profile
from fttui.core.results.columns import BY_NAME, RowInputs
from fttui.core.run.files.events import parse_event
from fttui.worker.data import longest_first_order
from tests.helpers import profile_of


def test_the_first_step_carries_the_longest_samples_then_a_shuffle():
    lengths = [5, 40, 7, 40, 12, 3, 39, 8, 1, 22]
    order = longest_first_order(lengths, first=4, seed=42, epoch=0)
    assert sorted(order) == list(range(10))  # every sample once
    assert order[:4] == [1, 3, 6, 9]  # 40, 40 (ties by index), 39, 22
    assert [lengths[i] for i in order[:4]] == sorted(lengths, reverse=True)[:4]
    assert order == longest_first_order(lengths, first=4, seed=42, epoch=0)  # a resumed run replays it
    # the rest keeps the seeded shuffle's order; a later epoch is a plain shuffle
    rest = longest_first_order(lengths, first=0, seed=42, epoch=0)
    assert order[4:] == [i for i in rest if i not in order[:4]]
    assert longest_first_order(lengths, first=4, seed=42, epoch=1) != order
    assert sorted(longest_first_order(lengths, first=4, seed=42, epoch=1)) == list(range(10))


def test_longest_first_is_a_profile_key():
    assert load_profile("tiny-full").train.longest_first is False
    assert load_profile("tiny-full", ["train.longest_first=true"]).train.longest_first is True


def _inputs(events=(), trial=None, profile=None) -> RowInputs:
    return RowInputs(run_id="r", kind="probe" if trial else "run", group_id=None, started_at="", ended_at="",
                     profile=profile or profile_of({}), snap=None, status=None,
                     events=tuple(filter(None, map(parse_event, events))), trial=trial)


def test_longest_seq_is_the_widest_step_any_rank_fed():
    fold = BY_NAME["longest_seq"].fold
    steps = [{"event": "step", "rank": 0, "step": 1, "longest_seq": 117},
             {"event": "step", "rank": 1, "step": 1, "longest_seq": 128},
             {"event": "step", "rank": 0, "step": 2, "longest_seq": 117},
             {"event": "step", "rank": 0, "step": 3}]
    assert fold(_inputs(steps)) == 128
    assert fold(_inputs([{"event": "step", "rank": 0, "step": 1}])) is None  # a command without fttui's callback
    # an OOM in the first step: the error names the batch it failed on
    oom = [{"event": "error", "rank": 0, "kind": "oom", "oom_kind": "cpu", "step": 0, "longest_seq": 233}]
    assert fold(_inputs(oom)) == 233


def test_an_error_names_the_micro_batch_being_fed():
    from types import SimpleNamespace

    from fttui.integrations.hf_info import Counters

    c = Counters()
    assert c.fed_seq() is None
    c.feeding({"input_ids": SimpleNamespace(shape=(4, 233))})  # a batch's ids; its forward then fails
    assert c.longest_seq == 0 and c.fed_seq() == 233
    c.feeding({"input_ids": SimpleNamespace(shape=(4, 57))})
    assert c.fed_seq() == 233


def test_a_probe_trial_row_says_its_samples_and_longest_sequence():
    resolved = load_profile("tiny-full")
    t = Trial(value=6, status="fit", load=2, clean=True, fresh=True, steps=1, longest_seq=101)
    row = trial_row(t, resolved, "P", "batch_size", 3, data=True)
    assert row["longest_seq"] == 101 and row["batch_size"] == 6
    assert row["dataset"].endswith("(longest samples)") and "synthetic" not in row["dataset"]
    row = trial_row(Trial(value=6, status="oom", load=2, clean=True, fresh=True, longest_seq=128),
                    resolved, "P", "batch_size", 4)
    assert row["dataset"] == "synthetic (worst case)" and row["longest_seq"] == 128


def test_a_launched_data_trial_keeps_the_data_and_puts_the_longest_first():
    from fttui.core.experiments.launched import trial_overrides

    resolved = load_profile("tiny-full")
    assert trial_overrides(resolved, "batch_size", 6, 1, data=True) == {
        "train.batch_size": 6, "train.max_steps": 1, "train.longest_first": True}
    synthetic = trial_overrides(resolved, "batch_size", 6, 1)
    assert synthetic["data.source"] == "synthetic" and "train.longest_first" not in synthetic
