"""End to end: what a command tells fttui by itself, without fttui's callback (issue 42), under the
real `fttui run -- CMD` with `FTTUI_INJECT=0` where Lightning would otherwise get the callback:

- Lightning's own `BoringModel` with Lightning's TQDM bar (a validation loop and the sanity check
  draw their own bars; the bar restarts each epoch): the row's steps are the Trainer's global step,
  its total the `max_steps` the fit says it stopped at;
- Lightning's own `LightningLSTM` with Lightning's `TensorBoardLogger`: with the TQDM bar the steps
  come from the bar and the loss from the event file (the `train_loss` it logged, exact); with
  Lightning's default bar (Rich's, which draws nothing to a pipe) both come from the event file;
- a plain accelerate loop in the shape of transformers' `run_clm_no_trainer.py --with_tracking`
  (a tiny random GPT-2 from a config, a local tokenizer, a generated train file): steps and total
  from its tqdm bar, the loss from accelerate's TensorBoard tracker;
- a plain PyTorch loop writing `Loss/train` with `SummaryWriter` and printing nothing.

Each row says which source gave each figure (`sources`), and the headless view shows the steps
and the loss.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from fttui.core.run.files.events import read_jsonl
from tests.conftest import fttui_env, run_fttui
from tests.helpers import only_run_dir, wikitext_folder

pytestmark = pytest.mark.e2e

SCRIPTS = Path(__file__).resolve().parent / "command_scripts"


def _run(tmp_path: Path, cwd: Path, argv: list[str], **env_extra: str):
    env = fttui_env(STATE_FILE=str(tmp_path / "state.json"), **env_extra)
    proc = run_fttui("run", "--headless", "--", sys.executable, *argv, cwd=cwd, env=env, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(run_fttui("results", "--format", "json", check=True).stdout)
    assert len(rows) == 1, rows
    return proc, rows[0], json.loads((tmp_path / "state.json").read_text())


def _steps(fttui_home) -> list[dict]:
    return [e for e in read_jsonl(only_run_dir(fttui_home) / "events.jsonl") if e.get("event") == "step"]


def _headless_shows(proc, steps: int, loss: bool) -> None:
    assert f"step {steps}/{steps}" in proc.stdout and "COMPLETED" in proc.stdout
    assert "no training seen" not in proc.stdout
    status_lines = [line for line in proc.stdout.splitlines() if line.startswith("step ")]
    assert status_lines and any("loss " in line for line in status_lines) == loss
    assert "read from: steps=" in proc.stdout  # the summary names the sources


def test_lightning_tqdm_bar_over_epochs_with_validation_gives_the_steps(tmp_path, fttui_home):
    pytest.importorskip("lightning", reason="SKIPPED LOUDLY: lightning is not installed (test extras)")
    cwd = tmp_path / "work"
    cwd.mkdir()
    proc, row, state = _run(tmp_path, cwd, [str(SCRIPTS / "lightning_bar_fit.py")], FTTUI_INJECT="0",
                            MODEL="boring", BAR="tqdm", STEPS="25", BATCHES="10")
    assert state["bar"] == "TQDMProgressBar" and "FttuiLightningCallback" not in state["callbacks"]
    assert state["epochs"] >= 2  # the bar restarted
    assert row["status"] == "completed" and row["error"] is None
    assert row["steps"] == row["total_steps"] == state["global_step"] == 25
    assert row["sources"] == "steps=log" and row["loss"] is None  # BoringModel logs nothing
    assert [e["step"] for e in _steps(fttui_home)] == list(range(1, 26))
    _headless_shows(proc, 25, loss=False)


@pytest.mark.parametrize("bar", ["tqdm", "default"])
def test_lightning_tensorboard_logger_gives_the_exact_loss(tmp_path, fttui_home, bar):
    pytest.importorskip("lightning", reason="SKIPPED LOUDLY: lightning is not installed (test extras)")
    pytest.importorskip("tensorboard", reason="SKIPPED LOUDLY: tensorboard is not installed (test extras)")
    proc, row, state = _run(tmp_path, wikitext_folder(tmp_path / "work"), [str(SCRIPTS / "lightning_bar_fit.py")],
                            FTTUI_INJECT="0", MODEL="lstm", BAR=bar, TB="1", STEPS="10", BATCHES="4")
    logged = state["logged"]
    assert state["global_step"] == len(logged) == 10 and state["epochs"] >= 2
    assert row["steps"] == row["total_steps"] == 10 and row["status"] == "completed"
    assert row["loss"] == pytest.approx(logged[-1], rel=1e-6)
    steps = _steps(fttui_home)
    assert [e["step"] for e in steps] == list(range(1, 11))
    if state["bar"] == "TQDMProgressBar":
        assert row["sources"] == "steps=log loss=tensorboard"
        assert [e["loss"] for e in steps] == pytest.approx(logged, rel=5e-3)  # printed: 3 digits
        exact = [e for e in steps if e.get("loss_source") == "tensorboard"]
        assert exact and exact[-1]["step"] == 10
        assert [e["loss"] for e in exact] == pytest.approx([logged[e["step"] - 1] for e in exact], rel=1e-6)
    else:  # Rich's bar: nothing drawn to the pipe until the end
        assert state["bar"] == "RichProgressBar"
        assert row["sources"] == "steps=tensorboard loss=tensorboard"
        assert [e["loss"] for e in steps] == pytest.approx(logged, rel=1e-6)
    _headless_shows(proc, 10, loss=True)


def _clm_files(folder: Path) -> None:
    """A generated train file, a tiny GPT-2 config and a local word-level tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, PreTrainedTokenizerFast

    rng = random.Random(0)
    words = [f"w{i}" for i in range(100)]
    (folder / "train.txt").write_text("\n".join(" ".join(rng.choice(words) for _ in range(16))
                                                for _ in range(120)) + "\n")
    vocab = {"[UNK]": 0, "[EOS]": 1, **{w: i + 2 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="[EOS]",
                            pad_token="[EOS]").save_pretrained(folder / "tok")
    GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=64, vocab_size=len(vocab), bos_token_id=1,
               eos_token_id=1).save_pretrained(folder / "cfg")


