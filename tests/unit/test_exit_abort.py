"""A rank that aborted at its exit after its training ended (fttui.core.run.row.exitabort): the
torchrun command test's failure in a CI run (rank 1, exit -6, "terminate called without an active
exception" after all 6 steps and both end events), said as what happened, not as the launcher's
last line."""

from __future__ import annotations

from fttui.core.profiles import load_profile
from fttui.core.run.files import rundir
from fttui.core.run.fold.snapshot import RunSnapshot
from fttui.core.run.row import exitabort
from fttui.core.run.row.summary import final_status

# the tail of that run's train.log (its launcher's report shortened)
LOG = """100%|##########| 6/6 [00:00<00:00, 12.88it/s]
terminate called without an active exception
W1128 08:19:53.301000 22925 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 22936 closing signal SIGTERM
E1128 08:19:53.417000 22925 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -6) local_rank: 1
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
==========================================================
"""


def _rd(fttui_home, log: str):
    resolved = load_profile("tiny-lora")
    rd = rundir.create(resolved.to_dict(), ["python"], {}, kind="run")
    rd.log_path.write_text(log)
    return rd


def test_an_abort_at_exit_after_the_training_ended_is_said(fttui_home):
    rd = _rd(fttui_home, LOG)
    st = final_status(rd, RunSnapshot(status="completed", step=6), 1, None)
    assert (st.status, st.returncode, st.error_step) == ("failed", 1, 6), st
    assert st.error == exitabort.text(1)
    assert st.error.startswith("exit code 1: a process aborted at its exit after its training ended (terminate")
    assert "torch.distributed.destroy_process_group()" in st.error


def test_without_the_training_ended_or_without_the_line_it_is_the_last_line_as_before(fttui_home):
    rd = _rd(fttui_home, LOG)
    running = final_status(rd, RunSnapshot(status="running", step=3), 1, None)
    assert running.status == "failed" and running.error == "exit code 1: ==========================================================", running
    plain = _rd(fttui_home, LOG.replace("terminate called without an active exception\n", ""))
    st = final_status(plain, RunSnapshot(status="completed", step=6), 1, None)
    assert st.error == "exit code 1: ==========================================================", st
    assert not exitabort.in_log(plain.log_path) and exitabort.in_log(rd.log_path)
    assert not exitabort.in_log(rd.path / "missing.log")
