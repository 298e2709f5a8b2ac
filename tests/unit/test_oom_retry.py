"""Out of memory, recovered (issue 25 part 1), without training: what the supervisor shrinks, when
it stops, the words every view says, the next attempt's run directory, and the chain as the
fold, the status line, `fttui ls` and the row read it."""

from __future__ import annotations

import argparse
import json

import pytest

from fttui.core.base.errors import ProfileError
from fttui.core.profiles import load_profile
from fttui.core.run.files import rundir
from fttui.core.run.control.brief import run_brief
from fttui.core.run.files.events import append_jsonl, read_jsonl
from fttui.core.run.launching.oomretry import Decision, attempt_event, decide, prepare_next, recovery_message, shrink
from fttui.core.run.fold.state import RunState
from fttui.core.run.files.statusfile import FinalStatus
from fttui.core.run.fold.status import status_line
from fttui.core.run.row.summary import build_row
from fttui.core.run.control.watch import attempts

OOM = FinalStatus("oom", 3, None, oom_kind="cpu", error="DefaultCPUAllocator: can't allocate memory", error_step=6)


def _prof(**train):
    return load_profile("tiny-lora", [f"train.{k}={json.dumps(v)}" for k, v in train.items()])


# ------------------------------------------------------------------ what is shrunk


@pytest.mark.parametrize("micro,accum,want", [
    (8, 2, (4, 4)), (4, 4, (2, 8)), (2, 8, (1, 16)), (16, 1, (8, 2)),
    (6, 1, (3, 2)), (9, 2, (3, 6)), (5, 3, (1, 15)), (3, 1, (1, 3)),
])
def test_half_the_micro_batch_twice_the_accumulation(micro, accum, want):
    s = shrink(micro, accum)
    assert (s.new_micro, s.new_accum) == want
    assert s.words() == f"batch {micro} -> {want[0]}, accumulation {accum} -> {want[1]}"


def test_the_effective_batch_never_changes_and_the_chain_ends_at_micro_batch_1():
    for micro in range(2, 65):
        for accum in (1, 3):
            s = shrink(micro, accum)
            assert s.new_micro * s.new_accum == micro * accum  # the effective batch
            assert micro % s.new_micro == 0 and 1 <= s.new_micro <= micro // 2  # at most half
        steps, m, a = 0, micro, 1
        while (s := shrink(m, a)) is not None:
            m, a, steps = s.new_micro, s.new_accum, steps + 1
        assert (m, a) == (1, micro) and steps <= micro.bit_length()
    assert shrink(1, 4) is None


# ------------------------------------------------------------------ when it stops


def test_an_oom_in_training_is_retried_with_the_next_attempt_number():
    d = decide(_prof(on_oom="shrink", batch_size=8, grad_accum=2), OOM, kind="run", attempt=1, phase=None)
    assert d.retry and d.attempt == 2 and (d.shrink.new_micro, d.shrink.new_accum) == (4, 4)
    assert d.reason == "batch 8 -> 4, accumulation 2 -> 4"
    # the first step is training: its batch is the one that did not fit
    assert decide(_prof(on_oom="shrink"), OOM, kind="run", attempt=1, phase="first-step").retry
    for kind in ("cuda", "host-kill"):
        host = FinalStatus("oom", -9, "SIGKILL", oom_kind=kind, error_step=3)
        assert decide(_prof(on_oom="shrink"), host, kind="run", attempt=1, phase=None).retry, kind


@pytest.mark.parametrize("changes,final,kw,reason", [
    ({}, OOM, {}, ""),  # on_oom = "fail" (the default): no retry, nothing to say
    ({"on_oom": "shrink"}, FinalStatus("failed", 1, None, error="boom"), {}, ""),
    ({"on_oom": "shrink"}, FinalStatus("completed", 0, None), {}, ""),
    ({"on_oom": "shrink"}, OOM, {"kind": "probe"}, "a probe run is not retried"),
    ({"on_oom": "shrink"}, OOM, {"kind": "command"}, "a command run is not retried"),
    ({"on_oom": "shrink"}, OOM, {"slurm": True}, "a Slurm job's node is not retried on its own"),
    ({"on_oom": "shrink"}, FinalStatus("oom", 3, None, oom_kind="nccl"), {},
     "an out of memory of kind nccl does not depend on the micro batch"),
    ({"on_oom": "shrink"}, OOM, {"phase": "loading-model"},
     "out of memory before training (loading model): a smaller micro batch would not help"),
    ({"on_oom": "shrink", "batch_size": 1}, OOM, {}, "the micro batch is 1 already: nothing left to shrink"),
    ({"on_oom": "shrink"}, OOM, {"attempt": 4}, "gave up after 3 retries (train.max_oom_retries)"),
    ({"on_oom": "shrink", "max_oom_retries": 1}, OOM, {"attempt": 2}, "gave up after 1 retry (train.max_oom_retries)"),
    ({"on_oom": "shrink", "max_oom_retries": 0}, OOM, {}, "gave up after 0 retries (train.max_oom_retries)"),
])
def test_when_it_stops_and_why(changes, final, kw, reason):
    args = {"kind": "run", "attempt": 1, "phase": None, **kw}
    assert decide(_prof(**changes), final, **args) == Decision(False, reason)