def test_accelerate_loop_with_tracking_gives_its_logged_train_loss(tmp_path, fttui_home):
    pytest.importorskip("accelerate", reason="SKIPPED LOUDLY: accelerate is not installed (test extras)")
    pytest.importorskip("tensorboard", reason="SKIPPED LOUDLY: tensorboard is not installed (test extras)")
    cwd = tmp_path / "work"
    cwd.mkdir()
    _clm_files(cwd)
    proc, row, state = _run(tmp_path, cwd, [str(SCRIPTS / "clm_no_trainer_loop.py"), "--train_file", "train.txt",
                                            "--config_name", "cfg", "--tokenizer_name", "tok", "--with_tracking",
                                            "--output_dir", "out", "--num_train_epochs", "2"])
    steps = state["completed_steps"]
    assert steps == state["max_train_steps"] and len(state["logged"]) == 2  # one log per epoch
    assert row["steps"] == row["total_steps"] == steps and row["status"] == "completed"
    assert row["sources"] == "steps=log loss=tensorboard"
    last_step, last_loss = state["logged"][-1]
    assert last_step == steps and row["loss"] == pytest.approx(last_loss, rel=1e-6)
    _headless_shows(proc, steps, loss=True)
    assert "ETA" in proc.stdout  # the bar's total


def test_summarywriter_loop_that_prints_nothing_gives_steps_and_loss(tmp_path, fttui_home):
    pytest.importorskip("tensorboard", reason="SKIPPED LOUDLY: tensorboard is not installed (test extras)")
    cwd = tmp_path / "work"
    cwd.mkdir()
    proc, row, state = _run(tmp_path, cwd, [str(SCRIPTS / "tb_writer_loop.py")], STEPS="15")
    losses = state["losses"]
    assert row["steps"] == len(losses) == 15 and row["status"] == "completed"
    assert row["total_steps"] is None  # nothing says it
    assert row["sources"] == "steps=tensorboard loss=tensorboard"
    assert row["loss"] == pytest.approx(losses[-1], rel=1e-6)
    assert [e["loss"] for e in _steps(fttui_home)] == pytest.approx(losses, rel=1e-6)
    assert "step 15" in proc.stdout and "no training seen" not in proc.stdout
