"""End to end, 4 CPU ranks under torchrun (issue 39): one rank slowed (the worker's test hook
``FTTUI_TEST_SLOW_RANK``: 60 ms more outside any collective in every step once a window of steps
is past, as a slow card or a busy host's rank would be) is named with its node within 20 steps,
live and in the row; then stopped for good (SIGSTOP), the stall (8 s) says which rank stopped and
the collective the others wait in, the answers and stacks are kept, and `fttui cancel` ends every
process. Beside it, `fttui attach --headless` prints what a user watching would read."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from fttui.core.run.files.events import read_events
from fttui.core.run.fold.skew import WINDOW
from fttui.core.run.fold.state import RunState
from tests.conftest import ROOT, fttui_env, run_fttui
from tests.helpers import processes_mentioning, wait_for

pytestmark = pytest.mark.e2e


def _events(run_dir):
    path = run_dir / "events.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


#: rank 3 is slowed from this step on: once a window of steady steps is past (a rank turns slow in
#: the middle of a run)
SLOW_FROM = WINDOW + 6


def _slow(pid: int, stop: threading.Event, duty: float = 0.6, period: float = 0.5) -> None:
    """Stop ``pid`` for ``duty`` of each ``period`` (the Slurm lab's test, whose ranks are slowed
    from outside). A stop that lands while the rank waits in a collective is counted as its wait,
    not its compute, and every rank's wait grows alike: on a loaded machine, where the ranks spend
    most of their time in collectives, such a rank can go unnamed for 50 steps (the 4-rank test
    slows its rank in the worker instead, FTTUI_TEST_SLOW_RANK)."""
    while not stop.is_set():
        try:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(period * duty)
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            return
        time.sleep(period * (1 - duty))


@pytest.mark.alone  # scripts/test.sh runs it after the others: contention makes other ranks late too
def test_four_ranks_a_slowed_rank_named_then_a_stopped_rank_found(fttui_home):
    # the stall timeout is most of this test's time (80 steps' worth); the cancel's SIGTERM waits
    # on the stopped rank for the kill grace, then SIGKILL (10 s by default, idle)
    # rank 3 slowed from step SLOW_FROM on: slowed from the first step, the startup's own noise
    # (another rank late in its first steps) stays in the fold's window for its 20 steps
    env = fttui_env(FTTUI_STALL_TIMEOUT="8", FTTUI_KILL_GRACE="3", FTTUI_TEST_SLOW_RANK=f"3:0.06:{SLOW_FROM}")
    proc = run_fttui("run", "--profile", "tiny-lora", "--detach", "--set", "devices.gpus=0",
                     "--set", "devices.cpu_processes=4", "--set", "train.max_steps=100000", env=env, check=True)
    run_id = proc.stdout.strip().splitlines()[-1]
    run_dir = fttui_home / "runs" / run_id
    watch = subprocess.Popen([sys.executable, "-m", "fttui", "attach", run_id, "--headless"], cwd=ROOT, env=env,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pids: dict[int, int] = {}
    try:
        def started():
            pids.update({e["rank"]: e["pid"] for e in _events(run_dir) if e.get("event") == "start"})
            return len(pids) == 4

        wait_for(started, timeout=180, what="four ranks started")
        nodes = {e["rank"]: e.get("node") for e in _events(run_dir) if e.get("event") == "start"}
        assert all(nodes.values()) and len(set(nodes.values())) == 1
        first = SLOW_FROM - 1  # the last step at the usual pace

        def named():
            """The step at which the fold (every view's) first named rank 3, and what it said:
            replayed event by event, so the answer does not hang on when this test looked."""
            st = RunState()
            for ev in read_events(run_dir / "events.jsonl"):
                st.apply(ev)
                skew = st.skew.now()
                if skew is not None and skew.rank == 3:
                    return st.progress.step(), skew.text
            return None

        at, said = wait_for(named, timeout=120, what="rank 3 named")
        assert at - first <= 20, (first, at)
        assert said.startswith(f"rank 3 on {nodes[3]} computes "), said
        os.kill(pids[3], signal.SIGSTOP)  # for good: the others wait for it in a collective
        t_stop = time.monotonic()
        stalled = wait_for(lambda: next((e for e in _events(run_dir) if e.get("event") == "stalled"), None),
                           timeout=60, what="the stall")
        assert time.monotonic() - t_stop <= 30
        where = stalled["where"]
        assert (" wait in " in where or " waits in " in where) and "#" in where, where  # one rank or several
        assert "rank 3 has not reached it: stopped (SIGSTOP), last seen at step " in where, where
        assert (run_dir / "hang.json").exists()
        assert {f"rank-{r}-pid-{pids[r]}.json" for r in (0, 1, 2)} <= {p.name for p in (run_dir / "stacks").iterdir()}
        line = RunState().replay(read_events(run_dir / "events.jsonl")).snapshot()
        assert line.hang == where
    finally:
        out = run_fttui("cancel", run_id)
        for pid in pids.values():
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    assert "cancelled" in out.stdout, out.stdout + out.stderr
    wait_for(lambda: not processes_mentioning(str(run_dir)), timeout=20, what="no process left")
    said = watch.communicate(timeout=60)[0]
    assert f"SLOW RANK: rank 3 on {nodes[3]} computes " in said, said[-3000:]
    assert re.search(r"STALLED: no step for ([89]|1[0-2]) s", said) and f"; where: {where}" in said, said[-3000:]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "cancelled" and f"where: {where}" in status["error"]
    rows = json.loads(run_fttui("results", "--kind", "all", "--json", env=env, check=True).stdout)
    row = next(r for r in rows if r["run_id"] == run_id)
    assert row["straggler_rank"] == 3 and row["straggler_node"] == nodes[3] and row["hang"] == where
    assert row["rank_skew"] >= 1.4 and row["rank_wait_pct"] >= 20


def test_a_collective_timeout_is_classified_with_its_ranks(fttui_home):
    script = ROOT / "tests" / "e2e" / "command_scripts" / "gloo_timeout.py"
    proc = run_fttui("run", "--headless", "--", sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
                     "--standalone", str(script))
    assert proc.returncode != 0
    run_dir = sorted((fttui_home / "runs").iterdir())[-1]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "failed"
    assert status["error"].startswith("collective timeout (gloo, after 3 s): rank 0 timed out waiting: "), status
    assert "Timed out waiting 3000ms for recv operation" in status["error"] and status["error_rank"] == 0
    assert "error: collective timeout (gloo, after 3 s)" in proc.stdout


@pytest.mark.slow
@pytest.mark.xdist_group("slurm")
def test_two_nodes_of_two_ranks_on_the_slurm_lab_name_the_slowed_rank_and_its_node(slurm, fttui_home):
    """2 nodes x 2 ranks (the lab's n1 and n2): rank 3, on n2, slowed from outside; each node's run
    holds its own ranks, its supervisor reads the other node's too and names rank 3 on n2 in both
    nodes' events and rows."""
    env = fttui_env(SLURM_CONF=str(slurm.conf))
    sub = json.loads(run_fttui("submit", "--profile", "tiny-lora", "--nodes", "2", "--json", "--set",
                               "devices.cpu_processes=2", "--set", "max_steps=100000", env=env, check=True).stdout)
    nodes = [fttui_home / "runs" / f"{sub['run_id']}-n{i}" for i in (0, 1)]
    stop = threading.Event()
    try:
        def rank3():
            for d in nodes[1:]:
                found = [e for e in _events(d) if e.get("event") == "start" and e.get("rank") == 3]
                if found and any(e.get("event") == "step" for e in _events(d)):
                    return found[0]
            return None

        start = wait_for(rank3, timeout=300, interval=1, what="rank 3 stepping on node 2")
        assert start["node"] == "n2"
        threading.Thread(target=_slow, args=(start["pid"], stop), daemon=True).start()

        def told(d):
            return next((e for e in _events(d) if e.get("event") == "straggler" and e.get("straggler") == 3), None)

        for d in nodes:
            ev = wait_for(lambda d=d: told(d), timeout=120, interval=1, what=f"rank 3 named in {d.name}")
            assert ev["node"] == "n2" and ev["ranks"] == 4 and ev["message"].startswith("rank 3 on n2 computes ")
    finally:
        stop.set()
        out = run_fttui("cancel", sub["run_id"], env=env, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    for d in nodes:
        wait_for(lambda d=d: not processes_mentioning(str(d)), timeout=60, what=f"no process of {d.name}")
    rows = {r["run_id"]: r for r in json.loads(run_fttui("results", "--kind", "all", "--json", env=env,
                                                            check=True).stdout)}
    for d in nodes:
        row = rows[d.name]
        assert row["straggler_rank"] == 3 and row["straggler_node"] == "n2", row
        assert row["straggler"].startswith("rank 3 on n2 computes "), row
