"""The measured ranking's decisions (issue 43 item 1), with fake measurements: the re-ranking, the
forecast's error, the early stop (no setup left can win by the corrected forecast; the budget),
the step time read from a run's step events, the budget's words and the CLI's bad input."""

from __future__ import annotations

import pytest

from fttui.core.experiments.measured import (
    NOISE,
    Trial,
    correction,
    measured_table,
    parse_budget,
    rerank,
    step_seconds,
    stop_reason,
)
from fttui.core.experiments.plan import PlanError


def _t(index: int, forecast: float | None, step: float | None, status: str = "completed") -> Trial:
    return Trial(index=index, setup=f"setup {index + 1}", forecast_s=forecast, step_s=step, status=status,
                 run_id=f"run-{index}")


def test_rerank_orders_by_the_measured_step_and_puts_verdicts_last():
    trials = [_t(0, 1.0, 3.0), _t(1, 1.1, 2.0), _t(2, 1.2, None, "oom"), _t(3, 1.3, 2.5), _t(4, 1.4, None, "failed")]
    assert [t.index for t in rerank(trials)] == [1, 3, 0, 2, 4]
    rows = measured_table(trials)
    assert [r[0] for r in rows] == ["1", "2", "3", "-", "-"]  # only measured setups are ranked
    assert [r[1] for r in rows] == ["2", "4", "1", "3", "5"]  # the plan's place beside it
    assert rows[0][3:7] == ["1.1 s", "2 s", "-45%", "completed"]  # forecast, measured, error, verdict
    assert rows[3][4:7] == ["-", "-", "oom"]


def test_the_forecast_error_and_the_correction():
    slow, fast = _t(0, 1.0, 2.0), _t(1, 2.0, 3.0)
    assert slow.error == pytest.approx(-0.5) and fast.error == pytest.approx(-1 / 3)
    assert correction([slow, fast]) == pytest.approx(1.5)  # the lowest measured/forecast: the most favourable
    assert correction([_t(0, 1.0, None, "oom")]) is None
    assert _t(0, None, 2.0).error is None and correction([_t(0, None, 2.0)]) is None


def test_stop_when_no_setup_left_can_beat_the_best_measured():
    measured = [_t(0, 1.0, 2.0)]  # forecast 1 s, measured 2 s: the forecast is x2 too fast
    # left forecasts 1.2 and 1.5: x2 -> 2.4 s less 5% = 2.28 s, not below 2.0: stop
    why = stop_reason([1.2, 1.5], measured)
    assert why is not None and "no setup left can beat" in why and "2 s/step" in why
    # a left setup forecast as fast as the measured one (a tie the forecast cannot break) is tried
    assert stop_reason([1.0, 1.5], measured) is None
    # within the noise of the best: still tried; just beyond it: not
    assert stop_reason([1.0 / (1 - NOISE) - 0.01], measured) is None
    assert stop_reason([1.0 / (1 - NOISE) + 0.01], measured) is not None


def test_the_correction_takes_the_most_favourable_error_seen():
    # two measured: ratios 2.0 and 1.25; the best measured 2.0 s; a left setup forecast 1.6 s:
    # x1.25 -> 2.0 less 5% -> 1.9 < 2.0, it can still win and is tried
    trials = [_t(0, 1.0, 2.0), _t(1, 2.0, 2.5)]
    assert stop_reason([1.6], trials) is None
    assert stop_reason([1.8], trials) is not None  # 1.8 x 1.25 x 0.95 = 2.14 >= 2.0


def test_no_stop_without_a_measurement_or_a_forecast():
    assert stop_reason([1.0], []) is None
    assert stop_reason([1.0], [_t(0, 1.0, None, "oom"), _t(1, 1.0, None, "failed")]) is None  # verdicts only
    assert stop_reason([None, 9.0], [_t(0, 1.0, 1.0)]) is None  # a setup of no forecast is never ruled out
    assert stop_reason([], [_t(0, 1.0, 1.0)]) == "every setup that fits was measured"


