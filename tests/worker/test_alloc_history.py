"""The worker's side of "what held the memory" (fttui.worker.allochist), on CPU: the storages of
the parameters, gradients and optimizer states it records beside a snapshot, each with its
estimate term; when the history is recorded (the profile's steps, the whole of a probe trial or
an out-of-memory retry); and that without CUDA nothing is turned on or written.

The recording and the snapshot themselves need a card: bench/gpu_verify.sh (step "snapshot")."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fttui.core.run.files.runfiles import Attempt, CommandFile
from fttui.core.run.files.rundir import RunDir
from fttui.worker import allochist
from tests.helpers import profile_of


def stepped(adapter: bool):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    if adapter:  # the first layer frozen: the second stands for the adapter
        for p in model[0].parameters():
            p.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    return model, opt


def _bytes(ranges, term):
    return sum(n for _, n, t in ranges.ranges if t == term)


def test_full_fine_tuning_classes_parameters_gradients_and_states():
    model, opt = stepped(adapter=False)
    got = allochist.tensor_ranges(model, opt, adapters=False, device_type="cpu")
    params = sum(p.untyped_storage().nbytes() for p in model.parameters())
    assert _bytes(got, "weights") == params
    assert _bytes(got, "gradients") == params
    states = sum(v.untyped_storage().nbytes() for s in opt.state.values() for v in s.values()
                 if v.untyped_storage().data_ptr())
    assert _bytes(got, "optimizer_states") == states > 0
    assert [r[0] for r in got.ranges] == sorted(r[0] for r in got.ranges)


def test_an_adapter_run_classes_the_trainable_side_as_the_lora_term():
    model, opt = stepped(adapter=True)

    class Wrapped:  # accelerate's wrapper: the optimizer that steps is inside
        optimizer = opt

    got = allochist.tensor_ranges(model, Wrapped(), adapters=True, device_type="cpu")
    frozen = sum(p.untyped_storage().nbytes() for p in model[0].parameters())
    assert _bytes(got, "weights") == frozen
    assert {t for *_, t in got.ranges} == {"weights", "lora"}
    assert _bytes(got, "lora") > 2 * sum(p.untyped_storage().nbytes() for p in model[1].parameters())


def test_on_cuda_tensors_are_the_only_ones_kept_on_a_card():
    model, opt = stepped(adapter=False)
    assert allochist.tensor_ranges(model, opt, adapters=False, device_type="cuda").ranges == ()


def test_which_runs_record_and_for_how_long(tmp_path):
    prof = profile_of({"model": {"name_or_path": "x"}, "train": {"memory_history_steps": 3}})
    rd = RunDir(tmp_path)
    rd.write_command(CommandFile(argv=["x"], kind="run"))
    assert allochist.history_steps(prof, str(tmp_path)) == 3
    rd.write_command(CommandFile(argv=["x"], kind="probe"))
    assert allochist.history_steps(prof, str(tmp_path)) is None  # the whole trial
    rd.write_command(CommandFile(argv=["x"], kind="run", attempt=Attempt(n=2, first="a", previous="a")))
    assert allochist.history_steps(prof, str(tmp_path)) is None  # an out-of-memory retry: the whole attempt


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU path: this machine has CUDA")
def test_without_cuda_nothing_is_turned_on_or_written(tmp_path):
    assert allochist.start(2) is False and allochist.start(None) is False
    prof = profile_of({"model": {"name_or_path": "x"}})
    assert allochist.dump_at_oom(str(tmp_path), None, prof) is False
    assert not RunDir(tmp_path).snapshot_path.exists() and not RunDir(tmp_path).tensors_path.exists()


def test_start_and_stop_call_torch_s_api_as_its_signature_takes_it(monkeypatch):
    import inspect

    real = torch.cuda.memory._record_memory_history
    calls = []

    def record(*args, **kwargs):
        inspect.signature(real).bind(*args, **kwargs)  # the current torch's parameters (no card needed)
        calls.append(kwargs)

    monkeypatch.setattr(allochist, "_cuda", lambda: True)
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", record)
    assert allochist.start(0) is False and calls == []  # 0: off
    assert allochist.start(2) is True
    assert calls == [{"enabled": "all", "context": "state", "stacks": "all", "max_entries": allochist.MAX_ENTRIES}]
    cb = allochist.StopAfter(2)

    class State:
        global_step = 1

    cb.on_step_end(None, State, None)
    assert len(calls) == 1  # still on after step 1
    State.global_step = 2
    cb.on_step_end(None, State, None)
    State.global_step = 3
    cb.on_step_end(None, State, None)
    # the frames off once, after step 2: the trace goes on and nothing is cleared (enabled stays)
    assert calls[1:] == [{"enabled": "all", "context": None, "stacks": "all", "max_entries": allochist.MAX_ENTRIES}]


def test_at_an_oom_the_snapshot_and_the_tensors_land_in_the_run_directory(tmp_path, monkeypatch):
    import json

    from fttui.core.run.files.memsnap import read_snapshot, read_tensor_ranges

    data = json.loads((Path(__file__).resolve().parents[1] / "data" / "memory_snapshot_lora.json").read_text())
    monkeypatch.setattr(allochist, "_cuda", lambda: True)
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda *a, **k: data["snapshot"])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    model, opt = stepped(adapter=False)

    class Trainer:
        pass

    trainer = Trainer()
    trainer.model, trainer.optimizer = model, opt
    prof = profile_of({"model": {"name_or_path": "x"}, "method": "full"})
    lines = []
    assert allochist.dump_at_oom(str(tmp_path), trainer, prof, lines.append) is True
    rd = RunDir(tmp_path)
    assert read_snapshot(rd.snapshot_path) == data["snapshot"]
    assert read_tensor_ranges(rd.tensors_path).device == "cuda:0"  # CPU tensors are not the card's: none kept
    assert lines and lines[0].startswith("memory snapshot at the out of memory: memory_snapshot.pickle")
    # a second rank finds it written: the first rank's stays
    assert allochist.dump_at_oom(str(tmp_path), trainer, prof) is False
