"""Reading a Slurm allocation from the environment, and Slurm's answers, for the cases a real
cluster has and the one-host test cluster (tests/e2e/test_slurm.py) does not: GPUs per node,
heterogeneous jobs, host lists like ``gpu[01-04,07]``, several tasks per node, requeues."""

from __future__ import annotations

import pytest

from fttui.core.base.errors import FttuiError
from fttui.core.run.slurm.allocation import Allocation, gpus_on_node, job_port, read_allocation, with_allocation
from tests.helpers import profile_of
from fttui.core.run.slurm.slurmend import job_verdict, node_verdict
from fttui.core.run.slurm.slurmnode import node_run_id
from fttui.core.run.files.statusfile import FinalStatus
from fttui.monitor.slurm import JobState, expand_hostlist, parse_sacct, parse_squeue

# what srun gives task 1 of a 4-node job with 8 GPUs per node (Slurm 22.05 names)
STEP = {
    "SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242", "SLURM_STEP_ID": "0", "SLURM_STEPID": "0",
    "SLURM_NNODES": "4", "SLURM_JOB_NUM_NODES": "4", "SLURM_STEP_NUM_NODES": "4", "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_NTASKS": "4", "SLURM_NODEID": "1", "SLURM_PROCID": "1", "SLURMD_NODENAME": "gpu02",
    "SLURM_JOB_NODELIST": "gpu[01-04]", "SLURM_STEP_NODELIST": "gpu[01-04]", "SLURM_GPUS_ON_NODE": "8",
}


def test_a_gpu_step_gives_rank_nodes_gpus_and_a_job_port():
    alloc = read_allocation(STEP)
    assert alloc == Allocation(job_id="4242", nodes=4, node_rank=1, node_name="gpu02", nodelist="gpu[01-04]",
                               gpus_per_node=8, restart=0)
    assert alloc.port == job_port("4242") == 20000 + 4242
    prof = with_allocation(profile_of({"devices": {"gpus": 1, "nodes": 1, "node_rank": 0, "main_addr": "127.0.0.1",
                                                   "main_port": 29500, "cpu_processes": 1, "launcher": "auto"}}),
                           alloc, "10.1.0.1")
    assert prof.devices.to_dict() == {"gpus": 8, "nodes": 4, "node_rank": 1, "main_addr": "10.1.0.1",
                               "main_port": 24242, "cpu_processes": 1, "launcher": "auto"}


def test_two_jobs_on_one_node_get_different_ports_and_every_node_the_same():
    assert job_port("1001") != job_port("1002")
    assert job_port("1001") == job_port(1001) and 20000 <= job_port("987654") < 30000


@pytest.mark.parametrize("env, gpus", [
    ({"SLURM_GPUS_ON_NODE": "4"}, 4),
    ({"SLURM_STEP_GPUS": "0,1,3"}, 3),  # card indices
    ({"SLURM_JOB_GPUS": "2"}, 1),
    ({"SLURM_GPUS_PER_NODE": "a100:2"}, 2),  # typed request
    ({"SLURM_GPUS_PER_NODE": "4"}, 4),
    ({}, None),  # no GPU asked from Slurm: the profile's devices.gpus stands
])
def test_gpus_per_node_from_what_slurm_sets(env, gpus):
    assert gpus_on_node(env) == gpus


def test_no_gpu_from_slurm_keeps_the_profiles_count():
    env = {k: v for k, v in STEP.items() if k != "SLURM_GPUS_ON_NODE"}
    alloc = read_allocation(env)
    assert alloc.gpus_per_node is None
    prof = with_allocation(profile_of({"devices": {"gpus": 0, "cpu_processes": 2}}), alloc, "gpu01")
    assert prof.devices.gpus == 0 and prof.devices.cpu_processes == 2


def test_heterogeneous_job_is_refused_in_one_line():
    env = {**STEP, "SLURM_HET_SIZE": "2", "SLURM_JOB_NODELIST_HET_GROUP_0": "gpu[01-02]"}
    with pytest.raises(FttuiError) as ei:
        read_allocation(env)
    msg = str(ei.value)
    assert "\n" not in msg and "heterogeneous" in msg and "4242" in msg


