"""Command runs without processes: the printed-log parser, OOM lines, the command's checks, its
profile and row profile, a profile's [command] section, and the integration's contract with the core."""

from __future__ import annotations

import io
import os
import stat
import sys

import pytest

from fttui.core.base.errors import FttuiError, ProfileError
from fttui.core.profiles import load_profile
from fttui.core.run.launching import command as cmdrun
from fttui.core.run.supervising.logparse import TrainerLogParser, parse_log_dict, split_segments
from fttui.core.run.row.oomtext import oom_in_text
from fttui.core.run.supervising.logtee import CALLBACK_MARK
from tests.helpers import profile_of


def _tqdm_output(steps: int, log_every: int = 1, final: bool = True) -> tuple[bytes, list[float]]:
    """What a Trainer's ProgressCallback prints: a real tqdm bar (forced to redraw every update)
    with ``tqdm.write`` of the log dicts, as one byte stream (stdout and stderr share the pipe)."""
    from tqdm import tqdm

    out = io.StringIO()
    bar = tqdm(total=steps, file=out, mininterval=0, miniters=1, dynamic_ncols=True)
    losses = []
    for step in range(1, steps + 1):
        bar.update(1)
        if step % log_every == 0:
            loss = 2.0 + 1.0 / step
            losses.append(float(f"{loss:.4g}"))
            bar.write(str({"loss": f"{loss:.4g}", "grad_norm": "1.5", "learning_rate": "5e-05",
                           "epoch": f"{step / steps:.4g}"}), file=out)
    if final:
        bar.write(str({"train_runtime": "2.5", "train_samples_per_second": "12.8", "train_steps_per_second": "3.2",
                       "train_loss": "2.2", "epoch": "1.0"}), file=out)
    bar.close()
    return out.getvalue().encode(), losses


def _parse(data: bytes) -> list[dict]:
    parser, events = TrainerLogParser(), []
    segments, rest = split_segments(data)
    for i, seg in enumerate(segments + ([rest] if rest else [])):
        events += parser.feed(seg.decode(), 100.0 + i)
    return [e.to_dict(sparse=True) for e in events + parser.finish(1000.0)]  # as written: what is known


def test_segments_split_at_newlines_and_carriage_returns():
    assert split_segments(b"a\rb\nc") == ([b"a\r", b"b\n"], b"c")
    assert split_segments(b"") == ([], b"")
    assert b"".join(split_segments(b"x\r\r\ny\rz")[0]) + split_segments(b"x\r\r\ny\rz")[1] == b"x\r\r\ny\rz"


def test_log_dict_numbers_and_strings():
    assert parse_log_dict("{'loss': '2.31', 'epoch': 0.4, 'note': 'x'}") == {"loss": 2.31, "epoch": 0.4}
    assert parse_log_dict("{'loss': 1}") == {"loss": 1.0}
    assert parse_log_dict("not a dict") is None
    assert parse_log_dict("{'a': __import__('os')}") is None  # literals only, never evaluated


@pytest.mark.parametrize("steps, every", [(6, 1), (10, 3)])
def test_bar_and_dicts_give_each_step_and_its_loss(steps, every):
    data, losses = _tqdm_output(steps, every)
    events = _parse(data)
    step_events = [e for e in events if e["event"] == "step"]
    assert [e["step"] for e in step_events] == list(range(1, steps + 1))
    assert all(e["total_steps"] == steps and e["source"] == "log" and e["rank"] == 0 for e in step_events)
    with_loss = [(e["step"], e["loss"]) for e in step_events if "loss" in e]
    assert with_loss == [(s, l) for s, l in zip(range(every, steps + 1, every), losses)]
    end = [e for e in events if e["event"] == "end"]
    assert len(end) == 1 and end[0]["train_time"] == 2.5 and end[0]["samples"] == 32 and end[0]["step"] == steps


def test_no_bar_no_steps_but_the_end():
    text = "{'loss': '2.3', 'epoch': '0.5'}\n{'train_runtime': '4.0', 'train_samples_per_second': '2.0'}\n"
    events = _parse(text.encode())
    assert [e["event"] for e in events] == ["end"] and events[0]["samples"] == 8


def test_other_bars_and_eval_are_kept_apart():
    data, _ = _tqdm_output(4, final=False)
    before = (b"\rMap:  50%|#####     | 32/64 [00:00<00:00]\r  0%|          | 0/9 [00:00<?, ?it/s]"
              b"\r100%|##########| 9/9 [00:01<00:00]\n")  # a data bar, and one without a description
    evald = b"\r  0%|          | 0/3 [00:00<?, ?it/s]\r100%|##########| 3/3 [00:00<00:00]\n" \
            b"{'eval_loss': '1.75', 'eval_runtime': '0.3'}\n"
    events = _parse(before + data + evald)
    assert [e["step"] for e in events if e["event"] == "step"] == [1, 2, 3, 4]
    evals = [e for e in events if e["event"] == "eval"]
    assert len(evals) == 1 and evals[0]["eval_loss"] == 1.75


