"""Startup phases: the fold (phase events and build samples -> phase, phase_since, ended by the
first step), the status texts and the headless lines (a real run's: tests/e2e/phase_checks.py)."""

from __future__ import annotations

from fttui.cli.live import phase_lines
from fttui.core.run.fold.phases import PHASES, mmss, phase_text
from fttui.core.run.files.sample_records import Sample
from fttui.core.run.fold.snapshot import RunSnapshot
from fttui.core.run.fold.state import RunState
from fttui.core.run.files.statusfile import FinalStatus
from fttui.core.run.fold.status import status_line
from fttui.monitor import HostSnapshot

T0 = 1_000_000.0


def phase(name: str, t: float, rank: int = 0) -> dict:
    return {"event": "phase", "phase": name, "t": T0 + t, "rank": rank, "source": "worker"}


def sample(t: float, build: int | None = 0) -> Sample:
    host = HostSnapshot(ram_used_mb=1000.0, tree_rss_mb=300.0, tree_nprocs=2, build_rss_mb=0.0, build_nprocs=build)
    return Sample(t=T0 + t, host=host)


def step(n: int, t: float) -> dict:
    return {"event": "step", "t": T0 + t, "rank": 0, "step": n, "total_steps": 4, "samples": 8 * n,
            "tokens": 1024 * n, "tokens_padded": 1024 * n, "train_time": 0.1 * n, "loss": 1.0}


def fold(*items: dict | Sample) -> RunState:
    st = RunState()
    for it in items:
        if isinstance(it, Sample):
            st.apply_sample(it)
        else:
            st.apply(it)
    return st


# ------------------------------------------------------------------ the fold
def test_no_phase_known_before_any_event():
    snap = RunState().snapshot()
    assert snap.phase is None and snap.phase_since is None and snap.phase_history == ()


def test_phase_events_fold_in_order_with_their_start():
    snap = fold(phase("loading-model", 0), phase("preparing-data", 4), sample(5)).snapshot()
    assert snap.phase == "preparing-data"
    assert snap.phase_since == T0 + 4
    assert snap.last_t == T0 + 5
    assert snap.phase_history == (("loading-model", T0), ("preparing-data", T0 + 4))


def test_phases_only_move_forward_and_the_first_rank_gives_the_start():
    snap = fold(phase("loading-model", 0, rank=0), phase("preparing-data", 3, rank=0),
                phase("loading-model", 1, rank=1),  # a slower rank does not move it back
                phase("preparing-data", 2.5, rank=1)).snapshot()  # earlier start of the same phase
    assert snap.phase == "preparing-data"
    assert snap.phase_since == T0 + 2.5
    assert [p for p, _ in snap.phase_history] == ["loading-model", "preparing-data"]


def test_a_build_in_the_samples_shows_building_ops_from_the_first_such_sample():
    st = fold(phase("loading-model", 0), sample(1), sample(2, build=2), sample(30, build=3))
    snap = st.snapshot()
    assert snap.phase == "building-ops"
    assert snap.phase_since == T0 + 2
    assert snap.last_t == T0 + 30
    # the build tools are gone: the worker's phase again, with its own start
    st.apply_sample(sample(31, build=0))
    snap = st.snapshot()
    assert snap.phase == "loading-model" and snap.phase_since == T0
    assert snap.phase_history == (("loading-model", T0), ("building-ops", T0 + 2), ("loading-model", T0 + 31))


def test_a_build_tool_in_one_sample_only_is_no_build():
    # torch runs ``ninja`` on every load of a DeepSpeed op to find it up to date: a loaded
    # machine's sampler catches it now and then (seen in CI: "building ops" while loading the model)
    st = fold(phase("loading-model", 0), sample(1), sample(2, build=1), sample(3, build=0),
              phase("preparing-data", 4), sample(5, build=1), sample(6, build=0))
    snap = st.snapshot()
    assert snap.phase == "preparing-data" and snap.phase_since == T0 + 4
    assert [p for p, _ in snap.phase_history] == ["loading-model", "preparing-data"]
    assert phase_lines(snap, 0) == ["phase: loading the model", "phase: preparing data (loading the model took 00:04)"]


def test_the_worker_announcing_building_ops_keeps_the_earlier_start():
    snap = fold(phase("preparing-data", 0), sample(1, build=1), phase("building-ops", 3),
                sample(4, build=1)).snapshot()
    assert snap.phase == "building-ops" and snap.phase_since == T0 + 1
    snap = fold(phase("preparing-data", 0), phase("building-ops", 3), sample(4, build=1),
                sample(9, build=0)).snapshot()
    assert snap.phase == "building-ops" and snap.phase_since == T0 + 3  # the worker's phase goes on


def test_samples_without_build_counts_change_nothing():
    snap = fold(phase("loading-model", 0), sample(1, build=None)).snapshot()
    assert snap.phase == "loading-model" and snap.phase_since == T0


def test_the_first_step_ends_the_startup_phases():
    st = fold(phase("loading-model", 0), phase("first-step", 5), sample(6, build=1), step(1, 7))
    snap = st.snapshot()
    assert snap.phase is None and snap.phase_since is None
    assert snap.startup_ended_t == T0 + 7
    # later phase events and build samples no longer start a phase
    st.apply_sample(sample(8, build=2))
    st.apply(phase("building-ops", 9))
    st.apply(step(2, 10))
    snap = st.snapshot()
    assert snap.phase is None and snap.startup_ended_t == T0 + 7
    assert [p for p, _ in snap.phase_history] == ["loading-model", "first-step"]  # one build sample: no build


def test_an_end_event_ends_them_too():
    snap = fold(phase("first-step", 0), {"event": "end", "t": T0 + 2, "step": 0}).snapshot()
    assert snap.phase is None and snap.startup_ended_t == T0 + 2


