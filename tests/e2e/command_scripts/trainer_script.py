"""A plain Trainer script (random tiny Llama, CPU, no downloads): what a user runs without fttui.

Environment: STEPS (optimizer steps), WITH_CALLBACK=1 (the one-line fttui callback), BIG=1 (a
model too big for a small host memory limit), STATE_FILE (where the Trainer's own figures go:
global_step, log_history, train metrics, num_input_tokens_seen).
"""
import json, os, sys

# Installed packages this script never uses (the DeepSpeed engine, bitsandbytes, an MLflow
# tracker): transformers and accelerate import them whenever they are there, about 2.5 s of CPU
# per process (docs/performance.md). Hidden, the script runs as on a machine without them.
for _unused in ("bitsandbytes", "deepspeed", "mlflow"):
    sys.modules.setdefault(_unused, None)

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

STEPS = int(os.environ.get("STEPS", "6"))
CALLBACK = os.environ.get("WITH_CALLBACK") == "1"

BIG = os.environ.get("BIG") == "1"  # a model too big for a small host memory limit
cfg = LlamaConfig(hidden_size=512 if BIG else 64, intermediate_size=1024 if BIG else 128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, vocab_size=64000 if BIG else 512,
                  max_position_embeddings=128)
torch.manual_seed(0)
model = LlamaForCausalLM(cfg)


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 40

    def __getitem__(self, i):
        n = 8 + (i * 7) % 24  # lengths 8..31
        ids = torch.tensor([(i * 31 + j * 17) % 500 + 1 for j in range(n)])
        return {"input_ids": ids, "labels": ids.clone()}


def collate(batch):
    n = max(len(b["input_ids"]) for b in batch)
    ids = torch.zeros(len(batch), n, dtype=torch.long)
    mask = torch.zeros(len(batch), n, dtype=torch.long)
    labels = torch.full((len(batch), n), -100)
    for k, b in enumerate(batch):
        m = len(b["input_ids"])
        ids[k, :m], mask[k, :m], labels[k, :m] = b["input_ids"], 1, b["labels"]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


args = TrainingArguments(output_dir=os.environ.get("OUT_DIR", "out"), per_device_train_batch_size=2,
                         gradient_accumulation_steps=2, max_steps=STEPS, logging_steps=1, save_strategy="no",
                         report_to=[], use_cpu=True, learning_rate=1e-3, disable_tqdm=False,
                         include_num_input_tokens_seen="non_padding", dataloader_num_workers=0)
trainer = Trainer(model=model, args=args, train_dataset=Data(), data_collator=collate)
if CALLBACK:
    from fttui.integrations.hf import FttuiCallback
    trainer.add_callback(FttuiCallback())
out = trainer.train()
if trainer.state.is_world_process_zero:
    with open(os.environ.get("STATE_FILE", "state.json"), "w") as f:
        json.dump({"global_step": trainer.state.global_step, "log_history": trainer.state.log_history,
                   "metrics": out.metrics, "num_input_tokens_seen": trainer.state.num_input_tokens_seen,
                   "world_size": trainer.args.world_size}, f)
if torch.distributed.is_available() and torch.distributed.is_initialized():
    # under torchrun: the script ends its process group itself, as well-behaved scripts do (a gloo
    # group left to the interpreter's exit can abort a rank there, "terminate called without an
    # active exception", exit -6 after a completed training: PyTorch's finalization, seen once in
    # ten runs of the torchrun test). destroy_process_group alone only unregisters the group: the
    # DDP wrapper's reducer keeps it alive until the interpreter finalises, where the same abort
    # came (a CI run, and 1 in 16 runs beside two busy processes), so the Trainer's wrapped model
    # and optimizer are released first, as fttui's worker does (fttui.worker.train)
    import gc

    trainer.accelerator.free_memory()
    trainer.model_wrapped = trainer.model = trainer.optimizer = trainer.lr_scheduler = None
    gc.collect()
    try:
        torch.distributed.barrier()
    finally:
        torch.distributed.destroy_process_group()
    gc.collect()