def test_max_oom_retries_attempts_after_the_first():
    prof = _prof(on_oom="shrink", batch_size=64, max_oom_retries=3)
    assert [decide(prof, OOM, kind="run", attempt=n, phase=None).retry for n in (1, 2, 3, 4)] == [True] * 3 + [False]


def test_the_message():
    s = shrink(8, 2)
    assert recovery_message(7, s, 5) == ("recovered from OOM at step 7: batch 8 -> 4, accumulation 2 -> 4, "
                                         "from the checkpoint of step 5")
    assert recovery_message(1, s, 0) == ("recovered from OOM at step 1: batch 8 -> 4, accumulation 2 -> 4, "
                                         "from the start: no checkpoint yet")


# ------------------------------------------------------------------ the profile keys and the flag


def test_the_keys_their_defaults_and_one_line_errors():
    train = load_profile("tiny-lora").train
    assert (train.on_oom, train.max_oom_retries) == ("fail", 3)
    with pytest.raises(ProfileError, match=r"train.on_oom: unknown value 'grow' \(one of: fail, shrink\)"):
        load_profile("tiny-lora", ["train.on_oom=grow"])
    with pytest.raises(ProfileError, match=r"train.max_oom_retries: must be >= 0, got -1"):
        load_profile("tiny-lora", ["train.max_oom_retries=-1"])


def test_the_flag_sets_the_key_and_is_refused_with_resume_and_commands():
    from fttui.cli.common import resolve
    from fttui.cli.main import main

    args = argparse.Namespace(profile="tiny-lora", overrides=[], from_config=None, on_oom="shrink")
    assert resolve(args).train.on_oom == "shrink"
    assert main(["run", "--resume", "x", "--on-oom", "shrink", "--headless"]) == 2
    assert main(["run", "--on-oom", "shrink", "--headless", "--", "true"]) == 2


# ------------------------------------------------------------------ the next attempt


def _failed_run(checkpoint_step: int | None) -> rundir.RunDir:
    resolved = load_profile("tiny-lora", ["train.on_oom=shrink", "train.batch_size=8", "train.grad_accum=2"])
    rd = rundir.create(resolved.to_dict(), ["python", "-m", "fttui.worker.train"], {}, kind="run")
    if checkpoint_step is not None:
        ck = rd.path / "output" / f"checkpoint-{checkpoint_step}"
        ck.mkdir(parents=True)
        (ck / "trainer_state.json").write_text("{}")
        append_jsonl(rd.events_path, {"event": "save", "t": 1.0, "rank": 0, "kind": "checkpoint",
                                      "step": checkpoint_step, "path": str(ck)})
    return rd


def test_the_next_attempt_continues_from_the_last_checkpoint_shrunk():
    rd = _failed_run(4)
    d = decide(rd.profile(), OOM, kind="run", attempt=1, phase=None)
    nxt = prepare_next(rd, OOM, d)
    assert nxt.run_id != rd.run_id and nxt.path.parent == rd.path.parent
    train = nxt.profile().train
    assert (train.batch_size, train.grad_accum, train.on_oom) == (4, 4, "shrink")
    cmd = nxt.command()
    ck = str(rd.path / "output" / "checkpoint-4")
    assert cmd.argv[-2:] == ["--resume-from", ck]
    assert cmd.resume.to_dict() == {"run_id": rd.run_id, "checkpoint": ck, "step": 4}
    assert cmd.attempt.to_dict() == {"n": 2, "first": rd.run_id, "previous": rd.run_id, "oom_step": 7, "oom_kind": "cpu",
                              "from_step": 4, "batch": [8, 4], "accum": [2, 4],
                              "message": "recovered from OOM at step 7: batch 8 -> 4, accumulation 2 -> 4, "
                                         "from the checkpoint of step 4"}
    # the third attempt names the first of the chain, and continues the second
    d3 = decide(nxt.profile(), OOM, kind="run", attempt=2, phase=None)
    third = prepare_next(nxt, OOM, d3)
    assert third.command().attempt.first == rd.run_id and third.command().attempt.previous == nxt.run_id
    # nxt ran out of memory before a checkpoint of its own: the third continues from the one nxt was given
    assert third.command().resume.to_dict() == {"run_id": nxt.run_id, "checkpoint": ck, "step": 4}
    assert third.command().argv[-2:] == ["--resume-from", ck]
    assert third.command().attempt.message.endswith("batch 4 -> 2, accumulation 4 -> 8, from the checkpoint of step 4")
    assert (third.profile().train.batch_size, third.profile().train.grad_accum) == (2, 8)


