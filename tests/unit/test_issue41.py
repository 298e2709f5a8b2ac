"""Issue 41, as a user tried them: a multi-node sweep, `--on-oom shrink` in a Slurm job, card
names, `plan --write`, a SIGKILL that was no OOM, and the words of `attach` and a sacct time limit."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT, run_fttui


def test_a_sweep_of_several_nodes_is_refused_in_one_line():
    """Item 2: the sweep started node 0 on this machine and waited for node 1 until killed; the
    probe refuses the same profile in one line, and so does the sweep now, before any cell runs."""
    out = run_fttui("sweep", "--profile", "tiny-lora", "--set", "devices.nodes=2", "--grid", "batch_size=2,4",
                    timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "the sweep runs on one machine, the profile has devices.nodes = 2" in out.stderr
    grid = run_fttui("sweep", "--profile", "tiny-lora", "--grid", "devices.nodes=1,2", timeout=60)
    assert grid.returncode == 2 and "devices.nodes = 2" in grid.stderr and grid.stderr.count("\n") == 1


def test_a_slurm_job_with_on_oom_shrink_is_refused_in_one_line(fttui_home):
    """Item 3: a node's OOM is not retried on its own, so `train.on_oom = shrink` did nothing in a
    job; `fttui submit` (with or without --dry-run) refuses it before anything is written, and so
    does a node started in a job step by hand."""
    from fttui.core.base.errors import FttuiError
    from fttui.core.profiles import apply_overrides, load_profile
    from fttui.core.run.slurm import slurmnode
    from fttui.core.run.slurm.allocation import read_allocation
    from tests.unit.test_slurm_env import STEP

    for extra in (["--dry-run"], []):
        out = run_fttui("submit", "--profile", "tiny-lora", "--nodes", "2", "--set", "train.on_oom=shrink", *extra)
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert "train.on_oom = shrink: a Slurm job's node is not retried on its own" in out.stderr
        assert "#SBATCH" not in out.stdout
    assert not (fttui_home / "runs").exists() or not any((fttui_home / "runs").iterdir())
    ok = run_fttui("submit", "--profile", "tiny-lora", "--nodes", "2", "--dry-run", check=True)
    assert "#SBATCH --nodes=2" in ok.stdout
    shrink = apply_overrides(load_profile("tiny-lora"), {"train.on_oom": "shrink"})
    with pytest.raises(FttuiError, match="train.on_oom = shrink: a Slurm job's node is not retried"):
        slurmnode.start_node(shrink, read_allocation(STEP))
    assert not (fttui_home / "runs").exists() or not any((fttui_home / "runs").iterdir())


def test_a_card_name_fttui_does_not_know_is_one_line_listing_the_known_ones(fttui_home):
    """Item 4: `--card "Banana 9000"` passed and the plan had no rate to time it by (before that,
    a CPU's); now `plan` and `estimate` refuse it in one line listing the cards fttui knows, while
    a card of the store's own rows is still taken (its rows time it)."""
    from fttui.core.base.errors import FttuiError
    from fttui.core.models.peaks import card_named

    for cmd in (["estimate", "--profile", "llama2-7b-lora"],
                ["plan", "--profile", "llama2-7b-lora", "--gpus", "1", "--gpu-memory", "80GiB"]):
        out = run_fttui(*cmd, "--card", "Banana 9000")
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert "--card Banana 9000: fttui knows no card of that name (the peak rates it knows: H100 80GB HBM3, " \
               "H100 PCIe, " in out.stderr and "RTX 4090" in out.stderr and out.stdout == ""
    assert card_named("a100 80gb") == "NVIDIA A100 80GB PCIe"  # the price file's example names one card
    assert card_named("banana-9000", stored=["Banana 9000", "cpu"]) == "Banana 9000"  # a card of stored rows
    with pytest.raises(FttuiError, match=r"cards of stored rows: Banana 9000\)$"):
        card_named("Cherry 1", stored=["Banana 9000"])


def test_plan_write_writes_the_setup_asked_for_with_the_settings_it_was_planned_with(tmp_path, monkeypatch):
    """Item 5: `--pick 100` (or 0, -2) quietly wrote another setup, exit 0, and the written profile
    dropped the `--set` values and the host limit the plan was made for."""
    import json

    from fttui.core.profiles import load_profile

    sets = ["data.max_seq_len=48", "lr=1e-4", "model.arch_config.hidden_size=32", "data.source=d/tiny-chat.jsonl"]
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "tiny-chat.jsonl").write_bytes((ROOT / "tests" / "data" / "tiny-chat.jsonl").read_bytes())
    base = ["plan", "--profile", "tiny-lora", *(x for kv in sets for x in ("--set", kv)), "--host-memory-limit", "1GiB"]
    fitting = [o for o in json.loads(run_fttui(*base, "--json", cwd=tmp_path, check=True).stdout) if o["fits"]]
    for pick in ("100", "0", "-2"):
        out = run_fttui(*base, "--write", "p9", "--pick", pick, cwd=tmp_path)
        assert out.returncode == 2 and out.stderr.strip().splitlines() == [
            f"fttui: --pick {pick}: {len(fitting)} setups fit, give 1 to {len(fitting)}; nothing written"], out.stderr
    assert not (tmp_path / "profiles").exists()
    alone = run_fttui("plan", "--profile", "tiny-lora", "--pick", "2", cwd=tmp_path)
    assert alone.returncode == 2 and alone.stderr.count("\n") == 1 and "give --write NAME too" in alone.stderr
    run_fttui(*base, "--write", "p9", "--pick", "2", cwd=tmp_path, check=True)
    written = load_profile(str(tmp_path / "profiles" / "p9.toml"))
    two = fitting[1]
    assert (written.train.batch_size, written.train.grad_accum, written.train.gradient_checkpointing) == (
        two["batch_size"], two["grad_accum"], two["gradient_checkpointing"])
    assert written.data.max_seq_len == 48 and written.train.lr == 1e-4 and written.limits.host_memory == "1GiB"
    monkeypatch.chdir(tmp_path)  # the --set values as the plan read them: the data file from this folder
    planned = load_profile("tiny-lora", sets).to_dict()
    for section in ("model", "data", "lora", "devices"):
        assert written.to_dict()[section] == planned[section], section
    assert written.to_dict()["train"] == {**planned["train"], **{k: two[k] for k in (
        "batch_size", "grad_accum", "gradient_checkpointing")}}


