"""The plain side of bench/measure_cost.py: the same training as the bench's fttui profile,
written as a user would write it with the Hugging Face Trainer, without fttui.

    python bench/plain_trainer.py --samples 3200 [--seq-len 128] [--batch 8] [--json-out FILE]

Random Llama (hidden 128, intermediate 256, 2 layers, 4 heads, vocab 512), LoRA r8 alpha 16 on
q_proj/v_proj without dropout, ``--samples`` synthetic samples of ``--seq-len`` random ids
(labels = ids, every token attended), batch 8, fp32, CPU, AdamW, linear schedule, seed 42.
Nothing from fttui is imported: this is the reference the fttui run is compared with.

Timing: a TrainerCallback takes ``time.perf_counter()`` at the end of every optimizer step; the
steady figure is ``(steps - 1) * batch / (t_end[last] - t_end[1])``, the first step excluded:
the same definition as fttui's headline ``samples_per_s`` (docs/architecture.md, "Rates").
The whole-run figure is the Trainer's own ``train_samples_per_second`` (warm-up included).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import torch
from torch.utils.data import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments


class RandomIds(Dataset):
    """``n`` samples of ``seq_len`` random ids in [4, vocab); labels = ids."""

    def __init__(self, n: int, seq_len: int, vocab: int, seed: int = 42) -> None:
        self.n, self.seq_len, self.vocab, self.seed = n, seq_len, vocab, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        ids = torch.randint(4, self.vocab, (self.seq_len,), generator=g, dtype=torch.long)
        return {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}


class StepClock(TrainerCallback):
    """The time at the end of each optimizer step."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_step_end(self, args, state, control, **kw):
        self.ends.append(time.perf_counter())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=3200)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--out-dir", default=os.path.join(tempfile.gettempdir(), "plain-trainer-out"))
    ap.add_argument("--json-out")
    a = ap.parse_args(argv)

    from peft import LoraConfig, get_peft_model

    torch.manual_seed(42)
    config = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=4, vocab_size=512, max_position_embeddings=512, use_cache=False)
    model = LlamaForCausalLM(config)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                             target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    args = TrainingArguments(output_dir=a.out_dir, per_device_train_batch_size=a.batch, num_train_epochs=1,
                             learning_rate=2e-3, use_cpu=True, save_strategy="no", report_to=[],
                             disable_tqdm=True, seed=42, dataloader_num_workers=0)
    clock = StepClock()
    trainer = Trainer(model=model, args=args, train_dataset=RandomIds(a.samples, a.seq_len, 512),
                      callbacks=[clock])
    metrics = trainer.train().metrics
    steps = len(clock.ends)
    steady = (steps - 1) * a.batch / (clock.ends[-1] - clock.ends[0]) if steps > 1 else None
    out = {"steady_samples_per_s": steady, "whole_samples_per_s": metrics.get("train_samples_per_second"),
           "steps": steps, "torch_threads": torch.get_num_threads()}
    text = json.dumps(out)
    if a.json_out:
        with open(a.json_out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
