"""`fttui plan --measure N` (issue 43 item 1): the setups that fit, timed for real in forecast
order, re-ranked by the measured step; a failing trial and an out-of-memory trial each end with
their verdict, promptly, and what was measured before is kept."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from tests.conftest import run_fttui

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

SMALL = ["--set", "data.max_seq_len=32"]  # each step a fraction of a second: the launches dominate


def test_measured_plan_reranks_records_and_writes_the_winner(fttui_home, tmp_path):
    """tiny-lora on one CPU rank, 4 setups (micro {1, 2} x checkpointing), 2 timed steps each:
    every trial is a recorded row, the table ranks by the measured step with the forecast's error,
    and --write saves the measured winner."""
    from fttui.core.results.store import Store

    t0 = time.monotonic()
    r = run_fttui("plan", "--profile", "tiny-lora", "--gpus", "0", "--effective-batch", "2", *SMALL,
                  "--measure", "2", "--budget", "5m", "--write", "measured-win", cwd=tmp_path, timeout=600)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    said = [x for x in r.stderr.splitlines() if x.startswith("measure: #")]
    assert said and "measure: stopped: " in r.stderr
    out = r.stdout.splitlines()
    at = out.index("measured, fastest first:")
    header, rows = out[at + 1], [x for x in out[at + 2:] if x.strip()]
    for name in ("forecast/step", "measured/step", "forecast error", "verdict"):
        assert name in header
    assert len(rows) == len(said)
    with Store() as store:
        stored = {x["run_id"]: x for x in store.rows()}
    measured = []
    for row in rows:
        run_id = row.split()[-1]
        assert run_id in stored and stored[run_id]["kind"] == "sweep"  # one recorded run a trial
        assert stored[run_id]["steps"] == 3 and stored[run_id]["status"] == "completed"  # warm-up + 2
        cells = row.split()
        forecast, step, error = float(cells[-7]), float(cells[-5]), cells[-3]
        assert cells[-6] == cells[-4] == "s" and error.endswith("%")
        assert abs(int(error.rstrip("%")) - round(100 * (forecast - step) / step)) <= 1  # the error beside them
        measured.append(step)
    assert measured == sorted(measured)  # re-ranked by the measured step
    winner = rows[0].split()
    plan_no = int(winner[1])
    table = out[1:at]
    first = next(x for x in table if x.split()[0] == str(plan_no)).split()
    written = (tmp_path / "profiles" / "measured-win.toml").read_text()
    assert f"batch_size = {first[3]}" in written and f"grad_accum = {first[4]}" in written
    assert f"gradient_checkpointing = {'true' if first[5] == 'on' else 'false'}" in written
    assert any(x.startswith("wrote ") and "(measured " in x for x in r.stderr.splitlines()), r.stderr
    print(f"measured plan: {len(rows)} trials in {took:.1f} s")


def test_measured_plan_on_two_ranks_under_a_budget(fttui_home):
    """Two CPU ranks, the shardings the uncalibrated forecast cannot tell apart (none, ZeRO-2,
    ZeRO-3, FSDP at one micro batch: ties, each tried): --budget ends the measuring, the trial
    running when it is spent is ended; --json gives each trial its verdict, the measured ones their
    rank by the measured step and the forecast's error."""
    t0 = time.monotonic()
    r = run_fttui("plan", "--profile", "tiny-lora", "--gpus", "0", "--set", "devices.cpu_processes=2",
                  "--effective-batch", "2", "--methods", "lora", *SMALL, "--measure", "1", "--budget", "15s",
                  "--json", timeout=600)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    opts = json.loads(r.stdout)
    tried = [o for o in opts if "measure_status" in o]
    # tied forecasts are each tried (the unit tests): only the budget ends this one, before the last
    assert 1 <= len(tried) < sum(o["fits"] for o in opts), r.stderr
    assert "measure: stopped: the budget of 15.0 s is spent" in r.stderr
    assert took < 15 + 30 + 15  # the budget, a cancelled trial's end, the plan itself
    done = [o for o in tried if o["measure_status"] == "completed"]
    assert done or [o["measure_status"] for o in tried] == ["timeout"], r.stderr  # a very loaded machine
    assert sorted(o["measured_rank"] for o in done) == list(range(1, len(done) + 1))
    by_rank = sorted(done, key=lambda o: o["measured_rank"])
    assert [o["measured_step_s"] for o in by_rank] == sorted(o["measured_step_s"] for o in done)
    for o in done:
        assert o["forecast_error"] == pytest.approx((o["step_seconds"] - o["measured_step_s"]) / o["measured_step_s"], abs=1e-3)
    for o in tried:
        if o["measure_status"] != "completed":
            assert o["measured_rank"] is None and o["measured_step_s"] is None


def _setup(*sets: str, host: str | None = None, effective: int = 2):
    """tiny-lora resolved with ``sets``, its plan on one CPU rank, and the budget."""
    from fttui.core.experiments.planning import machine_budget, run_plan
    from fttui.core.profiles import apply_overrides, load_profile

    limit = [f"limits.host_memory={host}"] if host else []
    prof = apply_overrides(load_profile("tiny-lora"), ["data.max_seq_len=32", *sets, *limit])
    budget = machine_budget(prof, gpus=0, host_memory_limit=host)
    return prof, budget, run_plan(prof, budget, effective_batch=effective)