def test_step_log_with_speed_is_not_the_end():
    """With include_num_input_tokens_seen a step's log carries train_runtime too."""
    text = ("\r  0%|          | 0/2 [00:00<?, ?it/s]\r{'loss': '6.2', 'num_input_tokens_seen': 74, "
            "'train_runtime': '0.02'}\n\r 50%|#####     | 1/2 [00:00<00:00]\r{'loss': '6.1', "
            "'num_input_tokens_seen': 141, 'train_runtime': '0.03'}\n\r100%|##########| 2/2 [00:00<00:00]\n")
    events = _parse(text.encode())
    assert [(e["event"], e.get("loss"), e.get("tokens")) for e in events] == [("step", 6.2, 74), ("step", 6.1, 141)]


@pytest.mark.parametrize("line, kind", [
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
     "you tried to allocate 131072000 bytes.", "cpu"),
    ("MemoryError", "cpu"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "cuda"),
    ("torch.distributed.DistBackendError: NCCL error: out of memory", "nccl"),
])
def test_oom_lines(line, kind):
    assert oom_in_text(f"Traceback (most recent call last):\n  ...\n{line}\n") == (kind, line)


def test_no_oom_in_an_ordinary_failure():
    assert oom_in_text("Traceback (most recent call last):\nValueError: bad shape\n") is None


def test_check_command(tmp_path):
    with pytest.raises(FttuiError, match="empty command"):
        cmdrun.check_command([], tmp_path)
    with pytest.raises(FttuiError, match="command not found: nope-fttui"):
        cmdrun.check_command(["nope-fttui"], tmp_path)
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(FttuiError, match="not executable"):
        cmdrun.check_command(["./run.sh"], tmp_path)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    assert cmdrun.check_command(["./run.sh", "x"], tmp_path) == ["./run.sh", "x"]
    assert cmdrun.check_command([sys.executable, "t.py"], tmp_path)[0] == sys.executable


@pytest.mark.parametrize("argv, name", [
    (["python", "train.py"], "train"), (["torchrun", "--nproc-per-node=2", "sft/run_sft.py", "--x"], "run_sft"),
    (["accelerate", "launch", "a.py"], "a"), (["python", "-m", "pkg.trainer"], "trainer"), (["./go"], "go"),
])
def test_command_name(argv, name):
    assert cmdrun.command_name(argv) == name


def test_command_env_and_profile(tmp_path):
    env = cmdrun.command_env(tmp_path / "r", environ={"PYTHONPATH": "/x"})
    assert env[cmdrun.RUN_DIR_ENV] == str(tmp_path / "r")
    assert env["PYTHONPATH"] == f"{cmdrun.autoload_dir()}{os.pathsep}/x"
    assert (cmdrun.autoload_dir() / "sitecustomize.py").is_file()
    off = cmdrun.command_env(tmp_path / "r", environ={cmdrun.INJECT_ENV: "0"})
    assert off[cmdrun.INJECT_ENV] == "0" and "PYTHONPATH" not in off
    prof = cmdrun.command_profile(["python", "t.py"], cwd=str(tmp_path), host_memory="2GiB")
    assert prof.name == "t" and prof.command.to_dict() == {"argv": ["python", "t.py"], "cwd": str(tmp_path)}
    assert prof.limits.host_memory == "2GiB"
    assert cmdrun.command_text(prof) == f"python t.py   (in {tmp_path})"
    assert cmdrun.command_text(load_profile("tiny-lora")) is None


def test_row_profile_takes_only_what_the_trainer_told():
    told = {"method": "lora", "sharding": "none", "model": {"name_or_path": "org/m"},
            "train": {"precision": "bf16", "gradient_checkpointing": True}, "devices": {"gpus": 2, "nodes": 1}}
    row = cmdrun.row_profile(profile_of({"name": "x", "limits": {"host_memory": "1GiB"}}), told, cards_used=0)
    assert row.method == "lora" and row.model.name_or_path == "org/m" and row.devices.gpus == 2
    assert row.train.batch_size is None and row.limits.host_memory == "1GiB"
    bare = cmdrun.row_profile(profile_of({"name": "x"}), None, cards_used=1)
    assert bare.method is None and bare.train.precision is None and bare.devices.gpus == 1


def test_profile_with_a_command(tmp_path):
    (tmp_path / "sub").mkdir()
    path = tmp_path / "cmd.toml"
    path.write_text('# fttui run --profile cmd\n[command]\nargv = ["python", "train.py"]\ncwd = "sub"\n')
    resolved = load_profile(str(path))
    assert resolved.command.to_dict() == {"argv": ["python", "train.py"], "cwd": str((tmp_path / "sub").resolve())}
    assert load_profile("tiny-lora").command.to_dict() == {"argv": None, "cwd": None}
    path.write_text('# fttui run --profile cmd\n[command]\nargv = "python train.py"\n')
    with pytest.raises(ProfileError, match="command.argv"):
        load_profile(str(path))
    path.write_text('# fttui run --profile cmd\n[command]\nargv = ["python"]\ncwd = "nowhere"\n')
    with pytest.raises(ProfileError, match="folder not found"):
        load_profile(str(path))


