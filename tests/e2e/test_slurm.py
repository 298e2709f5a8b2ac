"""fttui on a real Slurm: a one-host cluster of two nodes (tests/slurm_cluster.py), started once
for the session (its own xdist group), skipped loudly where Slurm and munge are not installed.

One job script of `fttui submit` per case, the tiny LoRA profile on one CPU rank per node:

- a 2-node job completes as one job of world size 2, each node's run and row its own, the
  rendezvous found from Slurm (node 0's NodeAddr, the job's port), against the same profile
  started by hand as two nodes on 127.0.0.1;
- a job that cannot start (the cluster is full) is PENDING with Slurm's reason in `fttui ls`
  and in the app's live runs;
- `fttui cancel` of a running job goes through scancel: no process is left on either node and
  both rows say cancelled, with Slurm's CANCELLED;
- a job killed by its time limit gets rows saying TIMEOUT (from squeue / sacct -c);
- `srun -N2 --ntasks-per-node=1 fttui run --profile ...` by hand runs one node per task, and
  `--on-oom shrink` in a job (by hand or `fttui submit`) is refused in one line (issue 41).

The cases share the cluster's time: the time-limited job, the cancelled one and the hand-started
run go on at once while the completing job waits for the whole cluster (it asks --exclusive).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from fttui.core.run.slurm.allocation import job_port
from fttui.core.run.files.events import read_jsonl
from fttui.core.run.launching.launch import free_port
from fttui.worker.testhooks import SLOW_DATA_ENV
from tests.conftest import fttui_env, run_fttui
from tests.helpers import processes_mentioning, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def _fttui(cluster, *args, env: dict[str, str] | None = None, **kw):
    return run_fttui(*args, env=fttui_env(SLURM_CONF=str(cluster.conf), **(env or {})), **kw)


def _submit(cluster, *args, env: dict[str, str] | None = None) -> dict:
    proc = _fttui(cluster, "submit", "--profile", "tiny-lora", "--nodes", "2", "--json", *args, env=env, check=True)
    return json.loads(proc.stdout)


# The jobs that only wait to be ended (the time limit, scancel) step slowly: each batch waits in
# the data loader (fttui/worker/testhooks.py), so their ranks sleep instead of taking the suite's
# CPU for the minute of the time limit. sbatch exports the submitting environment to the job.
IDLE_STEPS = {SLOW_DATA_ENV: "0.5"}


def _ls(cluster) -> dict[str, dict]:
    return {b["run_id"]: b for b in json.loads(_fttui(cluster, "ls", "--json", check=True).stdout)}


def _rows(cluster) -> dict[str, dict]:
    rows = json.loads(_fttui(cluster, "results", "--format", "json", check=True).stdout)
    return {r["run_id"]: r for r in rows}


def _settled(cluster, sub: dict, timeout: float, what: str) -> dict:
    """Wait (through `fttui ls`, which finishes ended jobs) until the job's directory has its status.
    While Slurm still lists the job, its cheap `squeue` is asked, not a `fttui ls` every 2 s."""
    def done():
        if str(sub["job_id"]) in {ln.split("|")[0] for ln in cluster.squeue().splitlines()}:
            return None
        b = _ls(cluster).get(sub["run_id"])
        return b if b is not None and not b["live"] and (Path(b["run_dir"]) / "status.json").exists() else None

    try:
        return wait_for(done, timeout=timeout, interval=2, what=what)
    except AssertionError:
        raise AssertionError(f"{what}: squeue {cluster.squeue()!r}\n{cluster.logs()}") from None


def _stepping(run_dir: Path) -> bool:
    return any(e.get("event") == "step" for e in read_jsonl(run_dir / "events.jsonl"))


async def _app_live_cells() -> list[list[str]]:
    from textual.widgets import DataTable

    from fttui.monitor import FakeGpuSampler
    from fttui.tui.app import FttuiApp
    from fttui.tui.picker import PickerScreen
    from tests.tui.conftest import until
    from tests.tui.fixtures import FAKE_GPUS

    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(FAKE_GPUS)))
    async with app.run_test(size=(140, 30)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker", timeout=60)
        picker = app.screen
        await until(pilot, lambda: picker.live is not None and picker.live.briefs, what="live runs", timeout=60)
        table = picker.query_one("#live-table", DataTable)
        return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def test_jobs_complete_pend_cancel_and_time_out(slurm, fttui_home, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    steps = 2
    # the time-limited job and the one to cancel share the cluster (a CPU of each node each)
    # (without the link test, the job's first step: the completing job runs it for all three)
    limited = _submit(slurm, "--time", "1", "--set", "max_steps=100000", "--no-link-test", env=IDLE_STEPS)
    doomed = _submit(slurm, "--set", "max_steps=100000", "--no-link-test", env=IDLE_STEPS)
    # the job that completes needs whole nodes: it waits until both are gone
    job = _submit(slurm, "--set", f"max_steps={steps}", "--sbatch-arg=--exclusive")
    for sub in (limited, doomed, job):
        assert (Path(sub["run_dir"]) / "job.sbatch").read_text().startswith("#!/bin/bash")

    # PENDING with Slurm's reason, in `fttui ls` and in the app
    wait_for(lambda: _ls(slurm)[job["run_id"]]["status"].startswith("PENDING ("), timeout=60, interval=1,
             what="the exclusive job to pend")
    brief = _ls(slurm)[job["run_id"]]
    assert brief["live"] and brief["kind"] == "slurm"
    reason = brief["status"].split("(", 1)[1].split(")", 1)[0]
    assert reason in ("Resources", "Priority"), brief
    cells = asyncio.run(_app_live_cells())
    mine = [c for c in cells if c[0] == job["run_id"]]
    # Slurm re-evaluates the reason between the two reads (Priority <-> Resources): the app shows
    # Slurm's reason as it is at its own read, one of the two
    assert mine and mine[0][2].startswith(("PENDING (Resources)", "PENDING (Priority)")), cells

    # meanwhile: the same profile by hand, two nodes meeting on 127.0.0.1 (no Slurm)
    port = free_port()
    hand = {}
    for node in (0, 1):
        proc = run_fttui("run", "--profile", "tiny-lora", "--detach", "--set", "devices.nodes=2",
                         "--set", f"devices.node_rank={node}", "--set", "devices.main_addr=127.0.0.1",
                         "--set", f"devices.main_port={port}", "--set", f"max_steps={steps}", check=True)
        hand[node] = fttui_home / "runs" / proc.stdout.strip().splitlines()[-1]

    # cancel a running job: scancel, no process left on either node, both rows cancelled
    doomed_nodes = [Path(doomed["run_dir"] + f"-n{i}") for i in (0, 1)]
    wait_for(lambda: all(d.exists() and _stepping(d) for d in doomed_nodes), timeout=240,
             what="both nodes of the job to cancel stepping")
    out = _fttui(slurm, "cancel", doomed["run_id"], timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"job {doomed['run_id']}: cancelled" in out.stdout
    for d in doomed_nodes:
        wait_for(lambda d=d: not processes_mentioning(str(d)), timeout=30, what=f"no process of {d.name}")
    rows = _rows(slurm)
    for d in doomed_nodes:
        row = rows[d.name]
        assert row["status"] == "cancelled" and row["error"].startswith("Slurm: CANCELLED"), row
        assert row["env"]["slurm"]["state"] == "CANCELLED" and row["env"]["slurm"]["job_id"] == doomed["job_id"]

    # the time limit: both nodes' rows say TIMEOUT
    _settled(slurm, limited, 240, "the time-limited job to end")
    rows = _rows(slurm)
    for i in (0, 1):
        row = rows[f"{limited['run_id']}-n{i}"]
        assert row["status"] == "cancelled", row
        assert row["error"].startswith("Slurm: TIMEOUT: the job reached its time limit"), row
    assert json.loads((Path(limited["run_dir"]) / "status.json").read_text())["slurm_state"] == "TIMEOUT"

    # the job that waited runs and completes as one job of world size 2
    _settled(slurm, job, 300, "the 2-node job to complete")
    for node, d in hand.items():
        wait_for(lambda d=d: (d / "status.json").exists(), timeout=120, what=f"hand-started node {node}")
    rows = _rows(slurm)
    status = json.loads((Path(job["run_dir"]) / "status.json").read_text())
    assert status["status"] == "completed" and status["slurm_state"] == "COMPLETED", status
    node_rows = [rows[f"{job['run_id']}-n{i}"] for i in (0, 1)]
    hand_rows = [rows[hand[i].name] for i in (0, 1)]
    job_samples = steps * node_rows[0]["batch_size"] * node_rows[0]["grad_accum"] * 2
    assert sum(r["samples"] for r in node_rows) == job_samples
    for i, (row, ref) in enumerate(zip(node_rows, hand_rows)):
        assert row["status"] == ref["status"] == "completed", (row, ref)
        assert row["env"]["slurm"]["node_rank"] == i and row["env"]["slurm"]["node"] == f"n{i + 1}"
        for key in ("world_size", "nodes", "effective_batch", "batch_size", "grad_accum", "steps", "total_steps",
                    "samples", "max_seq_len", "params_total", "params_trainable"):
            assert row[key] == ref[key], (key, row[key], ref[key])
        assert row["world_size"] == 2 and row["nodes"] == 2
        argv = json.loads((Path(row["run_dir"]) / "command.json").read_text())["argv"]
        # the rendezvous Slurm gave: node n1's NodeAddr and the job's own port, nothing typed
        assert {"--nnodes=2", f"--node-rank={i}", "--master-addr=127.0.0.1",
                f"--master-port={job_port(job['job_id'])}"} <= set(argv), argv
        workers = {e["rank"] for e in read_jsonl(Path(row["run_dir"]) / "events.jsonl")
                   if e.get("source") == "worker"}
        assert workers == {i}  # each node's run holds its own rank
    _the_link_was_measured_first(slurm, job)
    wait_for(slurm.idle, timeout=60, interval=1, what="no job left in the queue")


def _the_link_was_measured_first(cluster, job: dict) -> None:
    """Issue 43 item 2: the completed job's first step was the link test over its two nodes
    (srun, the job's rendezvous): a bandwidth and a latency, kept for the machine set n1+n2, and a
    later plan of two nodes times each sharding's communication over it. On one host the loopback
    carries it: the figure says nothing of a real link between machines (docs/plan.md)."""
    from fttui.core.experiments import link

    fig = link.parse_result(Path(job["run_dir"]) / "link.json",
                            source=f"fttui submit (Slurm job {job['job_id']}'s first step)")  # what ran it, kept
    assert fig.world == 2 and sorted(set(fig.nodes)) == ["n1", "n2"], fig
    assert fig.bandwidth > 0 and fig.latency_s > 0 and fig.backend == "gloo"
    assert [r[1] for r in fig.per_rank] == ["n1", "n2"] and len(fig.pairs) == 1
    assert link.load(link.link_key(["n1", "n2"], link.interconnect("gloo"))) == fig  # kept per machine set
    out = (Path(job["run_dir"]) / f"slurm-{job['job_id']}.out").read_text()
    assert "fttui: link of n1, n2 (gloo, 2 ranks): bus bandwidth" in out, out
    plan = _fttui(cluster, "plan", "--profile", "tiny-full", "--gpus", "0", "--set", "devices.nodes=2",
                  "--effective-batch", "2", check=True)
    assert "using the link of n1, n2" in plan.stderr, plan.stderr
    assert "over this link: " in plan.stdout and "times the DDP step" in plan.stdout, plan.stdout
    print(f"link test on the loopback Slurm lab: {link.words(fig)}")


def test_plan_link_over_two_nodes_is_an_srun_step(slurm, fttui_home):
    """Issue 43 item 2: `fttui plan --link` of a profile of two nodes measures the link through
    Slurm, an srun step of one task per node over two nodes (the step a `fttui submit` job runs
    first, the ranks meeting at the first node on the job's link port), keeps the figure for the
    nodes Slurm gave and forecasts each sharding over it ("ZeRO-3 over this link: N times the DDP
    step"); a test that cannot run (three nodes asked of the two-node lab: srun waits in the queue)
    is ended when its time is up, its job gone from the queue, one line and exit 5, nothing kept.
    On one host the loopback carries it (docs/plan.md)."""
    from fttui.core.experiments import link

    wait_for(slurm.idle, timeout=120, interval=1, what="an idle cluster")
    plan = ["plan", "--profile", "tiny-full", "--gpus", "0", "--effective-batch", "2", "--link"]
    r = _fttui(slurm, *plan, "--set", "devices.nodes=2", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "measured the link of n1, n2 (gloo, 2 ranks): bus bandwidth " in r.stderr, r.stderr
    fig = link.load(link.link_key(["n1", "n2"], link.interconnect("gloo")))
    assert fig is not None and fig.world == 2 and fig.bandwidth > 0 and fig.latency_s > 0, fig
    assert fig.source == "fttui plan --link (srun over 2 nodes)" and [p[1] for p in fig.per_rank] == ["n1", "n2"]
    assert not list((fttui_home / "links").glob("measuring-*"))  # the result's folder is gone
    said = [x for x in r.stdout.splitlines() if "over this link: " in x]
    assert said and all("times the DDP step" in x for x in said), r.stdout
    assert "over the measured link" in r.stdout  # the forecast's words say what it counted
    wait_for(slurm.idle, timeout=60, interval=1, what="the step's job gone")
    kept = sorted(p.name for p in (fttui_home / "links").iterdir())

    # three nodes of the two-node lab: the step waits in Slurm's queue until the test's time is up
    three = _fttui(slurm, *plan, "--set", "devices.nodes=3", env={"FTTUI_LINK_TIMEOUT": "8"}, timeout=120)
    assert three.returncode == 5, (three.returncode, three.stderr)
    lines = three.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fttui: link test: no result after 8 s, srun ended"), three.stderr
    assert "queued and waiting for resources" in lines[0] or "srun:" in lines[0], lines
    assert sorted(p.name for p in (fttui_home / "links").iterdir()) == kept  # nothing more kept, no folder left
    wait_for(slurm.idle, timeout=30, interval=1, what="the waiting step's job gone with srun")
    print(f"plan --link over the lab's two nodes: {link.words(fig)}; {'; '.join(said)}; three nodes: {lines[0]}")


def test_a_profile_run_by_hand_in_a_job_step_and_on_oom_shrink_refused(slurm, fttui_home, monkeypatch):
    """Issue 41 items 1 and 3, on the cluster: `srun -N2 --ntasks-per-node=1 fttui run --profile
    ... --headless`, what fttui's "not in a job step" line and docs/cluster.md tell a user to run,
    runs one node per task (it ended in `TypeError: 'NoneType' object is not callable`); with
    `--on-oom shrink` (a node is not retried on its own) each node refuses in one line, and so
    does `fttui submit`, before anything is queued."""
    import subprocess
    import sys

    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    wait_for(slurm.idle, timeout=120, interval=1, what="an idle cluster")
    env = fttui_env(SLURM_CONF=str(slurm.conf))
    srun = ["srun", "-N2", "--ntasks-per-node=1", sys.executable, "-m", "fttui", "run", "--profile", "tiny-lora",
            "--set", "max_steps=2", "--headless"]
    refused = subprocess.run([*srun, "--on-oom", "shrink"], env=env, capture_output=True, text=True, timeout=300,
                             stdin=subprocess.DEVNULL)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr
    said = [ln for ln in refused.stderr.splitlines() if ln.startswith("fttui: ")]
    assert len(said) == 2 and all("train.on_oom = shrink: a Slurm job's node is not retried on its own" in ln
                                  for ln in said), refused.stderr
    assert not (fttui_home / "runs").exists() or not any((fttui_home / "runs").iterdir())
    out = _fttui(slurm, "submit", "--profile", "tiny-lora", "--nodes", "2", "--set", "train.on_oom=shrink")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "not retried on its own" in out.stderr
    assert slurm.idle()

    ran = subprocess.run(srun, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stdout + ran.stderr
    runs = sorted(p for p in (fttui_home / "runs").iterdir() if "-slurm" in p.name)
    assert [p.name[-3:] for p in runs] == ["-n0", "-n1"], runs
    rows = _rows(slurm)
    for i, d in enumerate(runs):
        row = rows[d.name]
        assert row["status"] == "completed" and row["world_size"] == 2 and row["nodes"] == 2, row
        assert row["env"]["slurm"]["node_rank"] == i and row["steps"] == 2
    wait_for(slurm.idle, timeout=60, interval=1, what="no job left in the queue")
