"""End to end: `fttui run -- CMD` supervises any command (issue 17, parts 1 and 2).

Real commands on tiny CPU models: a plain Trainer script whose Trainer gets fttui's callback
without a line of its own (the sitecustomize hook), the same script with the one-line callback,
its printed log only, a script that only prints Trainer-style lines, an OOM under the host memory
limit, cancel (of the printing script, with a child), bad input, a profile holding the command, and
two torchrun ranks (with the one-line callback and the injection both on: one run for the torchrun
test and the report-once test). Every figure of the row is compared with what the script's own
Trainer says (its state written to a file).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from fttui.core.run.files.events import read_jsonl
from fttui.core.run.processes.proctree import group_alive
from tests.conftest import ROOT, fttui_env, run_fttui
from tests.e2e.shared_runs import home_env, shared_home
from tests.helpers import only_run_dir, processes_mentioning, wait_for

pytestmark = pytest.mark.e2e
#: the tests of the torchrun run share an xdist group (one run, built once)
TORCHRUN = pytest.mark.xdist_group("command-torchrun")

SCRIPTS = Path(__file__).resolve().parent / "command_scripts"
BATCH, ACCUM = 2, 2  # trainer_script.py's per-device batch and accumulation


def _run(tmp_path, *args, env=None, timeout=240):
    cwd = tmp_path / "work"
    cwd.mkdir(exist_ok=True)
    return run_fttui("run", "--headless", *args, cwd=cwd, env=env or fttui_env(), timeout=timeout)


def _row(home, env: dict | None = None) -> dict:
    rows = json.loads(run_fttui("results", "--format", "json", env=env, check=True).stdout)
    assert len(rows) == 1, rows
    return rows[0]


def _events(run_dir: Path, event: str) -> list[dict]:
    return [e for e in read_jsonl(run_dir / "events.jsonl") if e.get("event") == event]


def _trainer_run(tmp_path, fttui_home, steps: int, **env_extra):
    state_file = tmp_path / "state.json"
    env = fttui_env(STEPS=str(steps), STATE_FILE=str(state_file), OUT_DIR=str(tmp_path / "out"), **env_extra)
    proc = _run(tmp_path, "--", sys.executable, str(SCRIPTS / "trainer_script.py"), env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(state_file.read_text()), _row(fttui_home), only_run_dir(fttui_home)


def _check_trainer_row(row, state, run_dir, source):
    """The row's figures against the script's own Trainer, two ways each."""
    steps = state["global_step"]
    assert row["kind"] == "command" and row["status"] == "completed" and row["profile"] == "trainer_script"
    assert row["steps"] == row["total_steps"] == steps > 0
    # samples: the Trainer's steps x batch x accumulation, and its own train_samples_per_second x runtime
    m = state["metrics"]
    assert row["samples"] == steps * BATCH * ACCUM
    assert row["samples"] == pytest.approx(m["train_samples_per_second"] * m["train_runtime"], rel=0.01)
    # tokens: the Trainer's own non-padding count, and the last step event's
    assert row["tokens"] == state["num_input_tokens_seen"] == _events(run_dir, "step")[-1]["tokens"]
    # loss: the last step's, as the Trainer logged it (logging_steps = 1)
    logged = [h["loss"] for h in state["log_history"] if "loss" in h]
    assert len(logged) == steps
    last = _events(run_dir, "step")[-1]
    assert last["loss"] == pytest.approx(logged[-1], rel=1e-6)
    assert row["loss"] == pytest.approx(logged[-1], rel=1e-5)
    # samples/s over the whole run against the Trainer's own figure (it counts its preparation too)
    assert row["samples_per_s_avg"] == pytest.approx(m["train_samples_per_second"], rel=0.10)
    assert row["model"] == "llama (from config)" and row["method"] == "full" and row["precision"] == "fp32"
    assert row["batch_size"] == BATCH and row["grad_accum"] == ACCUM and row["world_size"] == 1
    assert row["gpu"] == "cpu" and row["peak_host_rss_mb"] > 0
    sources = {e.get("source") for e in _events(run_dir, "step")}
    assert sources == {source}, sources
    assert (run_dir / "callback.json").exists()
    assert not (run_dir / "integration.log").exists()


def test_plain_trainer_script_gets_the_callback_injected(tmp_path, fttui_home):
    proc, state, row, run_dir = _trainer_run(tmp_path, fttui_home, steps=12)
    _check_trainer_row(row, state, run_dir, "injected")
    cmd = json.loads((run_dir / "command.json").read_text())
    assert cmd["kind"] == "command" and cmd["cwd"] == str(tmp_path / "work")
    assert "{'loss':" in proc.stdout  # the headless view shows the command's own output
    assert "COMPLETED" in proc.stdout
    assert "{'loss':" in (run_dir / "train.log").read_text()
    phases = [e["phase"] for e in _events(run_dir, "phase")]
    assert phases == ["loading-model", "first-step"]
    pid = _events(run_dir, "start")[0]["pid"]  # `fttui stacks`: the callback set the SIGUSR1 dump up
    assert [p.name for p in (run_dir / "stacks").iterdir()] == [f"rank-0-pid-{pid}.txt"]


def test_one_line_callback_without_injection(tmp_path, fttui_home):
    _proc, state, row, run_dir = _trainer_run(tmp_path, fttui_home, steps=8, WITH_CALLBACK="1", FTTUI_INJECT="0")
    _check_trainer_row(row, state, run_dir, "callback")
    assert "PYTHONPATH" not in json.loads((run_dir / "command.json").read_text())["env"]


def test_trainer_log_lines_only(tmp_path, fttui_home):
    """Injection off, no callback: the steps and losses come from the printed bar and dicts."""
    _proc, state, row, run_dir = _trainer_run(tmp_path, fttui_home, steps=9, FTTUI_INJECT="0")
    steps = _events(run_dir, "step")
    assert {e["source"] for e in steps} == {"log"} and not (run_dir / "callback.json").exists()
    assert [e["step"] for e in steps] == list(range(1, state["global_step"] + 1))
    logged = [h["loss"] for h in state["log_history"] if "loss" in h]
    assert [e["loss"] for e in steps] == [float(f"{x:.4g}") for x in logged]  # the Trainer prints 4 digits
    assert row["loss"] == float(f"{logged[-1]:.4g}")
    assert row["steps"] == row["total_steps"] == state["global_step"]
    assert row["tokens"] == state["num_input_tokens_seen"]  # logged by the Trainer (include_num_input_tokens_seen)
    m = state["metrics"]
    assert row["samples"] == round(float(f"{m['train_samples_per_second']:.4g}") * float(f"{m['train_runtime']:.4g}"))
    assert row["samples"] == pytest.approx(state["global_step"] * BATCH * ACCUM, rel=0.01)
    assert row["model"] is None and row["method"] is None  # the log does not tell them


def test_printed_trainer_lines_without_transformers(tmp_path, fttui_home):
    state_file = tmp_path / "state.json"
    proc = _run(tmp_path, "--name", "printer", "--", sys.executable, str(SCRIPTS / "log_lines_script.py"),
                env=fttui_env(STEPS="7", STATE_FILE=str(state_file)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    state = json.loads(state_file.read_text())
    run_dir = only_run_dir(fttui_home)
    steps = _events(run_dir, "step")
    assert [e["step"] for e in steps] == list(range(1, state["steps"] + 1))
    assert [e["loss"] for e in steps] == state["losses"]
    assert all(e["total_steps"] == state["steps"] for e in steps)
    row = _row(fttui_home)
    assert row["loss"] == state["losses"][-1]
    assert row["profile"] == "printer" and row["kind"] == "command"
    assert row["steps"] == state["steps"] and row["total_steps"] == state["steps"]
    assert row["duration_s"] == pytest.approx(float(f"{state['runtime']:.4g}"), abs=0.006)  # the row keeps 2 decimals
    assert row["status"] == "completed" and row["exit_code"] == 0


@pytest.mark.parametrize("inject", ["1", "0"], ids=["injected-error-event", "read-from-output"])
def test_out_of_host_memory_is_an_oom_row(tmp_path, fttui_home, inject):
    state_file = tmp_path / "state.json"
    env = fttui_env(STEPS="4", BIG="1", STATE_FILE=str(state_file), FTTUI_INJECT=inject)
    proc = _run(tmp_path, "--host-memory-limit", "1400MiB", "--", sys.executable, str(SCRIPTS / "trainer_script.py"),
                env=env)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not state_file.exists()  # the script never finished
    row = _row(fttui_home)
    assert row["kind"] == "command" and row["status"] == "oom" and row["oom_kind"] == "cpu", row
    assert "can't allocate memory" in row["error"]
    run_dir = only_run_dir(fttui_home)
    cmd = json.loads((run_dir / "command.json").read_text())
    assert cmd["host_limit_bytes"] == 1400 * 2**20
    errors = _events(run_dir, "error")
    assert len(errors) == (1 if inject == "1" else 0)
    assert "can't allocate memory" in (run_dir / "train.log").read_text()
    if inject == "1":  # the injected callback's phase marks: report_error names the phase (issue 44)
        assert (errors[0]["phase"], errors[0]["phase_step"]) == (row["oom_phase"], 1), errors[0]
        assert row["oom_phase"] == "backward"  # the big model's gradients (250 MiB of embedding and output layer)
        # a command's launch makes no estimate: the row says the phase and that
        assert row["oom_explained"].startswith("backward of step 1, longest sequence ")
        assert row["oom_explained"].endswith(": no estimate was recorded at launch to set against it")
    else:
        assert row["oom_phase"] is None


def test_cancel_leaves_no_process(tmp_path, fttui_home):
    """A command that prints Trainer lines and has a child process of its own, cancelled after its
    first step: no process of it is left. (The script imports no torch: the cancel ends the
    command's processes whatever they run, and a Trainer process costs ~8 CPU-s to start.)"""
    token = f"fttui-cancel-{secrets.token_hex(4)}"
    work = tmp_path / "work"
    work.mkdir()
    env = fttui_env(STEPS="100000", CHILD_TOKEN=token, STATE_FILE=str(tmp_path / "state.json"))
    proc = subprocess.Popen([sys.executable, "-m", "fttui", "run", "--detach", "--", sys.executable,
                             str(SCRIPTS / "log_lines_script.py")], cwd=work, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    run_id = out.strip()
    run_dir = fttui_home / "runs" / run_id
    wait_for(lambda: _events(run_dir, "step"), timeout=120, what="a training step")
    assert processes_mentioning(token), "the script's child should be running"
    sup = json.loads((run_dir / "supervisor.json").read_text())
    out = run_fttui("cancel", run_id, check=True)
    assert "cancelled" in out.stdout
    assert json.loads((run_dir / "status.json").read_text())["status"] == "cancelled"
    wait_for(lambda: not processes_mentioning(token) and not processes_mentioning(str(run_dir)), timeout=30,
             what="every process of the command to end")
    assert not group_alive(sup["train_pgid"])  # the command's process group is gone (zombies count as gone)
    assert _row(fttui_home)["status"] == "cancelled"


@pytest.mark.parametrize("argv, says", [
    (["--"], "empty command"),
    (["--", "no-such-program-fttui"], "command not found: no-such-program-fttui"),
    (["--", "./missing_script.sh"], "command not found: ./missing_script.sh"),
    (["--name", "x"], "--name names a command run"),
    (["--profile", "tiny-lora", "--", "python3", "x.py"], "takes no --profile"),
    (["--gpu-memory-limit", "1GiB", "--", "python3", "x.py"], "cannot be capped"),
])
def test_bad_command_one_line_exit_2_nothing_written(tmp_path, fttui_home, argv, says):
    proc = _run(tmp_path, *argv)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr
    assert not (fttui_home / "runs").exists() or not any((fttui_home / "runs").iterdir())
    assert not (fttui_home / "results.sqlite").exists()


def test_profile_holding_a_command(tmp_path, fttui_home):
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "scripted.toml").write_text(
        "# fttui run --profile scripted\n# a command in a profile: fttui's printer script\n"
        f"[command]\nargv = [{json.dumps(sys.executable)}, {json.dumps(str(SCRIPTS / 'log_lines_script.py'))}]\n"
        'cwd = "."\n')
    state_file = tmp_path / "state.json"
    proc = run_fttui("run", "--headless", "--profile", str(folder / "scripted.toml"), cwd=ROOT,
                     env=fttui_env(STEPS="3", STATE_FILE=str(state_file)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = only_run_dir(fttui_home)
    assert json.loads((run_dir / "command.json").read_text())["cwd"] == str(folder)
    row = _row(fttui_home)
    assert row["kind"] == "command" and row["profile"] == "scripted" and row["steps"] == 3
    assert row["batch_size"] is None and row["method"] is None  # the profile's defaults are no statement


@pytest.fixture(scope="module")
def torchrun_run(tmp_path_factory):
    """trainer_script.py under torchrun, two CPU ranks, 6 steps, with its one-line callback and
    the injection both on (each step must still be reported once)."""
    with shared_home(tmp_path_factory, "command-torchrun") as home:
        tmp = home.parent
        state_file = tmp / "state.json"
        env = home_env(home, STEPS="6", WITH_CALLBACK="1", STATE_FILE=str(state_file), OUT_DIR=str(tmp / "out"))
        proc = _run(tmp, "--", sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                    str(SCRIPTS / "trainer_script.py"), env=env, timeout=400)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        yield {"state": json.loads(state_file.read_text()), "row": _row(home, env), "run_dir": only_run_dir(home)}


@pytest.mark.slow
@TORCHRUN
def test_torchrun_two_cpu_ranks(torchrun_run):
    state, row, run_dir = torchrun_run["state"], torchrun_run["row"], torchrun_run["run_dir"]
    assert state["world_size"] == 2
    assert {e["rank"] for e in _events(run_dir, "step")} == {0, 1}
    ranks = {e["rank"]: e["pid"] for e in _events(run_dir, "start")}  # each rank's SIGUSR1 dump file
    assert sorted(p.name for p in (run_dir / "stacks").iterdir()) == [f"rank-{r}-pid-{ranks[r]}.txt" for r in (0, 1)]
    assert row["world_size"] == 2 and row["steps"] == state["global_step"] == 6
    assert row["samples"] == state["global_step"] * BATCH * ACCUM * 2
    m = state["metrics"]
    assert row["samples"] == pytest.approx(m["train_samples_per_second"] * m["train_runtime"], rel=0.01)
    assert row["tokens"] == state["num_input_tokens_seen"]  # gathered over both ranks by the Trainer
    assert not processes_mentioning(str(run_dir))


@pytest.mark.slow
@TORCHRUN
def test_callback_line_and_injection_report_once(torchrun_run):
    """The script's own callback line and the injected callback in one Trainer (on the torchrun
    run: each rank's): every step is reported once, by the injected one, and the figures are the
    Trainer's, not twice them."""
    state, row, run_dir = torchrun_run["state"], torchrun_run["row"], torchrun_run["run_dir"]
    steps = _events(run_dir, "step")
    assert {e.get("source") for e in steps} == {"injected"}
    for rank in (0, 1):
        assert [e["step"] for e in steps if e["rank"] == rank] == list(range(1, 7)), rank
    assert (run_dir / "callback.json").exists() and not (run_dir / "integration.log").exists()
    assert row["kind"] == "command" and row["status"] == "completed"
    assert row["steps"] == row["total_steps"] == state["global_step"] == 6
    assert row["samples"] == state["global_step"] * BATCH * ACCUM * 2
    assert row["tokens"] == state["num_input_tokens_seen"]
    # the losses: each rank's own, once a step; the Trainer logs their mean (logging_steps = 1)
    logged = [h["loss"] for h in state["log_history"] if "loss" in h]
    assert len(logged) == 6
    by_step = {}
    for e in steps:
        by_step.setdefault(e["step"], []).append(e["loss"])
    assert [sum(v) / len(v) for _, v in sorted(by_step.items())] == pytest.approx(logged, rel=1e-5)
    # the row's: the last step's of the lowest rank (docs/architecture.md)
    assert row["loss"] == pytest.approx([e for e in steps if e["rank"] == 0][-1]["loss"], rel=1e-5)


@pytest.mark.parametrize("argv", [
    ["-c", "print('hello')"],
    [str(SCRIPTS / "plain_loop_script.py"), "--steps", "20"],
    [str(SCRIPTS / "plain_loop_script.py"), "--help"],
], ids=["print", "plain-loop", "help"])
def test_command_without_a_trainer_that_exits_0_is_completed(tmp_path, fttui_home, argv):
    """Exit 0 is a command's success, Trainer or not (issue 27.1): completed, fttui exits 0, the
    row leaves the training figures it never saw empty and says in words that no training was seen."""
    proc = _run(tmp_path, "--", sys.executable, *argv)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = _row(fttui_home)
    assert row["status"] == "completed" and row["exit_code"] == 0 and row["kind"] == "command"
    assert row["error"].startswith("no training seen")
    for key in ("steps", "total_steps", "samples", "tokens", "samples_per_s", "duration_s", "world_size",
                "batch_size", "effective_batch", "model", "method", "gradient_checkpointing", "loss"):
        assert row[key] is None, (key, row[key])
    assert row["peak_host_rss_mb"] > 0 and row["wall_s"] > 0  # what fttui measured itself
    out = proc.stdout
    assert "COMPLETED: no training seen" in out and "FAILED" not in out
    assert "None" not in out and "parameters trainable" not in out  # no "None steps, world size None"
    status = json.loads((only_run_dir(fttui_home) / "status.json").read_text())
    assert status["status"] == "completed"


def test_two_processes_claiming_one_rank_are_flagged_and_both_counted(tmp_path, fttui_home):
    """Two Trainer processes that each say rank 0 of world size 1 (the launcher's rank variables
    dropped; issue 27.2): the live view and the row say so, and both processes' steps and samples
    are counted, never folded into one."""
    state = tmp_path / "state.json"
    env = fttui_env(STEPS="5", STATE_FILE=str(state), OUT_DIR=str(tmp_path / "out"))
    proc = _run(tmp_path, "--", sys.executable, str(SCRIPTS / "two_copies_script.py"), env=env, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    states = [json.loads((tmp_path / f"state.json.{k}").read_text()) for k in range(2)]
    assert [s["world_size"] for s in states] == [1, 1]  # each process's own Trainer: world size 1
    run_dir = only_run_dir(fttui_home)
    starts = _events(run_dir, "start")
    assert len(starts) == 2 and {e["rank"] for e in starts} == {0} and len({e["pid"] for e in starts}) == 2
    row = _row(fttui_home)
    assert row["samples"] == sum(s["global_step"] for s in states) * BATCH * ACCUM  # both, not one
    assert row["tokens"] == sum(s["num_input_tokens_seen"] for s in states)
    assert row["world_size"] == 2
    clash = row["mismatch"]["world_size"]
    assert (clash["stated"], clash["observed"]) == (1, 2) and "RANK CLASH" in clash["note"]
    assert "rank 0" in clash["note"] and all(str(e["pid"]) in clash["note"] for e in starts)
    assert "RANK CLASH: 2 processes each report rank 0" in proc.stdout
