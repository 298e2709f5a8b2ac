"""Several processes and several machines, through the real `fttui` command on CPU ranks.

One machine, two CPU ranks: torchrun --standalone. Two "machines": two `fttui run --detach`
commands on this host, node_rank 0 and 1, meeting at 127.0.0.1 on a free port, the way one
command per machine is run for real (docs/launchers.md).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from fttui.core.base.errors import ProfileError
from fttui.core.run.files.events import read_jsonl
from fttui.core.run.launching.launch import build_command, check_rendezvous, child_env, free_port
from fttui.core.profiles import load_profile
from tests.conftest import run_fttui
from tests.helpers import processes_mentioning, wait_for

pytestmark = pytest.mark.e2e

CPU2 = ["--set", "devices.gpus=0", "--set", "devices.cpu_processes=2"]


def _rows() -> list[dict]:
    return json.loads(run_fttui("results", "--format", "json", check=True).stdout)


def _events(run_dir: Path) -> list[dict]:
    """Events without the startup ``phase`` ones (tests/e2e/phase_checks.py checks those)."""
    return [e for e in read_jsonl(run_dir / "events.jsonl") if e.get("event") != "phase"]


def _argv(run_dir: Path) -> list[str]:
    return json.loads((run_dir / "command.json").read_text())["argv"]


def _steady_rate(steps: list[dict], warmup: int = 1) -> float:
    """One rank's steady samples/s: from the end of step `warmup` to its last step."""
    k = next(e for e in steps if e["step"] == warmup)
    last = steps[-1]
    return (last["samples"] - k["samples"]) / (last["train_time"] - k["train_time"])


@pytest.fixture
def listening_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


# ------------------------------------------------------------------ argv (no process)


def test_one_node_uses_standalone_rendezvous(tmp_path):
    prof = load_profile("tiny-lora", ["gpus=0", "devices.cpu_processes=2"])
    argv = build_command(prof, tmp_path)
    assert argv[1:5] == ["-m", "torch.distributed.run", "--nproc-per-node=2", "--standalone"]
    assert not any(a.startswith(("--nnodes", "--master-", "--node-rank")) for a in argv)
    assert int(child_env(prof)["OMP_NUM_THREADS"]) >= 1  # two ranks share the cores
    one = build_command(load_profile("tiny-lora"), tmp_path)
    assert one[1:3] == ["-m", "fttui.worker.train"]  # one process: plain python


def test_several_nodes_map_onto_torchrun_rendezvous(tmp_path):
    prof = load_profile("tiny-lora", ["devices.nodes=3", "devices.node_rank=2", "devices.main_addr=10.0.0.5",
                                      "devices.main_port=29777", "devices.cpu_processes=2"])
    argv = build_command(prof, tmp_path)
    assert argv[1:3] == ["-m", "torch.distributed.run"]
    assert {"--nproc-per-node=2", "--nnodes=3", "--node-rank=2", "--master-addr=10.0.0.5",
            "--master-port=29777"} <= set(argv)
    assert "--standalone" not in argv


def test_zero3_single_node_deepspeed_port_avoids_a_busy_one(tmp_path, listening_port):
    prof = load_profile("tiny-full-zero3", [f"devices.main_port={listening_port}"])
    argv = build_command(prof, tmp_path)
    assert argv[1:3] == ["-m", "deepspeed.launcher.runner"]
    port = int(next(a for a in argv if a.startswith("--master_port=")).split("=")[1])
    assert port != listening_port and port > 0


def test_accelerate_several_ranks_uses_its_distributed_launcher(tmp_path):
    # "accelerate launch --cpu" starts one process whatever --num_processes says.
    argv = build_command(load_profile("tiny-lora", ["devices.launcher=accelerate", "devices.cpu_processes=2"]),
                         tmp_path)
    assert argv[1:3] == ["-m", "accelerate.commands.launch"]
    assert "--num_processes=2" in argv and "--multi_gpu" in argv and "--cpu" not in argv
    one = build_command(load_profile("tiny-lora", ["devices.launcher=accelerate"]), tmp_path)
    assert "--cpu" in one and "--multi_gpu" not in one


@pytest.mark.parametrize("launcher", ["python", "accelerate"])
def test_zero3_refused_under_launchers_that_cannot_run_it(tmp_path, launcher):
    prof = load_profile("tiny-full-zero3", [f"devices.launcher={launcher}"])
    with pytest.raises(ProfileError) as ei:
        build_command(prof, tmp_path)
    assert ei.value.key == "devices.launcher" and "deepspeed" in str(ei.value)


