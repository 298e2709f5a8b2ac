"""A plain PyTorch loop, no Trainer: what fttui can only measure from outside (memory, time,
exit). ``--help`` prints its usage and exits 0, as a script run to read its options does."""
import argparse

parser = argparse.ArgumentParser(description="a plain PyTorch loop on random data")
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()

import torch  # noqa: E402  (after the arguments: --help needs no torch)

torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(64, 16), torch.randn(64, 1)
for step in range(1, args.steps + 1):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 5 == 0:
        print(f"step {step} loss {loss.item():.4f}", flush=True)
