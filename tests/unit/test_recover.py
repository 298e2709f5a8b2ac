"""Finishing a run whose supervisor died (fttui.core.run.supervising.recover) on hand-made run directories:
the verdict, the once-only write, and the supervisor's identity by pid and start time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace

import psutil
import pytest

from fttui.core.results.store import Store
from fttui.core.run.processes import liveness
from fttui.core.run.files import rundir
from fttui.core.run.processes.cancel import request_cancel, signal_training
from fttui.core.run.files.events import read_jsonl
from fttui.core.run.supervising.recover import needs_recovery, recover, recover_all


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _run_dir(home, *, end: bool, exit_rc: int | None, steps: int = 3, cancel: bool = False) -> rundir.RunDir:
    prof = {"name": "t", "method": "lora", "model": {"name_or_path": "tiny"}, "train": {"batch_size": 2},
            "data": {"max_seq_len": 32}, "devices": {"gpus": 0}}
    rd = rundir.create(prof, ["python", "-c", "pass"], {})
    t0 = time.time() - 100
    evs = [{"event": "launch", "t": t0, "rank": -1, "source": "supervisor", "pid": 1},
           {"event": "start", "t": t0 + 1, "rank": 0, "world_size": 1, "micro_batch": 2, "grad_accum": 1,
            "total_steps": 10, "max_seq_len": 32, "params_total": 1000, "params_trainable": 10}]
    for i in range(1, steps + 1):
        evs.append({"event": "step", "t": t0 + 1 + i, "rank": 0, "step": i, "total_steps": 10, "samples": 2 * i,
                    "tokens": 60 * i, "tokens_padded": 64 * i, "loss": 1.0, "step_time": 1.0, "train_time": float(i),
                    "peak_rss_mb": 100.0 + i})
    if end:
        evs.append({"event": "end", "t": t0 + 2 + steps, "rank": 0, "step": steps, "train_time": float(steps),
                    "samples": 2 * steps, "tokens": 60 * steps, "tokens_padded": 64 * steps})
    with open(rd.events_path, "w") as f:
        f.writelines(json.dumps(e) + "\n" for e in evs)
    rundir.write_json_atomic(rd.supervisor_path, {"pid": _dead_pid(), "pgid": 1, "started": t0,
                                                  "create_time": t0, "train_pgid": _dead_pid()})
    if exit_rc is not None:
        rundir.write_json_atomic(rd.exit_path, {"returncode": exit_rc, "t": t0 + 3 + steps, "pid": 1})
    if cancel:
        request_cancel(rd)
    return rd


def _row(rd) -> dict:
    with Store() as s:
        return s.get(rd.run_id)


@pytest.mark.parametrize("end, exit_rc, cancel, status", [
    (True, 0, False, "completed"),     # exit.json and the end event
    (True, None, False, "completed"),  # the end event alone
    (False, -9, False, "failed"),      # killed, exit recorded: the supervisor's own verdict
    (False, -15, True, "cancelled"),   # cancelled while unsupervised
    (False, None, False, "lost"),      # nothing recorded the exit
])
def test_verdict(fttui_home, end, exit_rc, cancel, status):
    rd = _run_dir(fttui_home, end=end, exit_rc=exit_rc, cancel=cancel)
    assert needs_recovery(rd) and not liveness.is_live(rd)
    st = recover(rd)
    assert st is not None and st.status == status and st.row_saved
    row = _row(rd)
    assert row["status"] == status and row["steps"] == 3 and row["samples"] == 6
    assert json.loads((rd.path / "status.json").read_text())["status"] == status
    if status == "lost":
        assert "up to step 3" in row["error"]
    assert recover(rd) is None and not needs_recovery(rd)


def test_many_commands_looking_at_once_write_one_row(fttui_home):
    rds = [_run_dir(fttui_home, end=True, exit_rc=0) for _ in range(3)]
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(recover_all())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(rd.run_id for done in results for rd, _ in done) == sorted(rd.run_id for rd in rds)
    for rd in rds:
        assert sum(1 for e in read_jsonl(rd.events_path) if e.get("event") == "exit") == 1
        assert not (rd.path / "recover.lock").exists()
    with Store() as s:
        assert len(s.rows(kind=None)) == 3


def test_a_reused_pid_is_not_the_supervisor(fttui_home):
    rd = _run_dir(fttui_home, end=False, exit_rc=None)
    me = psutil.Process()
    # This test process is alive, but it is not the supervisor that started at another time.
    rundir.write_json_atomic(rd.supervisor_path, {"pid": os.getpid(), "create_time": me.create_time() - 50})
    assert not liveness.supervisor_alive(rd) and not liveness.is_live(rd)
    rundir.write_json_atomic(rd.supervisor_path, {"pid": os.getpid(), "create_time": me.create_time()})
    assert liveness.supervisor_alive(rd) and liveness.is_live(rd) and liveness.state_label(rd) == "running"
    assert recover(rd) is None  # live: nothing to finish


def test_the_supervisor_is_known_by_its_start_ticks_not_a_boot_time_that_steps(fttui_home):
    """/proc/stat's boot time is whole seconds derived anew at each read: psutil's create_time of
    one process can step by a second between two readers. A supervisor recorded with its start
    ticks on this boot is matched by them; one recorded before (create_time only) within 2 s."""
    from fttui.core.run.processes.guard import identity

    rd = _run_dir(fttui_home, end=False, exit_rc=None)
    ct, me = psutil.Process().create_time(), identity(os.getpid()).to_dict()
    rundir.write_json_atomic(rd.supervisor_path, {"pid": os.getpid(), "create_time": ct - 1.0})
    assert liveness.supervisor_alive(rd) and liveness.is_live(rd)  # the step of one second: the same process
    rundir.write_json_atomic(rd.supervisor_path, {"pid": os.getpid(), "create_time": ct - 1.0, "id": me})
    assert liveness.supervisor_alive(rd)
    other = {**me, "start_ticks": me["start_ticks"] - 5}  # a pid reused 50 ms after
    rundir.write_json_atomic(rd.supervisor_path, {"pid": os.getpid(), "create_time": ct, "id": other})
    assert not liveness.supervisor_alive(rd) and not liveness.is_live(rd)
    rundir.write_json_atomic(rd.supervisor_path, {"pid": os.getpid(), "create_time": ct,
                                                  "id": {**me, "boot_id": "another boot"}})
    assert not liveness.supervisor_alive(rd)


def test_a_live_training_group_keeps_the_run_live_without_a_supervisor(fttui_home):
    rd = _run_dir(fttui_home, end=False, exit_rc=None)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        from fttui.core.run.processes.guard import identity

        rd.write_supervisor(replace(rd.supervisor(), train_pgid=child.pid, train_id=identity(child.pid)))
        assert liveness.training_alive(rd) and liveness.is_live(rd)
        assert liveness.state_label(rd) == "running (unsupervised)"
        assert recover(rd) is None
        request_cancel(rd)  # no supervisor: the cancel goes to the training's group
        assert child.wait(timeout=10) == -15
        assert not liveness.is_live(rd)
        assert recover(rd).status == "cancelled"
    finally:
        child.kill()


# issue 28, item 4: cancel signals only the process group fttui started -------------------------

def test_cancel_never_signals_a_group_whose_leader_is_another_process(tmp_path):
    """supervisor.json names a live process group whose leader started at another time (a reused
    pid, or another boot): cancel leaves it alone; with the leader's own start time it is signalled."""
    import json
    import signal
    import subprocess
    import sys

    from fttui.core.run.processes import guard
    from fttui.core.run.files.rundir import RunDir

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        rd = RunDir(tmp_path / "run")
        rd.path.mkdir()
        real = guard.identity(other.pid).to_dict()
        for recorded in ({**real, "start_ticks": real["start_ticks"] - 7}, {**real, "boot_id": "another-boot"}):
            rd.supervisor_path.write_text(json.dumps({"pid": 999999999, "create_time": 1.0, "train_pgid": other.pid,
                                                      "train_id": recorded}))
            assert not liveness.training_alive(rd)
            request_cancel(rd)
            assert signal_training(rd, signal.SIGTERM) is False
            assert other.poll() is None, "an unrelated process group was signalled"
        rd.supervisor_path.write_text(json.dumps({"pid": 999999999, "create_time": 1.0, "train_pgid": other.pid,
                                                  "train_id": real}))
        assert liveness.training_alive(rd)
        request_cancel(rd)
        assert other.wait(timeout=60) == -signal.SIGTERM
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()


