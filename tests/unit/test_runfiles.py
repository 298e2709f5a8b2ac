"""The objects inside the run files as records (issue 37): command.json's ``resume``, ``attempt``
and ``slurm``, supervisor.json's ``id`` and ``train_id``, a job directory's slurm.json. Files as
the code before the records wrote them read back into typed fields and are written back byte for
byte; a damaged field reads as none and never raises."""

import json

import pytest

from fttui.core.run.files import rundir
from fttui.core.run.files.runfiles import (
    Attempt,
    CommandFile,
    ProcessId,
    ResumeFrom,
    SlurmJobFile,
    SlurmNodeJob,
    SupervisorFile,
)

# command.json of a Slurm node's second attempt after an out of memory, as the dict-writing code wrote it
OLD_COMMAND = {
    "argv": ["python", "-m", "fttui.worker.train", "--run-dir", "/r", "--resume-from", "/o/checkpoint-4"],
    "env": {"HF_TOKEN": "***"},
    "created": 1700000000.5,
    "kind": "run",
    "group": "20250101-000000-demo-ab12",
    "resume": {"run_id": "first-run", "checkpoint": "/o/checkpoint-4", "step": 4},
    "attempt": {
        "n": 2,
        "first": "first-run",
        "previous": "first-run",
        "oom_step": 7,
        "oom_kind": "cuda",
        "from_step": 4,
        "batch": [8, 4],
        "accum": [2, 4],
        "message": "recovered from OOM at step 7: batch 8 -> 4, accumulation 2 -> 4, from the checkpoint of step 4",
    },
    "slurm": {
        "job_id": "77",
        "job_run": "20250101-000000-demo-ab12",
        "node_rank": 1,
        "node": "n2",
        "nodes": 2,
        "nodelist": "n[1-2]",
        "restart": 0,
        "main_addr": "10.0.0.1",
        "main_port": 29577,
    },
}
OLD_SUPERVISOR = {
    "pid": 4242,
    "pgid": 4242,
    "started": 1700000001.0,
    "create_time": 1700000000.9,
    "id": {"start_ticks": 123456, "boot_id": "b0"},
    "train_pgid": 4250,
    "train_id": {"start_ticks": 123470, "boot_id": "b0"},
    "cgroup": None,
}
OLD_SLURM_JOB = {"job_id": "77", "cluster": None, "submitted": 1700000000.0, "nodes": 2, "script": "/r/job.sbatch"}


def _written(rd, path, obj):
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    return path.read_text()


def test_old_files_read_into_records_and_round_trip(tmp_path):
    rd = rundir.RunDir(tmp_path)
    before = _written(rd, rd.command_path, OLD_COMMAND)
    cmd = rd.command()
    assert cmd.resume == ResumeFrom(run_id="first-run", checkpoint="/o/checkpoint-4", step=4)
    assert isinstance(cmd.attempt, Attempt)
    assert (cmd.attempt.n, cmd.attempt.first, cmd.attempt.batch, cmd.attempt.accum) == (2, "first-run", [8, 4], [2, 4])
    assert isinstance(cmd.slurm, SlurmNodeJob)
    assert (cmd.slurm.job_id, cmd.slurm.node_rank, cmd.slurm.restart, cmd.slurm.main_port) == ("77", 1, 0, 29577)
    assert rd.slurm_node() == cmd.slurm and rd.slurm() == cmd.slurm
    assert cmd.to_dict() == OLD_COMMAND
    rd.write_command(cmd)
    assert rd.command_path.read_text() == before

    before = _written(rd, rd.supervisor_path, OLD_SUPERVISOR)
    sup = rd.supervisor()
    assert sup.id == ProcessId(start_ticks=123456, boot_id="b0")
    assert sup.train_id == ProcessId(start_ticks=123470, boot_id="b0")
    assert sup.to_dict() == OLD_SUPERVISOR
    rd.write_supervisor(sup)
    assert rd.supervisor_path.read_text() == before

    rd.command_path.unlink()  # a job directory (fttui submit): slurm.json
    before = _written(rd, rd.path / "slurm.json", OLD_SLURM_JOB)
    job = rd.slurm()
    assert job == SlurmJobFile(job_id="77", submitted=1700000000.0, nodes=2, script="/r/job.sbatch")
    assert rd.slurm_node() is None
    rundir.write_json_atomic(rd.path / "slurm.json", job.to_dict())
    assert (rd.path / "slurm.json").read_text() == before


