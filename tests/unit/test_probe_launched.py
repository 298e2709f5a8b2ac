"""The probe of several processes or a sharding: which profiles launch each trial, what a trial
sets, the trial guard that binds a trial's processes to the probe, and the store row of a trial.

No training here: the guard is checked with a sleeping process tree (tests/e2e/test_oom_probe.py
runs real launched probes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from fttui.core.base.errors import FttuiError
from fttui.core.experiments import launched
from fttui.core.experiments.probe import MAX_LOADS, Prober
from fttui.core.experiments.trials import Trial, trial_row
from fttui.core.profiles import load_profile
from fttui.core.results.store import Store
from tests.helpers import processes_mentioning, wait_for

CPU2 = ["gpus=0", "devices.cpu_processes=2"]


@pytest.mark.parametrize("overrides, launch", [
    ([], False),
    (["gpus=0", "devices.cpu_processes=1"], False),
    (CPU2, True),
    (["gpus=0", "sharding=zero2"], True),
    (["gpus=0", "devices.cpu_processes=2", "sharding=zero3"], True),
    (["gpus=0", "devices.cpu_processes=2", "sharding=fsdp"], True),
])
def test_which_profiles_launch_each_trial(overrides, launch):
    resolved = load_profile("tiny-lora", overrides)
    assert launched.needs_launch(resolved) is launch
    p = Prober(resolved, lo=1, hi=64)
    assert p.launched is launch
    # in-process: today's bound; launched: a x2 climb over 1..64 (7 values) and a bisection
    assert p.max_loads == (launched.max_launches(1, 64) if launch else MAX_LOADS)


def test_launch_budget_covers_climb_and_bisection():
    for lo, hi in ((1, 1), (1, 2), (1, 24), (1, 1024), (16, 512), (7, 9)):
        climb = len([v for v in (lo * 2 ** k for k in range(64)) if v <= hi]) + 1  # + the OOM above
        bisect = (hi - lo + 1).bit_length()
        assert launched.max_launches(lo, hi) >= climb + bisect


def test_probe_over_several_nodes_is_refused_in_one_line():
    resolved = load_profile("tiny-lora", CPU2 + ["devices.nodes=2"])
    with pytest.raises(FttuiError) as e:
        Prober(resolved)
    assert "one machine" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("param, value", [("batch_size", 6), ("max_seq_len", 96)])
def test_trial_overrides_are_a_run_of_steps_at_worst_case_length(param, value):
    resolved = load_profile("tiny-lora", CPU2 + ["grad_accum=3"])
    over = launched.trial_overrides(resolved, param, value, 2)
    micro = value if param == "batch_size" else resolved.train.batch_size
    assert over == {("train.batch_size" if param == "batch_size" else "data.max_seq_len"): value,
                    "train.max_steps": 2, "data.source": "synthetic",
                    "data.num_samples": micro * 3 * 2 * 2}  # micro x accum x ranks x steps


def test_positions_cap_comes_from_the_profile():
    resolved = load_profile("tiny-lora", CPU2)
    cfg = resolved.model.arch_config
    assert launched.positions(resolved) == (int(cfg["max_position_embeddings"])
                                            if cfg.get("max_position_embeddings") else None)


def test_launched_trial_row_has_the_probe_format(fttui_home):
    resolved = load_profile("tiny-lora", CPU2 + ["sharding=zero2"])
    t = Trial(value=5, status="oom", load=3, clean=True, fresh=True, oom_kind="cpu", message="m",
              peak_host_rss_mb=1200.0, host_measure="tree", sharding="zero2")
    row = trial_row(t, resolved, "P", "batch_size", 4)
    with Store() as store:
        store.put(row)
        got = store.get("P-04")
    assert got["kind"] == "probe" and got["group_id"] == "P" and got["recorded_by"] == "probe"
    assert got["status"] == "oom" and got["fresh"] and got["clean"]
    assert got["batch_size"] == 5 and got["world_size"] == 2 and got["effective_batch"] == 10
    assert got["sharding"] == "zero2" and got["host_measure"] == "tree"


# ---------------------------------------------------------------------------- the trial guard
_TREE = ("import subprocess, sys, time; "
         "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', sys.argv[1]]); "
         "time.sleep(600)")


def _guard(run_dir, *argv) -> subprocess.Popen:
    run_dir.mkdir()
    return subprocess.Popen([sys.executable, "-m", "fttui.core.experiments.trial_guard", str(run_dir), "--", *argv],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
                            env=dict(os.environ, FTTUI_KILL_GRACE="2"))


def _tree_up(run_dir) -> list:
    # the guard, the log writer, the "launcher" and its child all name the run directory
    procs = processes_mentioning(str(run_dir))
    return procs if len(procs) >= 4 else []


@pytest.mark.parametrize("how", ["close", "sigkill-probe"])
def test_guard_stops_the_tree_when_the_probe_goes(how, tmp_path):
    run_dir = tmp_path / "trial"
    if how == "close":
        guard = _guard(run_dir, sys.executable, "-c", _TREE, str(run_dir))
        leader = int(guard.stdout.readline())
        wait_for(lambda: _tree_up(run_dir), timeout=30, what="the trial's tree")
        assert os.getpgid(leader) == leader  # the log writer leads the training's own group
        guard.stdin.close()
        assert guard.wait(timeout=30) == 130
    else:
        # A "probe" that starts the guard, prints its pid and is then killed outright: the kernel
        # closes the pipe, and the guard stops the tree.
        probe = subprocess.Popen(
            [sys.executable, "-c",
             "import subprocess, sys, time; g = subprocess.Popen([sys.executable, '-m', "
             "'fttui.core.experiments.trial_guard', sys.argv[1], '--', sys.executable, '-c', sys.argv[2], "
             "sys.argv[1]], stdin=subprocess.PIPE, start_new_session=True); print(g.pid, flush=True); "
             "time.sleep(600)", str(run_dir), _TREE],
            stdout=subprocess.PIPE, env=dict(os.environ, FTTUI_KILL_GRACE="2"))
        run_dir.mkdir()
        guard_pid = int(probe.stdout.readline())
        wait_for(lambda: _tree_up(run_dir), timeout=30, what="the trial's tree")
        probe.send_signal(signal.SIGKILL)
        probe.wait(timeout=10)
        wait_for(lambda: not psutil.pid_exists(guard_pid) or
                 psutil.Process(guard_pid).status() == psutil.STATUS_ZOMBIE, timeout=30, what="the guard's end")
    wait_for(lambda: not processes_mentioning(str(run_dir)), timeout=15, what="no process of the trial left")
    exit_info = json.loads((run_dir / "exit.json").read_text())
    assert exit_info["returncode"] == -signal.SIGTERM  # the log writer recorded how the trial ended


def test_guard_returns_the_training_exit_code(tmp_path):
    run_dir = tmp_path / "trial"
    guard = _guard(run_dir, sys.executable, "-c", "print('hello'); raise SystemExit(3)")
    guard.stdout.readline()
    t0 = time.monotonic()
    assert guard.wait(timeout=30) == 3  # the training's code: 3 is how the worker says OOM
    assert time.monotonic() - t0 < 20
    assert json.loads((run_dir / "exit.json").read_text())["returncode"] == 3
    assert "hello" in (run_dir / "train.log").read_text()
    guard.stdin.close()


# ---------------------------------------------------------------------------- the search
class _FakeTrial:
    """A launched trial without processes: values up to ``BOUNDARY`` fit."""

    BOUNDARY = 13
    launched: list[int] = []

    def __init__(self, resolved, param, value, steps, *, run_id, group, load, data=False):
        self.resolved = launched.apply_overrides(resolved, launched.trial_overrides(resolved, param, value, steps))
        self.value, self.load = value, load
        _FakeTrial.launched.append(value)

    def run(self, on_log=None):
        fit = self.value <= self.BOUNDARY
        return Trial(value=self.value, status="fit" if fit else "oom", load=self.load, clean=True, fresh=True,
                     oom_kind=None if fit else "cpu", sharding="none"), False

    def stop(self, wait=True):
        pass


@pytest.mark.parametrize("param, lo, hi, start, boundary, expect", [
    # x2 from the start until the first OOM, then halving: one launch per trial
    ("batch_size", 1, 128, 8, 13, [8, 16, 12, 14, 13]),
    ("batch_size", 1, 32, None, 13, [1, 2, 4, 8, 16, 12, 14, 13]),
    ("batch_size", 1, 128, 64, 13, [64, 32, 16, 8, 12, 14, 13]),  # the start fails: halve down
    ("batch_size", 1, 4, None, 13, [1, 2, 4]),  # everything fits
    ("batch_size", 3, 8, None, 2, [3]),  # the low end fails
    # a start above the model's positions (tiny-lora: 512) starts at the capped end
    ("max_seq_len", 100, 4096, 2048, 206, [512, 306, 203, 255, 229, 216, 210, 207, 205, 206]),
])
def test_launched_search(param, lo, hi, start, boundary, expect, monkeypatch, fttui_home):
    monkeypatch.setattr(launched, "LaunchedTrial", _FakeTrial)
    monkeypatch.setattr(_FakeTrial, "BOUNDARY", boundary)
    monkeypatch.setattr(_FakeTrial, "launched", [])
    resolved = load_profile("tiny-lora", CPU2)
    res = Prober(resolved, param=param, lo=lo, hi=hi, steps=1, start=start).run()
    assert _FakeTrial.launched == expect
    assert res.model_loads == len(expect) <= launched.max_launches(lo, hi)
    top = min(hi, 512) if param == "max_seq_len" else hi
    assert res.exact
    assert res.largest_fit == (min(boundary, top) if boundary >= lo else None)
    assert res.smallest_oom == (boundary + 1 if boundary < top else None)
    with Store() as store:
        rows = store.rows(kind="probe")
    assert sorted((r["batch_size"] if param == "batch_size" else r["max_seq_len"], r["status"]) for r in rows) == \
        sorted((t.value, t.status) for t in res.trials)