def _finished_run(tmp_path, **row):
    import json

    from fttui.core.run.files.rundir import RunDir

    run = tmp_path / "20261128-020928-python-9b8b"
    run.mkdir()
    (run / "row.json").write_text(json.dumps({"run_id": run.name, "status": "completed", **row}))
    return RunDir(run)


def test_a_finished_runs_summary_says_no_figure_as_a_dash_never_none(tmp_path):
    """Item 7: `fttui attach` of a finished command run printed `steps None/5, samples None`: a
    figure the row lacks (no key at all, or null) is `-` in the run's summary and a job's."""
    from fttui.cli.job_cmd import summary
    from fttui.cli.live import summary_lines

    rd = _finished_run(tmp_path, total_steps=5, wall_s=3.0, command=["python", "train.py"])
    lines = summary_lines(rd)
    assert "  steps -/5  samples -  tokens - (padded -)" in lines, lines
    job = summary(rd)
    assert not any("None" in line for line in job), job
    assert "steps -/5  samples -  samples/s -  peak host RSS - MB" in job[1]


def test_a_time_limit_from_sacct_reads_as_squeue_says_it():
    """Item 7: a time-limit end read from sacct said `(1)` (the completion log's minutes) or
    `(00:01:00)` where squeue said `(1:00)`."""
    from fttui.monitor.slurm import parse_sacct, parse_squeue

    for limit in ("1", "00:01:00"):
        for source in ("sacct", "sacct -c"):
            a = parse_sacct(f"2|TIMEOUT|0:0|2026-11-25T22:00:29|2026-11-25T22:01:50|n[1-2]|{limit}\n", source)
            assert a["2"].cause() == "TIMEOUT: the job reached its time limit (1:00)", (limit, source)
    assert parse_squeue("11|TIMEOUT|TimeLimit|x|n[1-2]|1:00|1:02")["11"].cause().endswith("(1:00)")
    said = {t: parse_sacct(f"2|TIMEOUT|0:0|a|b|n1|{t}")["2"].time_limit
            for t in ("90", "1:30:00", "2-00:00:00", "1-12", "UNLIMITED", "0:30")}
    assert said == {"90": "1:30:00", "1:30:00": "1:30:00", "2-00:00:00": "2-00:00:00", "1-12": "1-12:00:00",
                    "UNLIMITED": "UNLIMITED", "0:30": "0:30"}