def test_the_run_files_write_what_they_always_held(tmp_path):
    """command.json, supervisor.json and exit.json as records (fttui.core.run.files.runfiles): the keys
    they always held are written (null included), the others only when set, an unknown key kept."""
    from fttui.core.run.files.runfiles import ExitFile, ProcessId, ResumeFrom, SupervisorFile

    rd = rundir.RunDir(tmp_path)
    rd.write_supervisor(SupervisorFile(pid=1, pgid=1, started=2.0, create_time=1.5, id=ProcessId(start_ticks=3)))
    assert json.loads(rd.supervisor_path.read_text()) == {"pid": 1, "pgid": 1, "started": 2.0, "create_time": 1.5,
                                                          "id": {"start_ticks": 3, "boot_id": None}, "cgroup": None}
    rd.write_exit(ExitFile(returncode=-9, t=3.0, pid=None))
    assert json.loads(rd.exit_path.read_text()) == {"returncode": -9, "t": 3.0, "pid": None}
    rd.command_path.write_text(json.dumps({"argv": ["x"], "kind": None, "group": None, "newer": 1, "cwd": 7}))
    cmd = rd.command()
    assert (cmd.argv, cmd.kind, cmd.cwd, cmd.extra) == (["x"], "run", None, {"newer": 1})  # tolerant, kept
    rd.write_command(replace(cmd, resume=ResumeFrom(run_id="r", checkpoint=None, step=0)))
    assert json.loads(rd.command_path.read_text()) == {"argv": ["x"], "env": {}, "created": None, "kind": "run",
                                                       "group": None, "newer": 1,
                                                       "resume": {"run_id": "r", "checkpoint": None, "step": 0}}