def test_integration_names_match_the_core():
    hf = pytest.importorskip("fttui.integrations.hf")
    assert hf.RUN_DIR_ENV == cmdrun.RUN_DIR_ENV and hf.CALLBACK_MARK == CALLBACK_MARK


def test_callback_without_run_dir_does_nothing(tmp_path, monkeypatch):
    hf = pytest.importorskip("fttui.integrations.hf")
    monkeypatch.delenv(cmdrun.RUN_DIR_ENV, raising=False)
    cb = hf.FttuiCallback()
    assert cb.run_dir is None
    cb.on_train_begin(None, None, None)
    assert not cb.active and list(tmp_path.iterdir()) == []


def test_hook_failure_is_swallowed_and_logged(tmp_path):
    """A broken transformers.trainer hook (here: the integration file missing) never stops the
    script: one line on stderr, the traceback in integration.log."""
    import shutil
    import subprocess

    autoload = tmp_path / "integrations" / "autoload"
    autoload.mkdir(parents=True)
    shutil.copy(cmdrun.autoload_dir() / "sitecustomize.py", autoload)  # no hf.py beside it
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    # the packages a Trainer script never uses hidden, as tests/e2e/command_scripts/trainer_script.py
    # does (about 2.5 CPU-s of imports; the hook is on transformers.trainer)
    code = ("import sys; [sys.modules.setdefault(m, None) for m in ('bitsandbytes', 'deepspeed', 'mlflow')]\n"
            "import transformers.trainer as t; print('trained', t.Trainer.__name__)")
    env = {**os.environ, "PYTHONPATH": str(autoload), cmdrun.RUN_DIR_ENV: str(run_dir)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "trained Trainer" in proc.stdout, proc.stderr
    assert "fttui's Trainer hook failed" in proc.stderr
    assert "Traceback" in (run_dir / "integration.log").read_text()
    assert not (run_dir / "events.jsonl").exists()


# issue 28, item 1: a full disk never blocks the training --------------------------------------

class _FullDisk:
    """A log file on a disk that fills up after ``room`` bytes."""

    def __init__(self, room: int) -> None:
        self.room, self.written = room, 0

    def write(self, data: bytes) -> int:
        import errno

        if self.written + len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.written += len(data)
        return len(data)


def test_full_disk_log_is_reported_once_and_the_output_still_drained(tmp_path):
    """The command writes 16 MB through its pipe; the log takes 4 KiB, then every write fails:
    the pump reports 'disk full writing train.log' once and drains the rest, so the command
    finishes (before the fix the pump stopped and the command blocked on its full pipe)."""
    import subprocess
    import threading

    from fttui.core.base.redact import Redactor
    from fttui.core.run.supervising.logtee import Reporter, _pump

    r, w = os.pipe()
    report = Reporter(w)
    child = subprocess.Popen([sys.executable, "-c", "import os\nfor _ in range(16384): os.write(1, b'z' * 1023 + b'\\n')"],
                             stdout=subprocess.PIPE)
    pump = threading.Thread(target=_pump, args=(child.stdout, _FullDisk(4096), Redactor({}), None, report),
                            daemon=True)
    pump.start()
    assert child.wait(timeout=120) == 0  # never blocked on its output
    pump.join(timeout=60)
    assert not pump.is_alive()
    os.close(w)
    lines = os.read(r, 65536).decode().splitlines()
    os.close(r)
    assert len(lines) == 1 and '"disk full writing train.log"' in lines[0], lines


def test_a_failing_source_is_said_once_and_the_others_go_quiet(tmp_path, capsys, monkeypatch):
    """A source that raises (the event-file poller here) turns the command's progress reading off
    with one stderr line naming what failed; before, the poller went quiet without a word."""
    from fttui.core.run.files.rundir import RunDir
    from fttui.core.run.supervising.logtee import _LogEvents

    monkeypatch.setenv("FTTUI_TB", "0")
    events = _LogEvents(RunDir(tmp_path), root=tmp_path)

    def broken(t: float) -> list:
        raise ValueError("a damaged event file")

    monkeypatch.setattr(events.parser, "poll", broken)
    events.poll()
    events.poll()
    events.feed(b"{'loss': 1.0}\n")
    err = capsys.readouterr().err.splitlines()
    assert err == ["fttui: reading progress from the event files stopped: ValueError('a damaged event file')"]
    assert events.off and not (tmp_path / "events.jsonl").exists()
