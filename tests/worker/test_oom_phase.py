"""The training phases fttui's Trainer callback marks in memory (fttui.integrations.hf_info.PHASES)
and the error event's ``phase`` / ``phase_step`` that ``report_error`` writes: a real Trainer on a
random tiny Llama (CPU, in process) whose data, forward, backward, optimizer step, checkpoint save
or resume fails with a MemoryError at a chosen step. The real out-of-memory runs, under a host
limit, are tests/e2e/test_oom_phase.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from fttui.core.run.files.events import ErrorEvent, StepEvent, read_events  # noqa: E402
from fttui.integrations import hf, hf_marks  # noqa: E402


class Data(torch.utils.data.Dataset):
    def __init__(self, fail_at: int | None = None):
        self.fail_at = fail_at

    def __len__(self):
        return 16

    def __getitem__(self, i):
        if self.fail_at is not None and i == self.fail_at:
            raise MemoryError("data: cannot allocate")
        ids = torch.tensor([(i * 31 + j * 17) % 500 + 1 for j in range(8 + i % 4)])
        return {"input_ids": ids, "labels": ids.clone()}


def collate(batch):
    n = max(len(b["input_ids"]) for b in batch)
    ids = torch.zeros(len(batch), n, dtype=torch.long)
    labels = torch.full((len(batch), n), -100)
    for k, b in enumerate(batch):
        m = len(b["input_ids"])
        ids[k, :m], labels[k, :m] = b["input_ids"], b["labels"]
    return {"input_ids": ids, "labels": labels}


def trainer_for(tmp_path: Path, data=None, optimizer=None, save: bool = False, steps: int = 3):
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2, vocab_size=512,
                                   max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, gradient_accumulation_steps=1,
        max_steps=steps, save_strategy="steps" if save else "no", save_steps=1, report_to=[], use_cpu=True,
        disable_tqdm=True, dataloader_num_workers=0, data_seed=0, seed=0, remove_unused_columns=False,
    )
    opts = (optimizer(model.parameters()), None) if optimizer else (None, None)
    return transformers.Trainer(model=model, args=args, train_dataset=data or Data(), data_collator=collate,
                                optimizers=opts)


def run_and_report(tmp_path: Path, trainer, resume: str | None = None) -> ErrorEvent:
    """Train with fttui's callback bound before train() (as the worker and the injected hook do)
    until it fails; ``report_error`` writes the error event; returns it."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    cb = hf.FttuiCallback(str(run_dir), mark=False)
    cb.bind(trainer)
    trainer.add_callback(cb)
    with pytest.raises(Exception) as got:
        trainer.train(resume_from_checkpoint=resume)
    hf.report_error(trainer, got.value)
    errors = [e for e in read_events(run_dir / "events.jsonl") if isinstance(e, ErrorEvent)]
    assert len(errors) == 1, errors
    return errors[0]


def steps_done(tmp_path: Path) -> list[int]:
    return [e.step for e in read_events(tmp_path / "run" / "events.jsonl") if isinstance(e, StepEvent)]


