"""An out of memory explained (fttui.core.run.row.oomexplain): the phase of the error event, the
estimate's terms recorded at launch (fttui.core.memory.oomterms) set against the budget, the one
change that fits; the row's figures, the results' status cell and the report's table."""

from __future__ import annotations

from fttui.core.base.event_records import ErrorEvent, ForecastEvent
from fttui.core.base.units import MIB
from fttui.core.memory import estimate
from fttui.core.memory.oomterms import oom_terms
from fttui.core.profiles.resolve import load_profile
from fttui.core.results.columns import BY_NAME
from fttui.core.results.run_tables import oom_table
from fttui.core.results.tables import status_cell
from fttui.core.run.row.oomexplain import activations_at, explain


def memory(**over) -> dict:
    mem = {
        "device": "gpu",
        "terms": {"weights": 40 * MIB, "gradients": 20 * MIB, "optimizer_states": 40 * MIB, "lora": 0,
                  "quantisation": 0, "communication": 0, "cuda_context": 0},
        "activations": 61 * MIB,
        "attention": 0,
        "step_temporaries": 20 * MIB,
        "allocator_fraction": 0.0,
        "micro_batch": 4,
        "max_seq_len": 412,
        "gradient_checkpointing": False,
        "budget": 138 * MIB,
        "budget_what": "limits.gpu_memory 138MiB",
    }
    mem.update(over)
    return mem


def events(phase, step, seq=412, mem=None, kind="oom"):
    out = [ErrorEvent(kind=kind, oom_kind="cuda" if kind == "oom" else None, phase=phase, phase_step=step,
                      longest_seq=seq, step=(step or 1) - 1, t=2.0)]
    if mem is not False:
        out.insert(0, ForecastEvent(memory=mem or memory(), t=1.0))
    return out


def test_the_issue_sentence_backward_of_step_2():
    got = explain(events("backward", 2), 4, 1, 512)
    assert got.phase == "backward"
    assert got.text == (
        "backward of step 2, longest sequence 412: activations 61 MiB predicted where 38 MiB were left after "
        "weights, gradients and optimizer states (of limits.gpu_memory 138MiB); micro batch 2 x accumulation 2 "
        "would fit by the estimate (activations 30 MiB), as --on-oom shrink would run it"
    )


def test_first_step_has_no_optimizer_states_yet_and_the_forward_names_activations():
    got = explain(events("forward", 1), 4, 1, 512)
    # left = 138 - 40 (weights only: no gradients in the forward, no states before the first step)
    assert got.text.startswith("forward of step 1, longest sequence 412: activations 61 MiB predicted where "
                               "98 MiB were left after weights (of limits.gpu_memory 138MiB); the estimate expected it to fit")


def test_backward_names_the_larger_of_gradients_and_activations():
    mem = memory(terms={**memory()["terms"], "gradients": 90 * MIB}, budget=150 * MIB)
    got = explain(events("backward", 1, mem=mem), 4, 1, 512)
    assert ": gradients 90 MiB predicted where 49 MiB were left after weights and activations" in got.text
    # the phase: weights 40 + gradients 90 + activations 61; the whole step adds the optimizer
    # states the first step makes (40): a budget of 191 MiB would fail in the optimizer step
    assert got.text.endswith("; a budget of 191 MiB would fit this phase by the estimate, 231 MiB the whole step")


def test_a_budget_for_the_phase_alone_is_said_once_when_it_is_the_whole_step():
    # a later step's optimizer step whose temporaries (80 MiB) outgrow the activations (61 MiB):
    # that phase is the step's peak
    mem = memory(budget=100 * MIB, step_temporaries=80 * MIB)
    got = explain(events("optimizer", 2, mem=mem), 4, 1, 512)
    assert got.text.endswith("; a budget of 180 MiB would fit this phase by the estimate"), got.text


def test_optimizer_step_names_the_states_in_step_1_and_the_temporaries_after():
    first = explain(events("optimizer", 1, mem=memory(budget=100 * MIB)), 4, 1, 512).text
    assert ": optimizer states 40 MiB predicted where 20 MiB were left after weights, gradients and the optimizer " \
           "step's temporaries" in first
    later = explain(events("optimizer", 3, mem=memory(budget=100 * MIB)), 4, 1, 512).text
    assert later.startswith("optimizer of step 3, longest sequence 412: the optimizer step's temporaries 20 MiB")


def test_activations_scale_with_the_batch_and_length_fed():
    mem = memory(activations=100 * MIB, attention=40 * MIB, micro_batch=4, max_seq_len=400)
    assert activations_at(mem, 4, 400) == 100 * MIB
    # per token part 60 MiB by tokens (x 1/2 x 1/2), attention 40 MiB by batch and length squared (x 1/2 x 1/4)
    assert activations_at(mem, 2, 200) == 15 * MIB + 5 * MIB
    assert activations_at({**mem, "allocator_fraction": 0.2}, 4, 400) == 120 * MIB


