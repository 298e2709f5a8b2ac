"""What held a card's memory at a CUDA out of memory (fttui.core.run.row.oomheld): the allocator's
snapshot and the tensors' storages (fttui.core.run.files.memsnap) read without torch, each live
block classed by tensor identity then by its frames, beside the estimate's terms.

The snapshot is tests/data/memory_snapshot_lora.json, built by tests/data/make_memory_snapshot.py
in torch's snapshot format: it was NOT recorded on a card (none was lent); bench/gpu_verify.sh
checks the real thing on one."""

from __future__ import annotations

import collections
import importlib.util
import json
import pickle
from pathlib import Path

from fttui.core.base.event_records import ErrorEvent, ForecastEvent
from fttui.core.base.units import MIB, fmt_bytes
from fttui.core.results.columns import BY_NAME
from fttui.core.results.run_tables import oom_table
from fttui.core.run.files.memsnap import (
    TensorRanges,
    read_snapshot,
    read_tensor_ranges,
    write_snapshot,
    write_tensor_ranges,
)
from fttui.core.run.files.rundir import RunDir
from fttui.core.run.row.oomexplain import activations_at
from fttui.core.run.row.oomheld import frame_class, oom_held, site_of, summarise

DATA = Path(__file__).resolve().parents[1] / "data"


