"""fttui's public reporting API (issue 42, `fttui.report`), each case in a fresh Python: light to
import and a no-op outside fttui, fttui's typed events under it (start first, steps, end at exit,
the launcher's rank and the pid), bad input in one line, and the Lightning callback's helpers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from fttui.core.run.files.events import EndEvent, PhaseEvent, StartEvent, StepEvent, read_events
from fttui.integrations import lightning as lit
from tests.conftest import ROOT


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("FTTUI_RUN_DIR", "RANK", "WORLD_SIZE")}
    full["PYTHONPATH"] = str(ROOT)
    full.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_import_fttui_stays_light_and_the_api_is_loaded_at_first_use():
    proc = _python("""
        import sys
        import fttui
        before = "fttui.report" in sys.modules
        fttui.report_step(1, samples=8, loss=0.5)
        print(before, "fttui.report" in sys.modules, fttui.API_VERSION, fttui.report.enabled(),
              any(m in sys.modules for m in ("torch", "textual", "rich", "fttui.integrations.reporter")))
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True", "1.0", "False", "False"]


def test_outside_fttui_the_calls_write_nothing(tmp_path):
    proc = _python("""
        import fttui
        fttui.report_start(total_steps=3)
        for s in range(1, 4):
            assert fttui.report_step(s, samples=2, tokens=10, loss=1.0) is None
        fttui.report_step(samples="bad")  # not even checked: nothing is written
        fttui.report_end()
    """, FTTUI_RUN_DIR=str(tmp_path / "missing"))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert not (tmp_path / "missing").exists()


def test_under_fttui_the_typed_events_with_the_launchers_rank_and_an_end_at_exit(tmp_path):
    proc = _python("""
        import fttui, os
        fttui.report_start(total_steps=3, params=1000, batch_size=2, precision="bf16",
                           model_config={"vocab_size": 100, "hidden_size": 16, "num_hidden_layers": 2,
                                         "num_attention_heads": 4})
        for s in range(1, 4):
            fttui.report_step(s, samples=2, tokens=10 * s, loss=1.0 / s, lr=0.01)
        print(os.getpid())
    """, FTTUI_RUN_DIR=str(tmp_path), RANK="1", WORLD_SIZE="2")
    assert proc.returncode == 0, proc.stderr
    pid = int(proc.stdout)
    evs = read_events(tmp_path / "events.jsonl")
    assert [type(e) for e in evs] == [PhaseEvent, StartEvent, StepEvent, StepEvent, StepEvent, EndEvent]
    assert {e.rank for e in evs} == {1} and {e.pid for e in evs} == {pid} and {e.source for e in evs} == {"report"}
    start = evs[1]
    assert isinstance(start, StartEvent)
    assert start.world_size == 2 and start.total_steps == 3 and start.params_total == 1000
    assert start.precision == "bf16" and start.micro_batch == 2
    assert start.model_shape == {"vocab": 100, "hidden": 16, "layers": 2, "attn_dim": 16, "tied": False}
    steps = [e for e in evs if isinstance(e, StepEvent)]
    assert [(e.step, e.samples, e.tokens, e.loss) for e in steps] == [(1, 2, 10, 1.0), (2, 4, 30, 0.5),
                                                                      (3, 6, 60, 1.0 / 3)]
    assert all(e.step_time is not None and e.train_time is not None for e in steps)
    end = evs[-1]
    assert isinstance(end, EndEvent) and (end.step, end.samples, end.tokens) == (3, 6, 60)
    assert not (tmp_path / "callback.json").exists()  # rank 0 marks the run, not rank 1


def test_a_step_without_a_start_starts_the_run_and_rank_0_marks_it(tmp_path):
    proc = _python("""
        import fttui
        for s in range(1, 3):
            fttui.report_step(samples=4)
        fttui.report_end()
        fttui.report_step(samples=4)  # after the end: nothing
    """, FTTUI_RUN_DIR=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    evs = read_events(tmp_path / "events.jsonl")
    assert [e.event for e in evs] == ["phase", "start", "step", "step", "end"]
    first, second = (e for e in evs if isinstance(e, StepEvent))
    assert (first.step, first.samples, first.step_time) == (1, 4, None)  # the first step's time is unknown
    assert first.train_time is not None and first.train_time < 0.5  # the clock started at the first call
    assert (second.step, second.samples) == (2, 8) and second.step_time is not None
    assert json.loads((tmp_path / "callback.json").read_text())["via"] == "report"


def test_bad_input_is_one_line_and_the_loop_goes_on(tmp_path):
    proc = _python("""
        import fttui
        fttui.report_step(1, samples=4)
        fttui.report_step(2, samples="8")
        fttui.report_step(3, samples=4)
        print("loop went on")
    """, FTTUI_RUN_DIR=str(tmp_path))
    assert proc.returncode == 0 and proc.stdout == "loop went on\n"
    lines = proc.stderr.strip().splitlines()
    assert lines == ["fttui: fttui's reporter (step) failed (ValueError: samples must be a whole number >= 0 "
                     "(this step's count), not '8'); training goes on without it"]
    assert "Traceback" in (tmp_path / "integration.log").read_text()
    assert [e.event for e in read_events(tmp_path / "events.jsonl")] == ["phase", "start", "step"]


def test_lightning_batch_size_and_precision_names():
    class T:
        def __init__(self, *shape):
            self.shape = shape

    assert lit.batch_size(T(8, 32)) == 8
    assert lit.batch_size((T(), T(4, 2))) == 4  # a scalar first: the first tensor with a dimension
    assert lit.batch_size({"input_ids": T(3, 7), "labels": T(3, 7)}) == 3
    assert lit.batch_size([1, 2]) is None
    torch = pytest.importorskip("torch")
    ids = torch.ones(2, 5, dtype=torch.long)
    assert int(lit.batch_tokens({"input_ids": ids, "attention_mask": torch.tensor([[1, 1, 1, 0, 0]] * 2)})) == 6
    assert lit.batch_tokens({"input_ids": ids}) == 10 and lit.batch_tokens((ids, ids)) is None
    assert [lit.precision(p) for p in ("bf16-mixed", "16-mixed", "32-true", "64-true", None)] == [
        "bf16", "fp16", "fp32", "fp64", None]


def test_a_python_without_fttui_gets_the_api_from_the_hook(tmp_path):
    """The command's Python has no fttui (fttui in its own environment): under `fttui run` the hook
    on its PYTHONPATH makes `import fttui` find this fttui, whose API needs the standard library only."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    python = str(bare / "bin" / "python")
    code = "import fttui; fttui.report_step(1, samples=2, loss=0.5); print(fttui.__file__)"
    env = {"PATH": os.environ.get("PATH", ""), "FTTUI_RUN_DIR": str(tmp_path)}
    alone = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert alone.returncode != 0 and "No module named 'fttui'" in alone.stderr  # no fttui in that Python
    env["PYTHONPATH"] = str(ROOT / "fttui" / "integrations" / "autoload")  # what `fttui run` adds
    hooked = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert hooked.returncode == 0, hooked.stderr
    assert hooked.stdout.strip() == str(ROOT / "fttui" / "__init__.py")
    evs = read_events(tmp_path / "events.jsonl")
    assert [e.event for e in evs] == ["phase", "start", "step", "end"]