# ------------------------------------------------------------------ texts
def test_phase_words_and_clock():
    assert [phase_text(p) for p in PHASES] == ["loading the model", "preparing data", "building ops", "first step"]
    assert phase_text("downloading-weights") == "downloading weights"
    assert phase_text(None) == ""
    assert mmss(0) == "00:00" and mmss(4.9) == "00:04" and mmss(72) == "01:12"
    assert mmss(3723) == "1:02:03" and mmss(-3) == "00:00" and mmss(None) == "00:00"


def test_status_line_names_the_phase_and_its_time_from_the_snapshot():
    snap = fold(phase("loading-model", 0), sample(1), sample(2, build=2), sample(74, build=2)).snapshot()
    for detail in (True, False):
        line = status_line(snap, detail=detail)
        assert line.text == "STARTING: building ops (01:12)"
        assert line.kind == "running"
    snap = fold(phase("loading-model", 0), sample(4.2)).snapshot()
    assert status_line(snap, detail=True).text == "STARTING: loading the model (00:04)"


def test_status_line_keeps_the_phase_after_the_start_event_until_the_first_step():
    start = {"event": "start", "t": T0 + 10, "rank": 0, "total_steps": 4, "world_size": 1}
    st = fold(phase("first-step", 9), start, sample(12))
    assert st.snapshot().status == "running"
    assert status_line(st.snapshot()).text == "STARTING: first step (00:03)"
    st.apply(step(1, 13))
    assert status_line(st.snapshot()).text == "RUNNING"


def test_without_a_phase_the_texts_stay_as_they_were():
    assert status_line(RunSnapshot(), detail=True).text == "STARTING: loading the model"
    assert status_line(RunSnapshot()).text == "STARTING"
    assert status_line(RunSnapshot(status="running")).text == "RUNNING"
    assert status_line(fold(sample(1)).snapshot(), detail=True).text == "STARTING: loading the model"


def test_final_lost_and_cancelling_win_over_the_phase():
    st = fold(phase("building-ops", 0), sample(5, build=1))
    assert status_line(st.snapshot(), lost=True).text.startswith("LOST")
    assert status_line(st.snapshot(), cancelling=True).text.startswith("CANCELLING")
    st.set_final(FinalStatus(status="cancelled", error="cancelled by the user"))
    assert status_line(st.snapshot(), detail=True).text == "CANCELLED: cancelled by the user"
    st = fold(phase("building-ops", 0), {"event": "error", "t": T0 + 3, "kind": "error", "message": "boom"})
    assert status_line(st.snapshot()).text == "FAILED: boom"


# ------------------------------------------------------------------ headless lines
def test_headless_lines_one_per_change_with_the_time_of_the_one_before():
    st = fold(phase("loading-model", 0))
    assert phase_lines(st.snapshot(), 0) == ["phase: loading the model"]
    st.apply(phase("preparing-data", 4))
    st.apply_sample(sample(5, build=1))
    st.apply_sample(sample(6, build=1))
    st.apply_sample(sample(77, build=0))
    st.apply(phase("first-step", 78))
    st.apply(step(1, 80))
    assert phase_lines(st.snapshot(), 1) == [
        "phase: preparing data (loading the model took 00:04)",
        "phase: building ops (preparing data took 00:01)",
        "phase: preparing data (building ops took 01:12)",
        "phase: first step (preparing data took 00:01)",
        "phase: training (first step took 00:02)",
    ]
    assert phase_lines(st.snapshot(), 6) == []


def test_headless_lines_stay_silent_without_phases():
    assert phase_lines(fold(sample(1), step(1, 2)).snapshot(), 0) == []


def test_a_later_worker_phase_ends_a_build_seen_in_samples_read_before_it():
    # events and samples are read from two files: the build sample may be folded before the
    # first-step event, and the sample saying the build is over only after it
    st = fold(phase("building-ops", 0), sample(1, build=2), phase("first-step", 55))
    assert st.snapshot().phase == "first-step" and st.snapshot().phase_since == T0 + 55
    st.apply_sample(sample(54, build=2))  # older than the worker's phase: no build again
    assert st.snapshot().phase == "first-step"
    st.apply_sample(sample(56, build=1))  # a new build during the first step shows
    st.apply_sample(sample(57, build=1))
    assert st.snapshot().phase == "building-ops" and st.snapshot().phase_since == T0 + 56
    assert [p for p, _ in st.snapshot().phase_history] == ["building-ops", "first-step", "building-ops"]


def test_a_command_run_says_it_runs_not_that_it_loads_a_model():
    """A user command's run (``fttui run -- CMD``) has none of the worker's model phases: launched,
    with no training reported, every view says it runs (issue 40 item 7b); a Trainer's start and
    steps read as any run's."""
    from fttui.core.run.launching.command import command_profile

    st = RunState.for_profile(command_profile(["python", "-c", "print('hi')"], cwd="/"))
    snap = st.snapshot()
    assert snap.command
    for detail in (True, False):
        assert status_line(snap, detail=detail).text == "STARTING: launching the command"
    st.apply({"event": "launch", "t": T0, "rank": -1, "pid": 5, "source": "supervisor"})
    st.apply_sample(sample(3))
    for detail in (True, False):
        line = status_line(st.snapshot(), detail=detail)
        assert line.text == "RUNNING: the command runs; no training step reported yet" and line.kind == "running"
    st.apply({"event": "start", "t": T0 + 4, "rank": 0, "total_steps": 4, "world_size": 1})
    st.apply(step(1, 5))
    assert status_line(st.snapshot(), detail=True).text == "RUNNING"
    # a profile's run (no command) still says the model is loading
    assert not RunState.for_profile(None).snapshot().command
