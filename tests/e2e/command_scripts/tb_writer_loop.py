"""A plain PyTorch loop that writes its loss with torch's ``SummaryWriter`` and prints nothing:
fttui reads its steps and loss from the event file (issue 42). Nothing of fttui in it.
Environment: ``STEPS``, ``TAG`` (the scalar's tag), ``STATE_FILE`` (the loop's own losses)."""
import json
import os

import torch
from torch.utils.tensorboard import SummaryWriter

torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(64, 16), torch.randn(64, 1)
writer = SummaryWriter("runs/loop")  # the default: written to the file every 120 s, or 10 events
losses = []
for step in range(1, int(os.environ.get("STEPS", "20")) + 1):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
    writer.add_scalar(os.environ.get("TAG", "Loss/train"), loss.item(), step)
writer.close()
with open(os.environ["STATE_FILE"], "w") as f:
    json.dump({"losses": losses}, f)