def test_port_clash_on_node_0_is_refused_before_launch(listening_port, fttui_home):
    prof = load_profile("tiny-lora", ["devices.nodes=2", f"devices.main_port={listening_port}"])
    with pytest.raises(ProfileError) as ei:
        check_rendezvous(prof)
    assert ei.value.key == "devices.main_port" and str(listening_port) in str(ei.value)
    # Node 1 only connects: nothing to check there.
    check_rendezvous(load_profile("tiny-lora", ["devices.nodes=2", "devices.node_rank=1",
                                                f"devices.main_port={listening_port}"]))
    # Through the CLI: one line, exit 2, no run directory.
    proc = run_fttui("run", "--profile", "tiny-lora", "--headless", "--set", "devices.nodes=2",
                     "--set", f"devices.main_port={listening_port}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "devices.main_port" in lines[0] and "in use" in lines[0], proc.stderr
    assert not (fttui_home / "runs").exists() or not any((fttui_home / "runs").iterdir())


# ------------------------------------------------------------------ runs


def test_two_cpu_ranks_one_row(fttui_home):
    steps = 4
    proc = run_fttui("run", "--profile", "tiny-lora", "--headless", *CPU2, "--set", f"max_steps={steps}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = _rows()
    run_dir = Path(row["run_dir"])
    argv = _argv(run_dir)
    assert argv[1:5] == ["-m", "torch.distributed.run", "--nproc-per-node=2", "--standalone"]
    events = [e for e in _events(run_dir) if e.get("source") == "worker"]
    assert {e["rank"] for e in events} == {0, 1}
    per_rank = {}
    for rank in (0, 1):
        mine = [e for e in events if e["rank"] == rank]
        # (rank 0 then saves the adapter: a "save" event after "end", tests/e2e/test_results_kept.py)
        assert [e["event"] for e in mine if e["event"] != "save"] == ["start"] + ["step"] * steps + ["end"]
        assert mine[0]["world_size"] == 2 and mine[0]["distributed"]["world_size"] == 2
        assert mine[0]["distributed"]["backend"] == "gloo"
        assert mine[0]["wrapper"].endswith("DistributedDataParallel")
        per_rank[rank] = [e for e in mine if e["event"] == "step"]
    assert row["status"] == "completed" and row["world_size"] == 2
    micro, accum = row["batch_size"], row["grad_accum"]
    assert row["effective_batch"] == micro * accum * 2 == 16
    assert len(row["peak_rank_rss_mb"]) == 2 and all(v > 0 for v in row["peak_rank_rss_mb"])
    assert row["samples"] == sum(s[-1]["samples"] for s in per_rank.values()) == steps * micro * accum * 2
    # The headline rate is the sum of the ranks' own steady rates.
    assert row["samples_per_s"] == pytest.approx(sum(_steady_rate(s) for s in per_rank.values()), rel=0.01)
    assert not processes_mentioning(str(run_dir))


def test_cancel_two_accelerate_ranks_leaves_no_process(fttui_home):
    """Two CPU ranks under accelerate's launcher (torchrun's is the default: the test above),
    cancelled while both step."""
    proc = run_fttui("run", "--profile", "tiny-lora", "--detach", *CPU2, "--set", "devices.launcher=accelerate",
                     "--set", "max_steps=100000", check=True)
    run_dir = fttui_home / "runs" / proc.stdout.strip().splitlines()[-1]
    assert _argv(run_dir)[1:3] == ["-m", "accelerate.commands.launch"]

    def both_ranks_stepping():
        return {e["rank"] for e in _events(run_dir) if e.get("event") == "step"} == {0, 1}

    wait_for(both_ranks_stepping, timeout=150, what="steps from both ranks")
    assert {e["rank"] for e in _events(run_dir) if e.get("event") == "start"} == {0, 1}
    # accelerate's launcher, torchrun's agent under it and two workers
    assert len(processes_mentioning(str(run_dir))) >= 3
    out = run_fttui("cancel", run_dir.name, check=True)
    assert "cancelled" in out.stdout
    assert json.loads((run_dir / "status.json").read_text())["status"] == "cancelled"
    wait_for(lambda: not processes_mentioning(str(run_dir)), timeout=15, what="no process left")
    (row,) = _rows()
    assert row["status"] == "cancelled" and row["world_size"] == 2 and len(row["peak_rank_rss_mb"]) == 2


def test_two_nodes_on_loopback(fttui_home):
    """One `fttui run --detach` per node: each node's supervisor writes its own row, for its own ranks."""
    port = free_port()
    steps = 2
    common = ["--set", "devices.gpus=0", "--set", "devices.cpu_processes=1", "--set", "devices.nodes=2",
              "--set", "devices.main_addr=127.0.0.1", "--set", f"devices.main_port={port}",
              "--set", f"max_steps={steps}"]
    run_dirs = {}
    for node in (0, 1):
        proc = run_fttui("run", "--profile", "tiny-lora", "--detach", "--set", f"devices.node_rank={node}",
                         *common, check=True)
        run_dirs[node] = fttui_home / "runs" / proc.stdout.strip().splitlines()[-1]
    try:
        for node, d in run_dirs.items():
            wait_for(lambda d=d: (d / "status.json").exists(), timeout=180, what=f"node {node} to finish")
    finally:
        for d in run_dirs.values():
            if not (d / "status.json").exists():
                run_fttui("cancel", d.name)
    rows = {r["run_id"]: r for r in _rows()}
    assert len(rows) == 2
    for node, d in run_dirs.items():
        status = json.loads((d / "status.json").read_text())
        assert status["status"] == "completed", (status, (d / "train.log").read_text()[-3000:])
        argv = _argv(d)
        assert {"--nnodes=2", f"--node-rank={node}", "--master-addr=127.0.0.1", f"--master-port={port}",
                "--nproc-per-node=1"} <= set(argv)
        assert "--standalone" not in argv
        worker = [e for e in _events(d) if e.get("source") == "worker"]
        assert {e["rank"] for e in worker} == {node}  # this node's ranks only
        row = rows[d.name]
        assert row["world_size"] == 2 and row["nodes"] == 2
        assert row["effective_batch"] == row["batch_size"] * row["grad_accum"] * 2
        assert len(row["peak_rank_rss_mb"]) == 1  # one local rank per node
        assert row["samples"] == steps * row["batch_size"] * row["grad_accum"]  # this node's samples
        assert not processes_mentioning(str(d))