def test_a_first_attempt_from_the_start_and_a_machine_without_a_boot_id(tmp_path):
    """What prepare_next writes for an attempt without a checkpoint (``checkpoint: null``), and an
    identity whose boot id could not be read (``boot_id: null``): the nulls are kept."""
    rd = rundir.RunDir(tmp_path)
    old = {**OLD_COMMAND, "resume": {"run_id": "r", "checkpoint": None, "step": 0}}
    old["attempt"] = {**old["attempt"], "oom_step": None, "oom_kind": None}
    before = _written(rd, rd.command_path, old)
    assert rd.command().resume == ResumeFrom(run_id="r", step=0)
    rd.write_command(rd.command())
    assert rd.command_path.read_text() == before
    old_sup = {**OLD_SUPERVISOR, "id": {"start_ticks": 5, "boot_id": None}}
    before = _written(rd, rd.supervisor_path, old_sup)
    rd.write_supervisor(rd.supervisor())
    assert rd.supervisor_path.read_text() == before


@pytest.mark.parametrize(
    "key, value",
    [
        ("resume", {"run_id": 5, "checkpoint": ["x"], "step": "4"}),
        ("attempt", {"n": "2", "batch": [8, "4"], "accum": "x", "message": 3}),
        ("slurm", {"job_id": 77, "node_rank": 1.5, "restart": None}),
        ("resume", [1, 2]),
        ("attempt", "attempt 2"),
        ("slurm", 7),
        ("resume", {}),
    ],
)
def test_a_damaged_object_reads_as_none_and_never_raises(tmp_path, key, value):
    rd = rundir.RunDir(tmp_path)
    rd.command_path.write_text(json.dumps({**OLD_COMMAND, key: value}))
    cmd = rd.command()
    got = getattr(cmd, key)
    if not isinstance(value, dict) or not value:
        assert got is None
    else:  # each wrong field reads as none, the record stays
        declared = {f for f in type(got).READ}
        assert all(getattr(got, f) is None for f in value if f in declared)


def test_unknown_keys_inside_an_object_are_kept(tmp_path):
    rd = rundir.RunDir(tmp_path)
    old = {**OLD_COMMAND, "slurm": {**OLD_COMMAND["slurm"], "rendezvous": "n1:29500"}}
    before = _written(rd, rd.command_path, old)
    assert rd.command().slurm.extra == {"rendezvous": "n1:29500"}
    rd.write_command(rd.command())
    assert rd.command_path.read_text() == before


def test_a_new_file_holds_what_the_dicts_held(tmp_path):
    """Records built by the writers (launch, oomretry, slurmnode, the supervisor) give the keys the
    dicts had, nulls included."""
    cmd = CommandFile(
        argv=["x"],
        resume=ResumeFrom(run_id="r", checkpoint=None, step=0),
        slurm=SlurmNodeJob(
            job_id="1", job_run="j", node_rank=0, node="n", nodes=1, nodelist="n", restart=0, main_addr="n", main_port=1
        ),
    )
    d = cmd.to_dict()
    assert d["resume"] == {"run_id": "r", "checkpoint": None, "step": 0}
    assert set(d["slurm"]) == {
        "job_id",
        "job_run",
        "node_rank",
        "node",
        "nodes",
        "nodelist",
        "restart",
        "main_addr",
        "main_port",
    }
    sup = SupervisorFile(pid=2, id=ProcessId(start_ticks=1, boot_id=None))
    assert sup.to_dict()["id"] == {"start_ticks": 1, "boot_id": None}