def generator():
    spec = importlib.util.spec_from_file_location("make_memory_snapshot", DATA / "make_memory_snapshot.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fixture():
    return json.loads((DATA / "memory_snapshot_lora.json").read_text())


def test_the_fixture_is_what_its_generator_builds_and_says_it_was_not_recorded_on_a_card():
    snapshot, tensors, _ = generator().build()
    got = fixture()
    assert got["recorded_on_a_card"] is False
    assert got["snapshot"] == json.loads(json.dumps(snapshot))
    assert got["tensors"] == json.loads(json.dumps(tensors))


def test_the_fixture_classed_by_identity_and_frames_as_built():
    _, _, expected = generator().build()
    got = fixture()
    held = summarise(got["snapshot"], TensorRanges.from_dict(got["tensors"]))
    assert held.by_category == expected["by_category"]
    assert held.live == sum(expected["by_category"].values())
    assert held.reserved == expected["reserved"] > held.live  # cached blocks are reserved, not live
    assert held.oom_request == expected["oom_request"]
    size, category = expected["largest_block"]
    assert held.sites[0][1] == category and held.sites[0][2] >= size
    assert held.classed_by_identity == expected["by_category"]["weights"] + expected["by_category"]["lora"]


def test_without_the_tensors_the_weights_have_no_frames_and_read_as_unrecorded():
    got = fixture()
    held = summarise(got["snapshot"], None)
    _, _, expected = generator().build()
    assert "weights" not in held.by_category
    assert held.by_category["unrecorded"] >= expected["by_category"]["weights"]


def test_frame_rules_in_their_order():
    g = generator()
    opt, bwd, fwd = g.OPT, g.BWD, g.model_frames(176)
    as_tuples = lambda fr: [(f["filename"], f["name"], f["line"]) for f in fr]  # noqa: E731
    assert frame_class(as_tuples(opt)) == "step_temporaries"
    assert frame_class(as_tuples(bwd)) == "backward"
    assert frame_class(as_tuples(fwd)) == "activations"
    assert frame_class(as_tuples(bwd + fwd)) == "backward"  # a checkpointed layer's recompute runs in the backward
    assert frame_class(as_tuples(g.DATA)) is None
    assert site_of(as_tuples(fwd)) == "modeling_llama.py:176 forward"
    assert site_of(as_tuples(bwd)).startswith("torch::autograd::Engine::evaluate_function")


def test_identity_wins_over_frames():
    block = {"address": 4096, "size": 1024, "requested_size": 1000, "state": "active_allocated",
             "frames": [{"filename": "??", "line": 0, "name": "torch::autograd::Engine::evaluate_function"}]}
    snap = {"segments": [{"address": 4096, "total_size": 2048, "blocks": [block]}], "device_traces": []}
    as_grad = summarise(snap, TensorRanges(((4096 + 512, 512, "gradients"),)))
    assert as_grad.by_category == {"gradients": 1024}
    assert summarise(snap, TensorRanges(((4096 + 1024, 64, "gradients"),))).by_category == {"backward": 1024}


def test_the_run_directory_files_round_trip_and_a_class_is_refused(tmp_path):
    got = fixture()
    rd = RunDir(tmp_path)
    write_snapshot(rd.snapshot_path, got["snapshot"])
    write_tensor_ranges(rd.tensors_path, TensorRanges.from_dict(got["tensors"]))
    assert read_snapshot(rd.snapshot_path) == got["snapshot"]
    assert read_tensor_ranges(rd.tensors_path) == TensorRanges.from_dict(got["tensors"])
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(pickle.dumps({"segments": [collections.OrderedDict()]}))
    assert read_snapshot(bad) is None
    assert read_snapshot(tmp_path / "missing.pickle") is None


def test_the_row_figure_sets_the_snapshot_beside_the_estimate(tmp_path):
    got = fixture()
    rd = RunDir(tmp_path)
    write_snapshot(rd.snapshot_path, got["snapshot"])
    write_tensor_ranges(rd.tensors_path, TensorRanges.from_dict(got["tensors"]))
    mem = {"terms": {"weights": 30 * MIB, "lora": 1 * MIB, "gradients": 0, "optimizer_states": 0},
           "activations": 40 * MIB, "attention": 8 * MIB, "step_temporaries": 0, "allocator_fraction": 0.2,
           "micro_batch": 4, "max_seq_len": 512}
    events = [ForecastEvent(memory=mem, t=1.0),
              ErrorEvent(kind="oom", oom_kind="cuda", phase="backward", phase_step=1, longest_seq=256, t=2.0)]
    text = oom_held(rd, events, 4, 512)
    held = summarise(got["snapshot"], TensorRanges.from_dict(got["tensors"]))
    acts = held.by_category["activations"] + held.by_category["backward"]
    beside = activations_at({**mem, "allocator_fraction": 0.0}, 4, 256)  # the longest sequence fed, no cache share
    assert f"activations {fmt_bytes(acts)} (forward " in text
    assert f"estimate {fmt_bytes(beside)})" in text
    assert f"weights {fmt_bytes(held.by_category['weights'])} (estimate {fmt_bytes(30 * MIB)})" in text
    assert "largest sites: " in text and "modeling_llama.py:176 forward" in text
    assert oom_held(RunDir(tmp_path / "none"), events, 4, 512) is None


def test_the_row_and_the_report_carry_it():
    assert BY_NAME["oom_held"].label.startswith("what held the card's memory")
    rows = [{"run_id": "a", "status": "oom", "oom_kind": "cuda", "oom_held": "5 MiB live"},
            {"run_id": "b", "status": "oom", "oom_kind": "cpu"}]
    table = oom_table(rows)
    assert table.headers[-1] == "oom_held" and table.cells[0][-1] == "5 MiB live"
    assert "oom_held" not in oom_table(rows[1:]).headers


def test_a_run_that_ran_out_of_card_memory_has_oom_held_in_its_row():
    from fttui.core.base.event_records import ForecastEvent as Fc
    from fttui.core.profiles import load_profile
    from fttui.core.run.files import rundir
    from fttui.core.run.files.events import append_jsonl, read_jsonl
    from fttui.core.run.files.statusfile import FinalStatus
    from fttui.core.run.fold.state import RunState
    from fttui.core.run.row.summary import build_row

    resolved = load_profile("tiny-lora", ["train.batch_size=4"])
    rd = rundir.create(resolved.to_dict(), ["python", "-m", "fttui.worker.train"], {}, kind="run")
    mem = {"terms": {"weights": 30 * MIB, "lora": MIB, "gradients": 0, "optimizer_states": 0, "quantisation": 0,
                     "communication": 0, "cuda_context": 0},
           "activations": 40 * MIB, "attention": 0, "step_temporaries": 0, "allocator_fraction": 0.0,
           "micro_batch": 4, "max_seq_len": 256, "budget": 64 * MIB, "budget_what": "limits.gpu_memory 64MiB"}
    append_jsonl(rd.events_path, {**Fc(memory=mem).to_dict(), "t": 1.0, "rank": -1, "source": "launcher"})
    append_jsonl(rd.events_path, {"event": "error", "t": 2.0, "rank": 0, "kind": "oom", "oom_kind": "cuda",
                                  "phase": "backward", "phase_step": 1, "longest_seq": 256, "step": 0,
                                  "message": "CUDA out of memory"})
    oom = FinalStatus("oom", 3, None, oom_kind="cuda", error="CUDA out of memory", error_step=1)
    snap = RunState().replay(read_jsonl(rd.events_path), []).snapshot()
    without = build_row(rd, snap, oom, t_launch=1.0, t_end=2.0)
    assert without["oom_held"] is None and without["oom_phase"] == "backward"
    got = fixture()
    write_snapshot(rd.snapshot_path, got["snapshot"])
    write_tensor_ranges(rd.tensors_path, TensorRanges.from_dict(got["tensors"]))
    row = build_row(rd, snap, oom, t_launch=1.0, t_end=2.0)
    held = summarise(got["snapshot"], TensorRanges.from_dict(got["tensors"]))
    assert row["oom_held"].startswith(f"{fmt_bytes(held.live)} live in {fmt_bytes(held.reserved)} reserved")
    assert f"(estimate {fmt_bytes(30 * MIB)})" in row["oom_held"]
    # the end summary (fttui run, headless) says it under the phase's sentence
    from fttui.cli.live import summary_lines

    rundir.write_json_atomic(rd.row_path, row)
    lines = summary_lines(rd)
    assert lines[0].endswith(": oom (cuda, backward)")
    assert f"  held at the out of memory: {row['oom_held']}" in lines
    explained = next(i for i, line in enumerate(lines) if line.startswith("  out of memory in the backward"))
    assert lines[explained + 1].startswith("  held at the out of memory: ")
