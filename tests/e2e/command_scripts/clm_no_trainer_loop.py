"""A plain accelerate loop in the shape of transformers' ``run_clm_no_trainer.py`` (issue 42; written
here, the real script is not used: see docs/commands.md): a causal LM from a config (random
init), a local tokenizer, a text file grouped into blocks, ``Accelerator(log_with="tensorboard",
project_dir=...)`` and ``init_trackers`` with ``--with_tracking``, a ``tqdm`` bar over the
optimizer steps on the main process, and per epoch ``accelerator.log({"train_loss": the epoch's
mean loss, ...}, step=completed_steps)``. Nothing of fttui in it. Offline: every file is local.
The script records what it counted in ``STATE_FILE``."""
import argparse
import json
import math
import os
import sys

# Installed packages this script never uses: transformers and accelerate import them whenever
# they are there (seconds of CPU per process); hidden, the script runs as on a machine without them.
for _unused in ("bitsandbytes", "deepspeed", "mlflow"):
    sys.modules.setdefault(_unused, None)

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, default_data_collator

parser = argparse.ArgumentParser(description="causal LM fine-tuning with accelerate, no Trainer")
parser.add_argument("--train_file", required=True)
parser.add_argument("--config_name", required=True)
parser.add_argument("--tokenizer_name", required=True)
parser.add_argument("--per_device_train_batch_size", type=int, default=4)
parser.add_argument("--learning_rate", type=float, default=5e-4)
parser.add_argument("--num_train_epochs", type=int, default=2)
parser.add_argument("--max_train_steps", type=int, default=None)
parser.add_argument("--gradient_accumulation_steps", type=int, default=1)
parser.add_argument("--block_size", type=int, default=32)
parser.add_argument("--output_dir", default="out")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--with_tracking", action="store_true")
args = parser.parse_args()

kwargs = {"log_with": "tensorboard", "project_dir": args.output_dir} if args.with_tracking else {}
accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps, **kwargs)
torch.manual_seed(args.seed)
config = AutoConfig.from_pretrained(args.config_name)
tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_name)
model = AutoModelForCausalLM.from_config(config)

with open(args.train_file) as f:
    ids = [i for line in f if line.strip() for i in tokenizer(line.strip())["input_ids"]]
n_blocks = len(ids) // args.block_size
blocks = [ids[k * args.block_size:(k + 1) * args.block_size] for k in range(n_blocks)]
train_dataset = [{"input_ids": b, "labels": b, "attention_mask": [1] * len(b)} for b in blocks]
train_dataloader = DataLoader(train_dataset, shuffle=True, collate_fn=default_data_collator,
                              batch_size=args.per_device_train_batch_size)
optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)

steps_per_epoch = math.ceil(len(train_dataloader) / args.gradient_accumulation_steps)
if args.max_train_steps is None:
    args.max_train_steps = args.num_train_epochs * steps_per_epoch
args.num_train_epochs = math.ceil(args.max_train_steps / steps_per_epoch)
model, optimizer, train_dataloader = accelerator.prepare(model, optimizer, train_dataloader)
if args.with_tracking:
    accelerator.init_trackers("clm_no_trainer", {k: v for k, v in vars(args).items() if v is not None})

progress_bar = tqdm(range(args.max_train_steps), disable=not accelerator.is_local_main_process)
completed_steps, logged, samples = 0, [], 0
for epoch in range(args.num_train_epochs):
    model.train()
    total_loss = 0.0
    for batch in train_dataloader:
        with accelerator.accumulate(model):
            outputs = model(**batch)
            total_loss += outputs.loss.detach().float().item()
            accelerator.backward(outputs.loss)
            optimizer.step()
            optimizer.zero_grad()
        samples += len(batch["input_ids"])
        if accelerator.sync_gradients:
            progress_bar.update(1)
            completed_steps += 1
        if completed_steps >= args.max_train_steps:
            break
    train_loss = total_loss / len(train_dataloader)
    if args.with_tracking:
        accelerator.log({"train_loss": train_loss, "epoch": epoch, "step": completed_steps}, step=completed_steps)
    logged.append([completed_steps, train_loss])
    if completed_steps >= args.max_train_steps:
        break
if args.with_tracking:
    accelerator.end_training()
if accelerator.is_main_process:
    with open(os.environ["STATE_FILE"], "w") as f:
        json.dump({"completed_steps": completed_steps, "max_train_steps": args.max_train_steps, "logged": logged,
                   "samples": samples}, f)