def test_the_budget_stops_before_the_next_trial():
    why = stop_reason([1.0, 1.1], [_t(0, 1.0, 5.0)], elapsed_s=600.0, budget_s=600.0)
    assert why is not None and "budget of 10.0 min is spent" in why and "2 setups not measured" in why
    assert stop_reason([1.0], [], elapsed_s=10.0, budget_s=600.0) is None


def test_a_cancelled_or_timed_out_trial_is_not_ranked():
    trials = [_t(0, 1.0, 2.0, "cancelled"), _t(1, 1.0, 3.0)]
    assert not trials[0].measured and [t.index for t in rerank(trials)] == [1, 0]
    assert correction(trials) == pytest.approx(3.0)


def test_step_seconds_is_the_median_of_the_timed_steps_slowest_rank_each():
    from fttui.core.run.files.events import parse_event

    events = [parse_event(e) for e in [
        {"event": "start"},
        {"event": "step", "rank": 0, "step": 1, "step_time": 9.0},  # the warm-up: left out
        {"event": "step", "rank": 0, "step": 2, "step_time": 1.0},
        {"event": "step", "rank": 1, "step": 2, "step_time": 1.4},  # the slower rank counts
        {"event": "step", "rank": 0, "step": 3, "step_time": 1.2},
        {"event": "step", "rank": 0, "step": 4, "step_time": 5.0},
        {"event": "step", "rank": 0, "step": 5, "step_time": None},
    ]]
    assert step_seconds(events, warmup=1) == pytest.approx(1.4)  # median of 1.4, 1.2, 5.0
    assert step_seconds(events, warmup=3) == pytest.approx(5.0)
    assert step_seconds([parse_event({"event": "step", "step": 1, "step_time": 2.0})], warmup=1) is None


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("10m", 600), ("1.5h", 5400), ("45", 45), ("2min", 120)])
def test_parse_budget(text, seconds):
    assert parse_budget(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "0", "-5m", "ten minutes", "nan", "inf"])