def test_forward_of_step_2(tmp_path):
    tr = trainer_for(tmp_path)
    calls = {"n": 0}
    forward = tr.model.forward

    def failing(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise MemoryError("forward: cannot allocate")
        return forward(*a, **k)

    tr.model.forward = failing
    err = run_and_report(tmp_path, tr)
    assert (err.kind, err.oom_kind, err.phase, err.phase_step, err.step) == ("oom", "cpu", "forward", 2, 1), err.message
    assert steps_done(tmp_path) == [1]
    assert err.longest_seq and err.longest_seq >= 8  # the batch being fed


def test_backward_of_step_3(tmp_path):
    tr = trainer_for(tmp_path)
    calls = {"n": 0}

    def hook(grad):
        calls["n"] += 1
        if calls["n"] == 3:  # one gradient of this weight per backward
            raise MemoryError("backward: cannot allocate")
        return grad

    tr.model.lm_head.weight.register_hook(hook)
    err = run_and_report(tmp_path, tr)
    assert (err.phase, err.phase_step, err.step) == ("backward", 3, 2)
    assert steps_done(tmp_path) == [1, 2]


def test_optimizer_step_of_step_2(tmp_path):
    class Failing(torch.optim.SGD):
        n = 0

        def step(self, closure=None):
            Failing.n += 1
            if Failing.n == 2:
                raise MemoryError("optimizer: cannot allocate")
            return super().step(closure)

    err = run_and_report(tmp_path, trainer_for(tmp_path, optimizer=lambda p: Failing(p, lr=1e-3)))
    assert (err.phase, err.phase_step, err.step) == ("optimizer", 2, 1)


def test_data_of_step_2(tmp_path):
    # every read after the first four fails: accelerate's loader reads one batch ahead (step 1's
    # fetch reads batches 1 and 2), so step 2's fetch of batch 3 fails
    class Late(Data):
        reads = 0

        def __getitem__(self, i):
            Late.reads += 1
            if Late.reads > 4:
                raise MemoryError("data: cannot allocate")
            return super().__getitem__(i)

    err = run_and_report(tmp_path, trainer_for(tmp_path, data=Late()))
    assert (err.phase, err.phase_step, err.step) == ("data", 2, 1)


def test_checkpoint_save_after_step_2_then_a_resume_that_fails_to_load(tmp_path):
    tr = trainer_for(tmp_path, save=True)
    save = tr._save_checkpoint
    calls = {"n": 0}

    def failing(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise MemoryError("save: cannot allocate")
        return save(*a, **k)

    tr._save_checkpoint = failing
    err = run_and_report(tmp_path, tr)
    assert (err.phase, err.phase_step, err.step) == ("save", 2, 2)
    # resuming from the checkpoint of step 1 whose optimizer state cannot be read: the resume's load
    ckpt = tmp_path / "out" / "checkpoint-1"
    (ckpt / "optimizer.pt").write_bytes(b"not a torch file")
    second = tmp_path / "again"
    second.mkdir()
    err = run_and_report(second, trainer_for(second, save=False), resume=str(ckpt))
    assert (err.kind, err.phase, err.phase_step) == ("error", "resume-load", 1)


def test_a_completed_run_leaves_no_phase_marked(tmp_path):
    tr = trainer_for(tmp_path, steps=2)
    cb = hf.FttuiCallback(str(tmp_path), mark=False)
    cb.bind(tr)
    tr.add_callback(cb)
    tr.train()
    assert cb.c.phase is None and cb.c.step == 2
    assert os.path.exists(tmp_path / "events.jsonl")


def test_deepspeed_engine_step_is_the_optimizer_phase():
    """Under DeepSpeed the engine steps inside accelerate's backward: its ``step`` is marked (a
    stand-in engine here; a real ZeRO-3 offload run on CPU was measured by hand, docs/reliability.md)."""
    from fttui.integrations.hf_info import Counters

    seen = []

    class Engine:
        def step(self):
            seen.append(c.phase)
            if len(seen) == 2:
                raise MemoryError("engine step: cannot allocate")

    class FakeTrainer:
        is_deepspeed_enabled = True
        model_wrapped = Engine()

    c = Counters()
    tr = FakeTrainer()
    assert hf_marks.mark_engine_step(tr, c) and not hf_marks.mark_engine_step(tr, c)  # once
    c.phase = "backward"
    tr.model_wrapped.step()
    assert seen == ["optimizer"] and c.phase == "backward"  # back to the backward it ran in
    with pytest.raises(MemoryError):
        tr.model_wrapped.step()
    assert c.phase == "optimizer"  # the phase it failed in
    assert not hf_marks.mark_engine_step(type("Plain", (), {"is_deepspeed_enabled": False, "model_wrapped": Engine()})(), c)
