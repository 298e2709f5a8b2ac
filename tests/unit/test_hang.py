"""Where a hang is (issue 39 item 2): the sentence (pure), and every rank asked for real: two gloo
ranks with the flight recorder on, one waiting in a barrier for the other, which sleeps."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import time

from fttui.core.base import rank_timing
from fttui.core.run.files.events import StartEvent, StepEvent, write_event
from fttui.core.run.processes import hang
from fttui.core.run.processes.hang import RankWhere, sentence, waits_in
from tests.conftest import fttui_env
from tests.helpers import wait_for


def test_the_sentence():
    r = RankWhere
    assert sentence([r(0, 1, answered=True, waiting=(1516, "all_reduce")),
                     r(1, 2, answered=True, frame="data.py:10 in __next__", function="__next__", step=212),
                     r(2, 3, answered=True, waiting=(1516, "all_reduce")),
                     r(3, 4, answered=True, waiting=(1516, "all_reduce"))]) == (
        "ranks 0, 2, 3 wait in all_reduce #1516; rank 1 has not reached it, last seen in data.py:10 in __next__ "
        "at step 212")
    assert sentence([r(0, 1, answered=True, waiting=(54, "all_gather")),
                     r(1, 2, answered=True, waiting=(55, "broadcast")),
                     r(2, 3, answered=True, waiting=(55, "broadcast")),
                     r(3, 4, stopped=True, step=12)]) == (
        "rank 0 waits in all_gather #54, ranks 1, 2 in broadcast #55; "
        "rank 3 has not reached it: stopped (SIGSTOP), last seen at step 12")
    # no flight recorder: the Python frame says who waits
    assert sentence([r(0, 1, answered=True, frame="c10d.py:9 in barrier", function="barrier"), r(1, 2, gone=True)]) == (
        "rank 0 waits in barrier (its Python frame: no flight recorder); rank 1 has not reached it: not running")
    assert sentence([r(0, 1, answered=True, frame="t.py:3 in f", function="f", step=3), r(1, 2)]).startswith(
        "no rank waits in a collective: rank 0 in t.py:3 in f at step 3; rank 1: did not answer")
    assert sentence([]).startswith("no rank")


def test_waits_in_reads_the_flight_recorder_entries():
    answer = {"collectives": [{"seq": 7, "op": "gloo:all_reduce", "retired": True, "state": "scheduled"},
                              {"seq": 8, "op": "gloo:broadcast", "retired": False, "state": "scheduled"}]}
    assert waits_in(answer) == ((8, "broadcast"), 7)
    assert waits_in({"collectives": None}) == (None, None)
    assert waits_in({"collectives": [{"seq": 3, "op": "nccl:all_gather", "state": "completed"}]}) == (None, 3)


RANK = textwrap.dedent("""
    import os, sys, time
    import torch, torch.distributed as dist
    from fttui.integrations import hangdump, stackdump
    run_dir, rank = sys.argv[1], int(sys.argv[2])
    stackdump.register(run_dir, rank)
    hangdump.start(run_dir, rank, lambda: 40 + rank, print)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    t = torch.ones(2)
    for _ in range(3):
        dist.all_reduce(t)
    open(os.path.join(run_dir, f"ready-{rank}"), "w").close()
    if rank == 1:
        time.sleep(600)  # the rank the other waits for
    dist.barrier()
""")


def test_ask_two_gloo_ranks_one_waiting_in_a_barrier(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = fttui_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **rank_timing.flight_recorder_env({}))
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(tmp_path), str(r)], env=env) for r in range(2)]
    try:
        for r, p in enumerate(procs):
            write_event(tmp_path / "events.jsonl", StartEvent(rank=r, pid=p.pid, node="n1"))
            write_event(tmp_path / "events.jsonl", StepEvent(rank=r, pid=p.pid, step=40 + r))
        wait_for(lambda: all((tmp_path / f"ready-{r}").exists() for r in range(2)), timeout=60, what="both ranks")
        time.sleep(1.0)  # rank 0 in its barrier
        found = hang.ask(tmp_path)
        assert found.sentence.startswith("rank 0 waits in barrier #") or found.sentence.startswith(
            "rank 0 waits in all_reduce #"), found.sentence  # gloo's barrier is an all_reduce in some versions
        assert "; rank 1 has not reached it, last seen in " in found.sentence and " in <module> at step 41" in (
            found.sentence), found.sentence
        zero, one = found.ranks
        assert zero.recorder and zero.waiting is not None and zero.done is not None and zero.waiting[0] > zero.done
        assert one.answered and one.waiting is None
        kept = json.loads(found.path.read_text())
        assert kept["sentence"] == found.sentence and set(kept["answers"]) == {"0", "1"}
        assert (found.path.stat().st_mode & 0o777) == 0o600
        assert all((tmp_path / "stacks" / rank_timing.answer_name(r, p.pid)).exists() for r, p in enumerate(procs))
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_py_spy_reads_a_rank_that_answers_nothing(tmp_path):
    """A stopped process without fttui's request thread or SIGUSR1 dump: named by py-spy's frame."""
    import os
    import shutil
    import signal

    if not (shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))):
        import pytest

        pytest.skip("PY-SPY NOT INSTALLED: it is in the dev extras (pip install -e .[dev])")
    code = "import time\ndef waiting_here():\n    time.sleep(600)\nwaiting_here()\n"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        write_event(tmp_path / "events.jsonl", StartEvent(rank=0, pid=proc.pid))
        write_event(tmp_path / "events.jsonl", StepEvent(rank=0, pid=proc.pid, step=7))
        time.sleep(1.5)  # in its sleep
        os.kill(proc.pid, signal.SIGSTOP)
        wait_for(lambda: open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "T", timeout=10,
                 what="the process stopped")
        found = hang.ask(tmp_path, wait_s=0.5)
        (rank,) = found.ranks
        assert not rank.answered and rank.stopped and not rank.registered
        assert rank.frame is not None and rank.frame.startswith("waiting_here ("), rank
        assert found.sentence == f"no rank waits in a collective: rank 0: stopped (SIGSTOP) (py-spy: {rank.frame})"
    finally:
        proc.kill()
        proc.wait()