def _verdicts(prof, budget, options):
    """Measure ``options`` (1 timed step), noting when each verdict came; returns (trials, why,
    each trial's seconds from its run's last event to its verdict)."""
    from fttui.core.experiments.measured import measure
    from fttui.core.run.files import rundir
    from fttui.core.run.files.events import read_jsonl

    came: list[float] = []
    trials, why = measure(prof, options, budget, 1, trial_timeout_s=300, on_result=lambda t: came.append(time.time()))
    lag = []
    for t, at in zip(trials, came, strict=True):
        rd = rundir.find(t.run_id)
        assert rd is not None
        last = max(float(e["t"]) for e in read_jsonl(rd.events_path) if isinstance(e.get("t"), (int, float)))
        lag.append(at - last)
    return trials, why, lag


def test_a_failing_trial_ends_with_its_verdict(fttui_home):
    """Training that fails (a LoRA target the model lacks) is a verdict, within 10 s of the run's
    last event, and the next setup is still measured; nothing failed is ranked."""
    from fttui.core.experiments.measured import rerank

    prof, budget, options = _setup('lora.target_modules=["no_such_module"]')
    trials, why, lag = _verdicts(prof, budget, options[:2])
    assert [t.status for t in trials] == ["failed", "failed"], trials
    assert why == "every setup that fits was measured" and all(t.step_s is None for t in trials)
    assert all(x < 10 for x in lag), lag
    assert [t.measured for t in rerank(trials)] == [False, False]


def test_an_oom_trial_ends_with_its_verdict(fttui_home):
    """A setup out of host memory (16 samples of 512 tokens under a 30 MiB limit per process the plan is overruled on: told it
    fits) ends as ``oom`` within 10 s of its run's last event."""
    prof, budget, options = _setup("data.max_seq_len=512", host="30MiB", effective=16)
    largest = max(options, key=lambda o: o.host_peak_bytes)
    assert not largest.fits
    forced = [replace(largest, fits=True)]  # the plan's largest setup, forced in
    trials, _why, lag = _verdicts(prof, budget, forced)
    assert [t.status for t in trials] == ["oom"] and trials[0].step_s is None
    assert all(x < 10 for x in lag), lag


def _interrupt_plan(tmp_path, trial: int, moment: str):
    """Start a measured plan (tiny-lora on 2 CPU ranks: the tied shardings are each tried) with
    SIGINT ignored, as a background job of a CI script starts it; send it SIGINT once the
    ``trial``-th trial's run is at ``moment``: ``made`` (its directory just made: the plan is
    inside its own launch call) or ``launched`` (its supervisor launched the training). Returns
    (the process, stdout, stderr, seconds from the SIGINT to the exit, the interrupted run)."""
    import signal
    import subprocess
    import sys

    from fttui.core.run.files import rundir
    from tests.conftest import fttui_env
    from tests.helpers import wait_for

    proc = subprocess.Popen([sys.executable, "-m", "fttui", "plan", "--profile", "tiny-lora", "--gpus", "0",
                             "--set", "devices.cpu_processes=2", "--effective-batch", "2", "--methods", "lora",
                             *SMALL, "--measure", "1"], env=fttui_env(), cwd=tmp_path, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        wait_for(lambda: len(rundir.list_runs()) >= trial, timeout=240, interval=0.02, what=f"trial {trial}'s run")
        run = max(rundir.list_runs(), key=lambda rd: rd.run_id)
        if moment == "launched":
            wait_for(lambda: '"event":"launch"' in (run.events_path.read_text() if run.events_path.exists() else ""),
                     timeout=120, interval=0.05, what="the trial's launch")
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc, out, err, took, run


def test_ctrl_c_inside_the_launch_of_a_trial_ends_it(fttui_home, tmp_path):
    """Ctrl-C the moment the first trial's run directory is made (the plan's own launch call is
    running): the launch is completed, the run cancelled and over within 10 s, exit 130, the
    cancelled trial in the table; SIGINT inherited ignored does not hide it."""
    from fttui.core.run.processes import liveness

    proc, out, err, took, run = _interrupt_plan(tmp_path, 1, "made")
    assert took < 10, (took, err)
    assert proc.returncode == 130, err
    assert "measure: #1 " in err and ": cancelled" in err and "stopped: interrupted" in err, err
    assert not liveness.is_live(run)  # the trial's processes are over
    final = run.final_status()
    assert final is not None and final.status == "cancelled", final
    table = out[out.index("measured, fastest first:"):].splitlines()
    assert table[2].split()[0] == "-" and "cancelled" in table[2] and run.run_id in table[2]


def test_ctrl_c_ends_the_trial_and_keeps_what_was_measured(fttui_home, tmp_path):
    """Ctrl-C once the second trial's training was launched: that trial is ended (cancelled, its
    run over) within 10 s, the first one's measurement is kept in the table, exit 130."""
    from fttui.core.run.processes import liveness

    proc, out, err, took, second = _interrupt_plan(tmp_path, 2, "launched")
    assert took < 10, (took, err)
    assert proc.returncode == 130, err
    assert "measure: #1 " in err and "measure: #2 " in err and ": cancelled" in err and "stopped: interrupted" in err
    assert not liveness.is_live(second)  # the trial's processes are over
    table = out[out.index("measured, fastest first:"):].splitlines()
    assert table[2].split()[0] == "1" and "completed" in table[2]  # the first trial, measured and kept
    assert "cancelled" in table[3] and second.run_id in table[3]