# issue 36: a hand-edited or copied run directory ----------------------------------------------

def test_cancel_never_signals_a_group_whose_leader_was_not_recorded(fttui_home):
    """A supervisor.json without ``train_id`` (a copied or edited run directory) names a group
    fttui cannot tell from anyone's: `fttui cancel` killed an unrelated `setsid sleep`."""
    from tests.conftest import run_fttui

    rd = _run_dir(fttui_home, end=False, exit_rc=None)
    victim = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        rundir.write_json_atomic(rd.supervisor_path, {"pid": _dead_pid(), "train_pgid": victim.pid})
        os.unlink(rd.exit_path) if rd.exit_path.exists() else None
        assert not liveness.training_alive(rd) and not liveness.is_live(rd)
        assert signal_training(rd, 15) is False
        run_fttui("cancel", rd.run_id)
        time.sleep(0.5)
        assert victim.poll() is None, "fttui signalled a process group that was not its run's"
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.parametrize("pid", [1, -1, True, 10**20, 0, "12"])
def test_a_supervisor_pid_that_cannot_be_its_own_is_not_live(fttui_home, pid):
    """pid 1, -1 (kill(-1, 0) asks about every process), true, 10^20 (OverflowError): not a live
    supervisor; the run is recovered, never shown running forever."""
    rd = _run_dir(fttui_home, end=True, exit_rc=0)
    rundir.write_json_atomic(rd.supervisor_path, {"pid": pid})
    assert not liveness.supervisor_alive(rd) and not liveness.is_live(rd)
    st = recover(rd)
    assert st is not None and st.status == "completed"


@pytest.mark.parametrize("status", ["[1]", '"x"', "5", '{"status": 5}', "null", "\x00\x01garbage"])
def test_a_damaged_status_file_is_put_back_from_the_stored_row(fttui_home, status):
    rd = _run_dir(fttui_home, end=True, exit_rc=0)
    assert recover(rd).status == "completed"
    rd.status_path.write_text(status)
    assert not rd.has_status() and rd.final_status() is None
    assert recover(rd) is None  # the stored row is the record: status.json written again from it
    assert rd.final_status() is not None and rd.final_status().status == "completed"


@pytest.mark.parametrize("name, text", [
    ("exit.json", '{"returncode": 0, "t": 1e400}'),
    ("exit.json", '{"returncode": 0, "t": "abc"}'),
    ("command.json", "[0]"),
    ("supervisor.json", "[1]"),
    ("events.jsonl", None),
])
def test_a_damaged_run_file_never_breaks_ls_results_attach(fttui_home, name, text):
    from tests.conftest import run_fttui

    rd = _run_dir(fttui_home, end=True, exit_rc=0)
    if text is None:
        with open(rd.events_path, "a") as f:
            f.write('{"event": "step", "step": "two", "t": null, "samples": [1]}\n')
    else:
        (rd.path / name).write_text(text)
    if name == "supervisor.json":
        _unreadable_supervisor_json_is_starting_then_lost(rd)
    cmds = [["ls"], ["results"], ["attach", "--headless", rd.run_id], ["cancel", rd.run_id]]
    for args in cmds:
        out = run_fttui(*args, timeout=120)
        err = out.stderr.strip()
        assert "Traceback" not in err and len(err.splitlines()) <= 1 and out.returncode in (0, 1, 2), (args, err)


def _unreadable_supervisor_json_is_starting_then_lost(rd: rundir.RunDir) -> None:
    """A run directory whose supervisor.json cannot be read counts as starting for
    ``liveness.STARTING_S`` after it was made (what `fttui cancel` and `attach` would wait out,
    asked here in-process without a crash), then as lost: the directory is dated back past that
    window, so the commands of the caller see the lost run at once instead of waiting 30 s."""
    from fttui.core.run.control.executors import executor_for

    assert rd.supervisor() is None and liveness.is_live(rd) and liveness.state_label(rd) == "running"
    ex = executor_for(rd)
    assert ex.alive() and ex.final_state() is None and not liveness.supervisor_alive(rd)
    past = time.time() - 2 * liveness.STARTING_S
    os.utime(rd.path, (past, past))
    assert not liveness.is_live(rd) and not executor_for(rd).alive()