def test_parse_budget_refuses_bad_input(text):
    with pytest.raises(PlanError, match="--budget"):
        parse_budget(text)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--measure", "0"], "--measure 0: give the number of timed steps"),
        (["--budget", "10m"], "--budget 10m: it bounds --measure N"),
        (["--measure", "2", "--budget", "soon"], "--budget soon: give a time above 0"),
        (["--measure", "2", "--verify", "1"], "--measure runs the setups that fit already"),
        (["--measure", "2", "--write", "../elsewhere"], "--write '../elsewhere': give a profile name"),
        (["--measure", "2", "--set", "devices.nodes=2"], "--measure 2: the trials run on one machine"),
    ],
)
def test_measure_bad_input_is_one_line_and_exit_2(args, said, capsys, fttui_home, tmp_path, monkeypatch):
    from fttui.cli.main import main

    monkeypatch.chdir(tmp_path)
    rc = main(["plan", "--profile", "tiny-lora", "--gpus", "0", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and said in err[0], err


def test_measure_refuses_an_existing_write_target_before_any_trial(capsys, fttui_home, tmp_path, monkeypatch):
    from fttui.cli.main import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "taken.toml").write_text("# mine\n")
    rc = main(["plan", "--profile", "tiny-lora", "--gpus", "0", "--measure", "2", "--write", "taken"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "exists; choose another name" in err[0], err
    assert not (fttui_home / "runs").exists() or not any((fttui_home / "runs").iterdir())  # nothing launched
    assert (tmp_path / "profiles" / "taken.toml").read_text() == "# mine\n"


class _FakeTrialRun:
    """A trial's executor that launches nothing; its start() is where SIGINT lands (``at``:
    ``start``, inside the launch call; ``wait``, in the first poll of the wait)."""

    at = "start"
    cancelled: list[str] = []

    def __init__(self, profile, **_kw):
        self.profile, self.polls = profile, 0

    def start(self):
        import os
        import signal

        if self.at == "start":
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs before the next bytecode
        return self._rd()

    def _rd(self):
        class Rd:
            run_id = "fake-run"

            def supervisor(self):
                return {"pid": 1}

        return Rd()

    def alive(self):
        import os
        import signal

        self.polls += 1
        if self.at == "wait" and self.polls == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return not self.cancelled

    def cancel(self):
        self.cancelled.append("cancel")

    def final_state(self):
        return None


@pytest.mark.parametrize("at", ["start", "wait"])
def test_ctrl_c_inside_the_trials_launch_cancels_the_launched_run(at, fttui_home, monkeypatch):
    """SIGINT that lands inside the launch call of a trial (the supervisor started, its run not yet
    returned) or in its wait: the launch completes, the run is cancelled, TrialInterrupted carries
    it; with SIGINT inherited ignored too (a CI script's background job), and the handler before
    the call is put back."""
    import signal

    from fttui.core.experiments.planning import TrialInterrupted, machine_budget, run_plan, trial_run
    from fttui.core.profiles import apply_overrides, load_profile
    from fttui.core.run.launching import executors

    monkeypatch.setattr(executors, "LocalRun", _FakeTrialRun)
    monkeypatch.setattr(_FakeTrialRun, "at", at)
    monkeypatch.setattr(_FakeTrialRun, "cancelled", [])
    prof = apply_overrides(load_profile("tiny-lora"), ["data.max_seq_len=32"])
    budget = machine_budget(prof, gpus=0)
    option = next(o for o in run_plan(prof, budget, effective_batch=2) if o.fits)
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(TrialInterrupted) as stop:
            trial_run(prof, option, budget, 2, group="g", longest=32)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # put back
    finally:
        signal.signal(signal.SIGINT, before)
    assert stop.value.rundir.run_id == "fake-run" and _FakeTrialRun.cancelled == ["cancel"]


def test_a_stop_asked_before_a_trial_launches_nothing(fttui_home, monkeypatch):
    """measure() with its stop already asked: no trial launched, the reason says interrupted."""
    from fttui.core.experiments.measured import measure
    from fttui.core.experiments.planning import machine_budget, run_plan
    from fttui.core.profiles import apply_overrides, load_profile
    from fttui.core.run.launching import executors

    monkeypatch.setattr(executors, "LocalRun", None)  # launching anything would fail loudly
    prof = apply_overrides(load_profile("tiny-lora"), ["data.max_seq_len=32"])
    budget = machine_budget(prof, gpus=0)
    trials, why = measure(prof, run_plan(prof, budget, effective_batch=2), budget, 1, stop=lambda: True)
    assert trials == [] and why.startswith("interrupted")


def test_a_kind_already_measured_is_corrected_by_its_own_error():
    """Tied forecasts (the uncalibrated forecast does not tell the kinds apart): none measured
    x2 its forecast, FSDP x3. A left FSDP setup forecast 2% slower than the best's forecast is
    corrected by FSDP's x3 and ruled out; by the lowest (x2) it would be tried; a left setup of a
    kind not yet measured still takes the lowest."""
    def kind(t: Trial, sharding: str) -> Trial:
        return Trial(index=t.index, setup=t.setup, settings={"sharding": sharding}, forecast_s=t.forecast_s,
                     step_s=t.step_s, status=t.status, run_id=t.run_id)

    trials = [kind(_t(0, 1.0, 2.0), "none"), kind(_t(1, 1.0, 3.0), "fsdp")]
    left = [1.02]
    assert stop_reason(left, trials) is None  # the lowest error: 1.02 x 2 x 0.95 < 2.0
    why = stop_reason(left, trials, left_kinds=["fsdp"])
    assert why is not None and "its kind's measured error" in why  # 1.02 x 3 x 0.95 >= 2.0
    assert stop_reason(left, trials, left_kinds=["zero2"]) is None  # not measured: the lowest, tried
    assert stop_reason(left, trials, left_kinds=["none"]) is None  # 1.02 x 2 x 0.95 < 2.0
