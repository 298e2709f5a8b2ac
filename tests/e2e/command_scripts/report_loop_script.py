"""A plain PyTorch loop that reports each step with fttui's public API (issue 42): one call per
step with its own counts, which it also writes to ``STATE_FILE`` (steps, samples, non-padding
tokens, the last loss) for the test to compare with fttui's row; under a launcher, each rank to
``STATE_FILE.RANK`` (its own seed: the ranks train on different data)."""
import json
import os

import torch

import fttui

steps = int(os.environ.get("STEPS", "12"))
batch, length, vocab, hidden = 4, 16, 50, 8
rank = os.environ.get("RANK")
torch.manual_seed(int(rank or 0))
model = torch.nn.Sequential(torch.nn.Embedding(vocab, hidden), torch.nn.Linear(hidden, vocab))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
fttui.report_start(
    total_steps=steps,
    params=sum(p.numel() for p in model.parameters()),
    model_config={"vocab_size": vocab, "hidden_size": hidden, "num_hidden_layers": 1, "num_attention_heads": 1},
    model_name="tiny-loop",
    batch_size=batch,
)
samples = tokens = 0
loss = None
for step in range(1, steps + 1):
    ids = torch.randint(0, vocab, (batch, length))
    mask = (torch.rand(batch, length) > 0.25).long()  # padding: about a quarter of the positions
    logits = model(ids)
    per_token = torch.nn.functional.cross_entropy(logits.view(-1, vocab), ids.view(-1), reduction="none")
    loss = (per_token * mask.view(-1)).sum() / mask.sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    samples += batch
    tokens += int(mask.sum())
    fttui.report_step(step, samples=batch, tokens=int(mask.sum()), loss=loss, lr=0.1)
with open(os.environ["STATE_FILE"] + (f".{rank}" if rank is not None else ""), "w") as f:
    json.dump({"steps": steps, "samples": samples, "tokens": tokens, "loss": float(loss), "api": fttui.API_VERSION}, f)
