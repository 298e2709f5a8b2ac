"""A run that failed in its collectives, classified from its log (fttui.core.run.row.commerror)."""

from __future__ import annotations

from fttui.core.run.row.commerror import classify, in_log

GLOO = """[rank0]: Traceback (most recent call last):
[rank0]:     work.wait()
[rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 1800000ms for recv operation to complete
[rank2]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 1800000ms for recv operation to complete
E1128 04:09:25.175000 22713 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 0
"""
NCCL = """[rank1]:[E1128 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1516, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600084 milliseconds before timing out.
[rank0]:[E1128 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1516, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600090 milliseconds before timing out.
terminate called after throwing an instance of 'c10::DistBackendError'
"""
PEER = "[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:4242\n"
NCCL_ERR = "[rank3]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error\n"


def test_gloo_timeout_names_the_rank_the_others_waited_for():
    f = classify(GLOO, world_size=3)
    assert (f.cause, f.backend, f.waited_s, f.reporters, f.silent, f.rank) == (
        "collective timeout", "gloo", 1800.0, (0, 2), (1,), 1)
    assert f.text().startswith("collective timeout (gloo, after 1800 s): ranks 0, 2 timed out waiting; "
                               "rank 1 did not report it (the rank the others waited for): RuntimeError: ")
    # without the world size: who reported it, the first reporter's rank when there is one
    assert classify(GLOO).silent == () and classify(GLOO).rank is None


def test_nccl_watchdog_timeout_has_the_operation_and_sequence():
    f = classify(NCCL, world_size=4)
    assert (f.backend, f.op, f.seq, f.waited_s, f.reporters, f.silent) == ("nccl", "allreduce", 1516, 600.084, (0, 1),
                                                                           (2, 3))
    assert f.text().startswith("collective timeout (nccl, allreduce #1516, after 600 s): ranks 0, 1 timed out waiting;"
                               " ranks 2, 3 did not report it: ")
    assert f.rank is None  # two silent ranks: no one rank to name


def test_peer_lost_and_nccl_errors_and_nothing():
    f = classify(PEER, world_size=2)
    assert (f.cause, f.reporters, f.silent, f.rank) == ("peer lost", (1,), (0,), 0)
    f = classify(NCCL_ERR + PEER, world_size=4)
    assert f.cause == "NCCL error" and f.reporters == (3,) and "unhandled system error" in f.line
    assert classify("Traceback\nValueError: bad config\n", world_size=2) is None


def test_in_log_reads_the_tail(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("x" * 400_000 + "\n" + GLOO)
    assert in_log(log, 3).silent == (1,)
    assert in_log(tmp_path / "missing.log") is None