def test_several_tasks_per_node_are_refused():
    with pytest.raises(FttuiError, match=r"8 tasks on 4 node\(s\).*--ntasks-per-node=1"):
        read_allocation({**STEP, "SLURM_STEP_NUM_TASKS": "8", "SLURM_NTASKS": "8"})


def test_outside_a_step():
    assert read_allocation({}) is None  # no job at all: a plain run
    one_node_batch = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1"}
    assert read_allocation(one_node_batch) is None  # the batch script of a 1-node job: a plain run
    with pytest.raises(FttuiError, match="srun --ntasks-per-node=1"):
        read_allocation({"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2"})
    assert read_allocation({**STEP, "FTTUI_SLURM": "0"}) is None  # opted out


def test_a_requeued_attempt_gets_its_own_node_run_ids():
    alloc = read_allocation({**STEP, "SLURM_RESTART_COUNT": "2"})
    assert alloc.restart == 2
    assert node_run_id("20260101-000000-x-ab12", alloc) == "20260101-000000-x-ab12-r2-n1"
    assert node_run_id("20260101-000000-x-ab12", read_allocation(STEP)) == "20260101-000000-x-ab12-n1"


@pytest.mark.parametrize("text, names", [
    ("gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
    ("n[1-2]", ["n1", "n2"]),
    ("node1", ["node1"]),
    ("a[8-10],b1", ["a8", "a9", "a10", "b1"]),
    ("rack[1-2]-gpu[1-2]", ["rack1-gpu1", "rack1-gpu2", "rack2-gpu1", "rack2-gpu2"]),
])
def test_hostlists_expand_as_scontrol_does(text, names):
    assert expand_hostlist(text) == names


@pytest.mark.parametrize("bad", ["gpu[01-", "gpu[4-1]", "gpu[a-b]"])
def test_a_broken_hostlist_is_an_error(bad):
    with pytest.raises(ValueError):
        expand_hostlist(bad)


def test_squeue_and_sacct_lines():
    q = parse_squeue("12|PENDING|Resources|2026-11-25T22:01:29||1:00|0:00\n"
                     "11|RUNNING|None|2026-11-25T22:00:29|n[1-2]|1:00|0:06\n")
    assert q["12"].label() == "PENDING (Resources), start 2026-11-25T22:01:29" and q["12"].live
    assert q["11"].label() == "RUNNING on n[1-2]" and q["11"].nodes == "n[1-2]"
    assert parse_squeue("13|PENDING|Priority|N/A||UNLIMITED|0:00")["13"].label() == \
        "PENDING (Priority), start unknown"
    a = parse_sacct("2|TIMEOUT|0:0|2026-11-25T22:00:29|2026-11-25T22:01:50|n[1-2]|00:01:00\n"
                    "2.batch|CANCELLED|0:15|x|y|n1|\n3|CANCELLED by 0|0:0|a|b|n[1-2]|UNLIMITED\n", "sacct -c")
    assert a["2"].state == "TIMEOUT" and not a["2"].live and a["2"].source == "sacct -c"
    assert a["2"].cause() == "TIMEOUT: the job reached its time limit (1:00)"  # as squeue says it (issue 41)
    assert a["3"].state == "CANCELLED" and "2.batch" not in a


def test_slurms_cause_in_the_verdicts():
    timeout = JobState("2", "TIMEOUT", time_limit="1:00", source="sacct -c")
    sigterm = FinalStatus("cancelled", returncode=-15, error="supervisor received SIGTERM", error_step=3)
    v = node_verdict(sigterm, timeout)
    assert v.status == "cancelled" and v.error == "Slurm: TIMEOUT: the job reached its time limit (1:00)"
    assert v.error_step == 3
    assert node_verdict(FinalStatus("completed"), timeout).status == "completed"  # finished before the limit
    lost = node_verdict(None, JobState("3", "NODE_FAIL"), step=7)
    assert lost.status == "lost" and "NODE_FAIL" in lost.error and lost.error_step == 7
    assert node_verdict(None, JobState("4", "PREEMPTED")).status == "cancelled"
    assert job_verdict(timeout, ["cancelled", "cancelled"]).status == "cancelled"
    assert job_verdict(JobState("5", "COMPLETED"), ["completed", "completed"]).status == "completed"
    assert job_verdict(JobState("5", "FAILED"), ["completed", "oom"]).status == "oom"
    assert job_verdict(JobState("5", "FAILED"), []).status == "failed"


def test_a_nodes_row_is_folded_with_slurms_verdict():
    """Slurm's verdict and facts are inputs of a node's row (no row is patched afterwards): the
    supervisor's row says which job and node; once the job is over the row is folded again from
    the run directory with Slurm's verdict, every other figure as the supervisor's row had it."""
    from dataclasses import replace

    from fttui.core.profiles import load_profile
    from fttui.core.run.files import rundir
    from fttui.core.run.files.events import LaunchEvent, StartEvent, StepEvent, write_event
    from fttui.core.run.files.runfiles import SlurmNodeJob
    from fttui.core.run.row.summary import build_row, replay, settled_row

    timeout = JobState("2", "TIMEOUT", time_limit="1:00", source="sacct -c")
    node = {"job_id": "2", "job_run": "x", "node_rank": 1, "node": "n2", "nodes": 2, "restart": 0}
    rd = rundir.create(load_profile("tiny-lora"), ["python", "-m", "fttui.worker.train"], {})
    rd.write_command(replace(rd.command(), slurm=SlurmNodeJob.from_dict({**node, "rendezvous": "n1:29500"})))
    write_event(rd.events_path, LaunchEvent(t=1.0, rank=-1, source="supervisor", pid=1))
    write_event(rd.events_path, StartEvent(t=2.0, rank=0, source="worker", world_size=1, config={}, env={"x": 1}))
    for step in (1, 2):
        write_event(rd.events_path, StepEvent(t=2.0 + step, step=step, samples=2 * step, train_time=float(step)))
    own = FinalStatus("cancelled", returncode=-15, error="supervisor received SIGTERM", error_step=2)
    row = build_row(rd, replay(rd).snapshot(), own, t_launch=1.0, t_end=9.0)  # the node's supervisor
    assert row["env"]["slurm"] == node and row["error"] == "supervisor received SIGTERM"
    verdict = node_verdict(own, timeout)
    settled = settled_row(rd, row, verdict, timeout)
    assert settled["status"] == "cancelled" and settled["error"].startswith("Slurm: TIMEOUT")
    assert settled["env"]["slurm"] == {**node, "state": "TIMEOUT", "source": "sacct -c"}
    assert {k: v for k, v in settled.items() if k not in ("error", "env")} == \
        {k: v for k, v in row.items() if k not in ("error", "env")}
    assert {**settled["env"], "slurm": None} == {**row["env"], "slurm": None}
    # the row of a node finished once the job is over (its supervisor died): the same fold
    assert build_row(rd, replay(rd).snapshot(), verdict, t_launch=1.0, t_end=9.0, slurm_job=timeout) == settled


def test_an_earlier_attempt_of_a_requeued_job_is_over():
    over = JobState("9", "REQUEUED", source="scontrol", attempt_over=True)
    assert not over.live and JobState("9", "REQUEUED").live  # the job itself waits to run again
    v = node_verdict(FinalStatus("cancelled", error="supervisor received SIGTERM"), over)
    assert v.status == "cancelled" and v.error.startswith("Slurm: REQUEUED: the job was requeued")


def test_a_profile_run_in_a_job_step_resolves_its_profile(monkeypatch):
    """``srun fttui run --profile NAME`` (no ``--job``): the node resolves the profile as a run
    outside Slurm does (it called a missing resolver: 'NoneType' object is not callable)."""
    import argparse
    import os

    from fttui.cli import run_cmd
    from fttui.core.run.slurm import slurmnode

    for key, value in STEP.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("FTTUI_SLURM", raising=False)
    started = {}

    class Started:
        run_id, path = "node-run", "runs/node-run"

        def profile(self):
            return None

    def start_node(resolved, alloc, job):
        started.update(profile=resolved, job_id=alloc.job_id, job=job)
        return Started()

    def execv(*args):
        raise SystemExit("execv")

    monkeypatch.setattr(slurmnode, "start_node", start_node)
    monkeypatch.setattr(run_cmd, "resolve_profile", lambda args: {"the": "profile"})
    monkeypatch.setattr(os, "execv", execv)
    args = argparse.Namespace(profile="tiny-lora", job=None, resume=None, command=None, name=None)
    with pytest.raises(SystemExit, match="execv"):
        run_cmd.cmd_run(args)
    assert started == {"profile": {"the": "profile"}, "job_id": "4242", "job": None}
