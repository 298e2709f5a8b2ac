"""End to end: ``fttui run --on-oom shrink`` recovers from a real CPU out of memory (issue 25 part 1).

The data (written here) is short for the first two optimizer steps and long (512 tokens) after
them, in the Trainer's own order (its sampler's seeded permutation); the host-memory limit lets a
micro batch of 8 short samples and of 4 long ones through, not 8 long ones. Measured with
``fttui probe --profile tiny-lora --param batch_size --steps 1 --host-memory-limit 64MiB --set
data.max_seq_len=512``: 6 long samples fit, 7 run out of memory (fresh processes, the fixed
address layout of a host limit), so the limit is two samples away from both batches the test
uses. A checkpoint every 2 steps: the first attempt runs out of memory in step 3, the second
continues from the checkpoint of step 2 with batch 4 x accumulation 4 and completes; its weights
are those of a run made at that batch from the same checkpoint.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fttui.core.run.files.events import read_jsonl
from fttui.core.run.files.rundir import RunDir
from tests.conftest import ROOT, fttui_env, run_fttui
from tests.helpers import processes_mentioning, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LIMIT = "64MiB"
SEED = 42
N, LONG_FROM = 64, 32  # 4 steps of 8 x 2 samples; the last two steps long


def _data(path: Path) -> Path:
    """Short samples where the sampler draws them first, long ones after: the Trainer's sampler
    is a ``torch.randperm`` seeded with ``train.seed`` (accelerate's seedable sampler, epoch 0)."""
    import torch

    order = torch.randperm(N, generator=torch.Generator().manual_seed(SEED)).tolist()
    long = set(order[LONG_FROM:])
    with open(path, "w") as f:
        for i in range(N):
            out = "once upon a time " * 40 if i in long else "hi"  # long: cut at max_seq_len
            f.write(json.dumps({"instruction": f"Sample {i}.", "input": "", "output": out}) + "\n")
    return path


def _steps(rd: RunDir) -> dict[int, dict]:
    return {e["step"]: e for e in read_jsonl(rd.events_path) if e.get("event") == "step"}


@pytest.mark.timeout(600)  # three model loads (the reference run beside the second attempt)
def test_on_oom_shrink_resumes_with_half_the_batch_to_the_weights_of_a_run_at_that_batch(tmp_path, fttui_home, capsys):
    from safetensors.numpy import load_file

    from fttui.cli.main import main
    from fttui.core.results.store import Store
    from fttui.core.run.launching import launch
    from fttui.core.run.launching.resume import Resume

    data = _data(tmp_path / "long-later.jsonl")
    cli = subprocess.Popen(
        [sys.executable, "-m", "fttui", "run", "--profile", "tiny-lora", "--headless", "--on-oom", "shrink",
         "--host-memory-limit", LIMIT, "--set", f"data.source={data}", "--set", "data.format=instruction",
         "--set", "data.max_seq_len=512", "--set", "train.batch_size=8", "--set", "train.grad_accum=2",
         "--set", "train.max_steps=4", "--set", "train.save_steps=2", "--set", "train.warmup_ratio=0",
         "--set", f"train.seed={SEED}"],
        cwd=ROOT, env=fttui_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = RunDir(wait_for(lambda: next(iter(sorted((fttui_home / "runs").glob("*"))), None), timeout=120,
                                what="the first attempt's directory"))
        wait_for(first.status_path.exists, timeout=400, interval=0.2, what="the first attempt's end")
        retry = [e for e in read_jsonl(first.events_path) if e.get("event") == "retry"]
        assert retry, (first.path / "train.log").read_text()[-2000:]
        second = RunDir(first.path.parent / retry[-1]["next_run"])
        # the reference: a run at the smaller batch from the same checkpoint, the same data order
        # (started beside the second attempt, whose profile it runs)
        resolved = second.profile()
        checkpoint = str(first.path / "output" / "checkpoint-2")
        ref = launch.launch(resolved, resume=Resume(first.run_id, resolved, checkpoint, 2))
        out, _ = cli.communicate(timeout=400)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 0, out[-3000:]
    wait_for(ref.status_path.exists, timeout=400, interval=0.2, what="the reference run's end")
    assert ref.final_status().status == "completed", (ref.path / "train.log").read_text()[-2000:]
    with Store() as store:
        r1, r2 = store.get(first.run_id), store.get(second.run_id)

    # the first attempt: the short steps fitted at batch 8, the first long one ran out of memory
    s1 = _steps(first)
    assert sorted(s1) == [1, 2] and s1[2]["tokens"] < 32 * 64, "the first two steps were not the short ones"
    assert (r1["status"], r1["oom_kind"], r1["error_step"], r1["attempt"]) == ("oom", "cpu", 2, 1)
    assert r1["retried_as"] == second.run_id and r1["checkpoint"] == checkpoint
    # the second continues it from that checkpoint with half the batch: it completes
    msg = "recovered from OOM at step 3: batch 8 -> 4, accumulation 2 -> 4, from the checkpoint of step 2"
    assert (r2["status"], r2["attempt"], r2["attempt_of"], r2["recovered"]) == ("completed", 2, first.run_id, msg)
    assert (r2["resumed_from"], r2["resumed_step"], r2["steps"]) == (first.run_id, 2, 4)
    assert r2["checkpoint"] is None  # kept for the recovery only: removed once training completed
    # the effective batch never changed: the rows, and the samples of every optimizer step
    assert (r1["batch_size"], r1["grad_accum"], r2["batch_size"], r2["grad_accum"]) == (8, 2, 4, 4)
    assert r1["effective_batch"] == r2["effective_batch"] == 16
    s2 = _steps(second)
    assert sorted(s2) == [3, 4] and s2[4]["tokens"] == 32 * 512  # both long steps, at batch 4
    assert [s1[1]["samples"], s1[2]["samples"] - s1[1]["samples"]] == [16, 16]
    assert [s2[3]["samples"], s2[4]["samples"] - s2[3]["samples"]] == [16, 16]
    # every view says it: the headless lines, `fttui ls`
    assert f"retried as {second.run_id} (attempt 2: batch 8 -> 4, accumulation 2 -> 4)" in out
    assert f"attempt 2: {msg}" in out and f"COMPLETED (attempt 2: {msg})" in out
    capsys.readouterr()
    assert main(["ls"]) == 0
    ls = capsys.readouterr().out
    assert f"completed (attempt 2: {msg})" in ls and f"oom (retried as {second.run_id})" in ls
    # every process of both attempts (and of the reference run) ended with its run
    wait_for(lambda: not any(processes_mentioning(str(rd.path)) for rd in (first, second, ref)),
             timeout=30, what="no process of either attempt left")

    # the reference run's weights: the same batches, the same weights
    sref = _steps(ref)
    assert [(s, sref[s]["tokens"], sref[s]["samples"]) for s in (3, 4)] == \
        [(s, s2[s]["tokens"], s2[s]["samples"]) for s in (3, 4)]  # the same batches
    got = load_file(str(Path(r2["output_dir"]) / "adapter_model.safetensors"))
    want = load_file(str(ref.path / "output" / "adapter_model.safetensors"))
    before = load_file(str(Path(r1["checkpoint"]) / "adapter_model.safetensors"))
    assert set(got) == set(want) == set(before) and got
    for k in got:
        assert (got[k] == want[k]).all(), k
    assert any((got[k] != before[k]).any() for k in got), "the two long steps changed nothing"


@pytest.mark.timeout(600)  # two model loads, on a loaded machine
def test_a_host_oom_kill_is_recovered_and_cancel_of_the_first_attempt_stops_the_chain(fttui_home, tmp_path):
    """SIGKILL of the worker that the kernel log records as an OOM kill (here a file fttui reads
    instead of /dev/kmsg, FTTUI_KERNEL_LOG: a SIGKILL by hand alone is no OOM, issue 41 item 6) is
    the kernel's OOM killer's verdict (``host-kill``): the next attempt continues from the last
    checkpoint at half the batch; ``fttui cancel FIRST`` stops the attempt that runs, and no
    process of either is left."""
    log = tmp_path / "kmsg"
    log.write_text("")
    proc = run_fttui("run", "--profile", "tiny-lora", "--detach", "--on-oom", "shrink", "--host-memory-limit", "4GiB",
                     "--set", "train.max_steps=100000", "--set", "train.save_steps=1", check=True,
                     env=fttui_env(FTTUI_KERNEL_LOG=str(log)))
    first = RunDir(fttui_home / "runs" / proc.stdout.strip().splitlines()[-1])
    wait_for(lambda: any(e.get("event") == "save" for e in read_jsonl(first.events_path)), timeout=300,
             interval=0.1, what="the first checkpoint")
    workers = [p for p in processes_mentioning(str(first.path))
               if "fttui.worker.train" in " ".join(p.cmdline()) and "fttui.core.run.supervising.logtee" not in p.cmdline()]
    assert workers, "no training process"
    log.write_text(f"Out of memory: Killed process {workers[0].pid} (python) total-vm:1kB\n")
    workers[0].send_signal(9)
    wait_for(lambda: first.status_path.exists(), timeout=120, what="the first attempt's status")
    st = first.final_status()
    assert (st.status, st.oom_kind, st.signal) == ("oom", "host-kill", "SIGKILL"), st
    assert "(the kernel log: Out of memory: Killed process " in st.error, st
    nxt_id = st.error.split("retried as ", 1)[1].split(" ", 1)[0]
    second = RunDir(fttui_home / "runs" / nxt_id)
    wait_for(lambda: any(e.get("event") == "step" for e in read_jsonl(second.events_path)), timeout=300,
             interval=0.2, what="a step of the second attempt")
    attempt = next(e for e in read_jsonl(second.events_path) if e.get("event") == "attempt")
    saved = max(e["step"] for e in read_jsonl(first.events_path) if e.get("event") == "save")
    assert (attempt["attempt"], attempt["first"], attempt["oom_kind"], attempt["batch"], attempt["accum"]) == \
        (2, first.run_id, "host-kill", [8, 4], [1, 2])
    assert attempt["from_step"] >= 1 and attempt["from_step"] <= saved
    first_step = min(e["step"] for e in read_jsonl(second.events_path) if e.get("event") == "step")
    assert first_step == attempt["from_step"] + 1  # continued from the checkpoint, not from the start
    # the supervisor of both attempts is one process: it outlives the worker it lost
    assert second.supervisor().pid == first.supervisor().pid
    assert run_fttui("cancel", first.run_id).returncode == 0  # the first attempt names the chain
    assert second.final_status().status == "cancelled" and not second.final_status().error.startswith("not retried")
    # the supervisor (its command line names the first attempt's directory) is gone with the workers
    wait_for(lambda: not processes_mentioning(str(first.path)) and not processes_mentioning(str(second.path)),
             timeout=30, what="no process of either attempt left")