def test_a_sigkill_by_hand_under_a_budget_is_no_oom_and_the_evidence_is_named(fttui_home, tmp_path, monkeypatch):
    """Item 6: a worker killed by hand (kill -9) under a 1 GiB budget, host memory at 416 MB, was
    `oom (host-kill)` (any SIGKILL under a budget was) and retried by `--on-oom shrink`. The
    budget is an address-space limit (a process at it fails its allocation, it is not killed), so
    the kill is judged by the kernel's counts of OOM kills, its log, else the memory at the kill,
    and the status says which decided."""
    from fttui.core.profiles import load_profile
    from fttui.core.run.files import rundir
    from fttui.core.run.fold.snapshot import RunSnapshot
    from fttui.core.run.launching.oomretry import decide
    from fttui.core.run.processes.oomkill import KillEvidence
    from fttui.core.run.row.summary import final_status
    from fttui.monitor.snapshots import HostSnapshot

    resolved = load_profile("tiny-lora", ["train.on_oom=shrink", "limits.host_memory=1GiB"])
    rd = rundir.create(resolved.to_dict(), ["python"], {}, kind="run")
    at_416 = RunSnapshot(step=3, host=HostSnapshot(ram_used_mb=416.0, ram_total_mb=16000.0))
    st = final_status(rd, at_416, -9, None)
    assert (st.status, st.oom_kind, st.signal, st.error_step) == ("failed", None, "SIGKILL", 3), st
    assert st.error == ("training process killed by SIGKILL, not taken for the kernel's OOM killer (host memory at "
                        "416 of 16000 MB (3%) at the last sample; no OOM kill count or kernel log could be read)")
    assert not decide(resolved, st, kind="run", attempt=1, phase=None).retry
    full = RunSnapshot(step=3, host=HostSnapshot(ram_used_mb=15800.0, ram_total_mb=16000.0))
    st = final_status(rd, full, -9, None)
    assert (st.status, st.oom_kind) == ("oom", "host-kill") and "host memory at 15800 of 16000 MB (99%)" in st.error
    # a count that could be read decides before the memory does, either way
    none_counted = final_status(rd, full, -9, None, kill=KillEvidence(run_cgroup=0, kernel_log_read=True))
    assert none_counted.status == "failed" and none_counted.error.endswith(
        "(the run's cgroup counted no OOM kill; the kernel log has no OOM kill of the run's processes)")
    counted = final_status(rd, at_416, -9, None, kill=KillEvidence(container=1))
    assert (counted.status, counted.oom_kind) == ("oom", "host-kill")
    assert counted.error == ("killed by SIGKILL: the kernel's OOM killer (the kernel counted 1 OOM kill(s) in fttui's "
                             "memory cgroup during the run)")
    record = "Out of memory: Killed process 4321 (python) total-vm:9000kB, anon-rss:8000kB"
    logged = final_status(rd, at_416, -9, None, kill=KillEvidence(container=0, kernel_log=record, kernel_log_read=True))
    assert logged.status == "oom" and logged.error == f"killed by SIGKILL: the kernel's OOM killer (the kernel log: {record})"
    assert final_status(rd, at_416, -15, None).error == "training process killed by SIGTERM"  # other signals as before


def test_the_kernel_logs_record_of_an_oom_kill_is_found_by_pid(tmp_path, monkeypatch):
    """Item 6: the kernel's own record, read from /dev/kmsg where it can be (``FTTUI_KERNEL_LOG``
    names a file instead): a record of another pid, or an older one, is not the run's."""
    import time

    from fttui.core.run.processes.oomkill import kernel_log_oom_kill, memory_cgroup_oom_count

    log = tmp_path / "kmsg"
    now_us = int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6)
    log.write_text(f"6,10,{now_us - 3_600_000_000},-;Out of memory: Killed process 77 (python) total-vm:1kB\n"
                   f"6,11,{now_us},-;Memory cgroup out of memory: Killed process 99 (python) total-vm:1kB\n"
                   "Out of memory: Killed process 55 (torchrun)\n")
    monkeypatch.setenv("FTTUI_KERNEL_LOG", str(log))
    assert kernel_log_oom_kill({99}, since=time.time() - 60) == (
        True, "Memory cgroup out of memory: Killed process 99 (python) total-vm:1kB")
    assert kernel_log_oom_kill({55}) == (True, "Out of memory: Killed process 55 (torchrun)")
    assert kernel_log_oom_kill({77}, since=time.time() - 60) == (True, None)  # an hour old: another process's
    assert kernel_log_oom_kill({77}) == (True, "Out of memory: Killed process 77 (python) total-vm:1kB")
    assert kernel_log_oom_kill({5}) == (True, None) and kernel_log_oom_kill(set()) == (False, None)
    monkeypatch.setenv("FTTUI_KERNEL_LOG", str(tmp_path / "none"))
    assert kernel_log_oom_kill({99}) == (False, None)
    n = memory_cgroup_oom_count()  # this machine's own count, where it has one
    assert n is None or (isinstance(n, int) and n >= 0)