def test_without_a_checkpoint_the_next_attempt_starts_over():
    rd = _failed_run(None)
    oom = FinalStatus("oom", 3, None, oom_kind="cpu", error_step=0)
    nxt = prepare_next(rd, oom, decide(rd.profile(), oom, kind="run", attempt=1, phase=None))
    cmd = nxt.command()
    assert "--resume-from" not in cmd.argv
    assert cmd.resume.to_dict() == {"run_id": rd.run_id, "checkpoint": None, "step": 0}
    assert cmd.attempt.message.startswith("recovered from OOM at step 1: ")
    assert cmd.attempt.message.endswith("from the start: no checkpoint yet")


# ------------------------------------------------------------------ the chain, as every view reads it


def test_the_chain_in_the_fold_the_status_line_ls_and_the_rows(capsys):
    rd = _failed_run(4)
    d = decide(rd.profile(), OOM, kind="run", attempt=1, phase=None)
    nxt = prepare_next(rd, OOM, d)
    append_jsonl(rd.events_path, {"event": "retry", "t": 2.0, "rank": -1, "source": "supervisor",
                                  "next_run": nxt.run_id, "attempt": 2, "message": "retried as ..."})
    rundir.write_json_atomic(rd.status_path, OOM.to_dict())
    append_jsonl(nxt.events_path, attempt_event(nxt).to_dict())
    msg = nxt.command().attempt.message
    ev = read_jsonl(nxt.events_path)[0]
    assert (ev["event"], ev["attempt"], ev["first"], ev["message"]) == ("attempt", 2, rd.run_id, msg)

    snap = RunState().replay(read_jsonl(nxt.events_path), []).snapshot()
    assert (snap.attempt, snap.recovered, snap.retried_as) == (2, msg, None)
    assert status_line(snap).text == f"STARTING (attempt 2: {msg})"
    first = RunState().replay(read_jsonl(rd.events_path), []).snapshot()
    assert (first.attempt, first.recovered, first.retried_as) == (1, None, nxt.run_id)

    assert run_brief(nxt).note == f"attempt 2: {msg}"
    assert run_brief(rd).note == f"retried as {nxt.run_id}"
    assert run_brief(rd).state_text() == f"oom (retried as {nxt.run_id})"
    assert [r.run_id for r in attempts(rd)] == [rd.run_id, nxt.run_id]
    assert [r.run_id for r in attempts(nxt)] == [nxt.run_id]
    from fttui.cli.runs_cmd import _find_run

    # `fttui cancel FIRST` stops the attempt that continues it (just created: live for a while)
    assert _find_run(rd.run_id, live_only=True).run_id == nxt.run_id
    # `fttui run --json` prints the last attempt, naming them all
    from fttui.cli.conventions import follow_as_json

    assert follow_as_json(rd, lambda: 0) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["run_id"], doc["attempts"]) == (nxt.run_id, [rd.run_id, nxt.run_id])

    row = build_row(nxt, snap, FinalStatus("completed", 0, None), t_launch=1.0, t_end=2.0)
    assert (row["attempt"], row["attempt_of"], row["recovered"], row["retried_as"]) == (2, rd.run_id, msg, None)
    assert (row["resumed_from"], row["resumed_step"]) == (rd.run_id, 4)
    assert (row["batch_size"], row["grad_accum"], row["effective_batch"]) == (4, 4, 16)
    row1 = build_row(rd, first, OOM, t_launch=1.0, t_end=2.0)
    assert (row1["attempt"], row1["attempt_of"], row1["retried_as"], row1["effective_batch"]) == \
        (1, None, nxt.run_id, 16)


def test_the_kernels_oom_kill_count_makes_a_sigkill_a_host_oom_kill(tmp_path):
    """A SIGKILL is the OOM killer's when the run's cgroup counted one (``memory.events``), even
    without a host budget and with no sample near the host's total: it is then retried."""
    from fttui.core.run.processes import cgroup
    from fttui.core.run.processes.oomkill import KillEvidence
    from fttui.core.run.fold.snapshot import RunSnapshot
    from fttui.core.run.row.summary import final_status

    cg = tmp_path / "fttui-run"
    cg.mkdir()
    assert cgroup.oom_kills(cg) is None and cgroup.oom_kills(None) is None  # no memory.events: no evidence
    (cg / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n")
    assert cgroup.oom_kills(cg) == 1
    resolved = load_profile("tiny-lora", ["train.on_oom=shrink"])
    rd = rundir.create(resolved.to_dict(), ["python"], {}, kind="run")
    snap = RunSnapshot(step=3)
    assert final_status(rd, snap, -9, None).status == "failed"  # a SIGKILL, no evidence: not an OOM
    st = final_status(rd, snap, -9, None, kill=KillEvidence(run_cgroup=cgroup.oom_kills(cg)))
    assert (st.status, st.oom_kind, st.error_step) == ("oom", "host-kill", 3)
    assert st.error == ("killed by SIGKILL: the kernel's OOM killer (the kernel counted 1 OOM kill(s) in the run's "
                        "cgroup (memory.events oom_kill))")
    d = decide(resolved, st, kind="run", attempt=1, phase=None)
    assert d.retry and d.reason == "batch 8 -> 4, accumulation 1 -> 2"