def test_micro_batch_1_not_enough_names_the_length_and_checkpointing():
    mem = memory(budget=60 * MIB, activations=400 * MIB)
    got = explain(events("forward", 1, mem=mem), 2, 1, 512).text
    assert got.endswith("even micro batch 1 would not fit by the estimate (activations 100 MiB): a shorter "
                        "data.max_seq_len or train.gradient_checkpointing = true")


def test_no_limit_on_a_card_takes_the_card_and_none_says_so():
    mem = memory(budget=None, budget_what=None)
    on_card = explain(events("forward", 1, mem=mem), 4, 1, 512, card_bytes=80 * MIB).text
    assert "(of the card's 80 MiB)" in on_card
    assert explain(events("forward", 1, mem=mem), 4, 1, 512).text.endswith("no budget known to set them against")


def test_phases_without_a_term_and_runs_without_an_estimate():
    assert explain(events("save", 4), 4, 1, 512).text == (
        "save after step 4, longest sequence 412: saving a checkpoint; the estimate has no term for it")
    assert explain(events("resume-load", 6, seq=None), 4, 1, 512).text == (
        "resume-load of the checkpoint of step 6, longest sequence 512: loading the checkpoint resumed from; "
        "the estimate has no term for it")
    got = explain(events("data", 2), 4, 1, 512)
    assert got.phase == "data" and "fetching the step's batches" in got.text
    assert explain(events(None, None), 4, 1, 512).text.startswith("an unmarked phase, longest sequence 412: outside")
    assert explain(events("loading-model", None, seq=None), 4, 1, 512).text.startswith("loading-model")
    no_estimate = explain(events("backward", 2, mem=False), 4, 1, 512).text
    assert no_estimate.endswith(": no estimate was recorded at launch to set against it")
    assert explain(events("backward", 2, kind="error"), 4, 1, 512).text is None  # not an out of memory


def test_the_row_figures_the_status_cell_and_the_report_table():
    for name in ("oom_phase", "oom_explained"):
        assert name in BY_NAME
    assert BY_NAME["oom_phase"].group_by
    row = {"run_id": "r", "status": "oom", "oom_kind": "cpu", "oom_phase": "backward", "oom_explained": "x"}
    assert status_cell(row) == "oom (cpu, backward)"
    assert status_cell({"status": "completed"}) == "completed"
    table = oom_table([row, {"run_id": "s", "status": "completed"}])
    assert table is not None and table.column("oom_explained") == ["x"] and table.column("oom_phase") == ["backward"]
    assert oom_table([{"status": "completed"}]) is None


def test_the_launch_record_splits_the_activations_from_the_step_temporaries():
    prof = load_profile("tiny-full", ['limits.host_memory="64MiB"', "batch_size=8"])
    est = estimate(prof)
    rec = oom_terms(prof, est)
    assert rec["device"] == "cpu" and rec["budget"] == 64 * MIB and rec["budget_what"] == "limits.host_memory 64MiB"
    # CPU training: one rank's terms (the card's breakdown is zeros there)
    assert rec["terms"]["weights"] > 0 and rec["terms"]["optimizer_states"] == 2 * rec["terms"]["weights"]
    assert est.host_breakdown["activations"] == max(rec["activations"], rec["step_temporaries"])
    assert rec["micro_batch"] == 8 and rec["max_seq_len"] == prof.data.max_seq_len
    gpu = load_profile("tiny-lora", ["gpus=1"])
    g = estimate(gpu)
    assert g.breakdown["activations"] == max(g.activation_bytes, g.step_temporaries_bytes)
    assert oom_terms(gpu, g)["budget"] is None and oom_terms(gpu, g)["allocator_fraction"] == 0.2


def test_an_oom_retry_attempt_takes_the_first_attempts_estimate_at_its_own_micro_batch():
    # attempt 2 runs micro batch 2 (its launch recorded no estimate: prepare_next writes none)
    own = events("forward", 3, mem=False)
    got = explain(own, 2, 2, 512, earlier=[ForecastEvent(memory=memory(budget=60 * MIB), t=0.0)]).text
    assert got.startswith("forward of step 3, longest sequence 412: activations 30 MiB predicted where 0 MiB were "
                          "left after weights and optimizer states")
    # the weights and states alone are over the budget: no micro batch fits
    assert got.endswith("even micro batch 1 would not fit by the estimate (activations 15 MiB): a shorter "
                        "data.max_seq_len or train.gradient_checkpointing = true")


def test_cpu_ranks_under_zero_offload_hold_the_offloaded_terms_as_their_own():
    prof = load_profile("tiny-full-zero3", ['limits.host_memory="300MiB"'])
    est = estimate(prof)
    rec = oom_terms(prof, est)
    host = est.host_breakdown
    assert est.rank_breakdown["optimizer_states"] == 0 and host["offload_optimizer_states"] > 0
    assert rec["terms"]["optimizer_states"] == host["offload_optimizer_states"]  # one CPU rank
    assert rec["terms"]["gradients"] == host["offload_gradients"]
    got = explain([ForecastEvent(memory=rec), ErrorEvent(kind="oom", phase="optimizer", phase_step=1,
                                                         longest_seq=128)], 4, 1, 128).text
    assert ": optimizer states " in got and "left after weights, gradients and communication buffers" in got