def test_the_set_values_are_written_as_they_were_stated():
    """Item 5: a written profile states the `--set` values as given (an architecture entry's name,
    not the model_type it resolved to; a module list as a list), a path as resolved."""
    from fttui.core.profiles.overrides import stated_overrides

    resolved = {"model": {"arch": "qwen2"}, "data": {"source": "/abs/d/x.jsonl", "max_seq_len": 512}}
    log = ["model.arch=qwen-7b", "data.source=d/x.jsonl", "data.max_seq_len=512", "lora.target_modules=q_proj,v_proj",
           "model.arch_config.hidden_size=64", "train.lr=1e-4", "train.lr=2e-4"]
    assert stated_overrides(log, resolved) == {
        "model.arch": "qwen-7b", "data.source": "/abs/d/x.jsonl", "data.max_seq_len": 512,
        "lora.target_modules": ["q_proj", "v_proj"], "model.arch_config.hidden_size": 64, "train.lr": 2e-4}


def test_plan_verify_of_several_nodes_is_refused_in_one_line(tmp_path):
    """Item 2's hang in `plan --verify` too: its check runs started node 0 here and waited for the
    others; the plan itself (no --verify) still forecasts the nodes' setup."""
    out = run_fttui("plan", "--profile", "tiny-lora", "--set", "devices.nodes=2", "--verify", "1", cwd=tmp_path,
                    timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "--verify 1: the checks run on one machine, the profile has devices.nodes = 2" in out.stderr
    assert not (tmp_path / "fttui-home" / "runs").exists()
    assert run_fttui("plan", "--profile", "tiny-lora", "--set", "devices.nodes=2", cwd=tmp_path).returncode == 0


def test_the_memory_at_the_kill_is_the_last_sample_while_the_training_lived(fttui_home):
    """Item 6: the supervisor samples once more after the training ended, when the kill has freed
    its memory: the memory that decides is the last sample taken while the training lived."""
    from fttui.core.profiles import load_profile
    from fttui.core.run.files import rundir
    from fttui.core.run.fold.snapshot import RunSnapshot
    from fttui.core.run.processes.oomkill import KillEvidence
    from fttui.core.run.row.summary import final_status
    from fttui.monitor.snapshots import HostSnapshot

    rd = rundir.create(load_profile("tiny-lora").to_dict(), ["python"], {}, kind="run")
    after = RunSnapshot(step=3, host=HostSnapshot(ram_used_mb=900.0, ram_total_mb=16000.0))
    live_full = KillEvidence(ram_used_mb=15900.0, ram_total_mb=16000.0)
    st = final_status(rd, after, -9, None, kill=live_full)
    assert (st.status, st.oom_kind) == ("oom", "host-kill") and "host memory at 15900 of 16000 MB (99%)" in st.error
    live_low = KillEvidence(ram_used_mb=416.0, ram_total_mb=16000.0)
    full_after = RunSnapshot(step=3, host=HostSnapshot(ram_used_mb=15900.0, ram_total_mb=16000.0))
    assert final_status(rd, full_after, -9, None, kill=live_low).status == "failed"


def test_a_short_name_of_several_cards_at_one_peak_rate_resolves():
    """`--card A100` names four cards that train at one peak rate: any of them times the run the
    same (issue 41 item 4); `H100` names three at different rates: one line naming them."""
    from fttui.core.base.errors import FttuiError
    from fttui.core.models.peaks import PRECISIONS, cards_matching, card_named, peak_tflops

    card = card_named("A100")
    assert card in cards_matching("A100") and len(cards_matching("A100")) > 1
    for other in cards_matching("A100"):
        assert [peak_tflops(other, p) for p in PRECISIONS] == [peak_tflops(card, p) for p in PRECISIONS]
    try:
        card_named("H100")
    except FttuiError as e:
        assert "at different peak rates; name one" in str(e)
    else:
        raise AssertionError("H100 resolved")
