"""Two gloo ranks (under torchrun): rank 1 sleeps past the process group's 3 s timeout before
the second all-reduce, so rank 0 times out waiting for it (tests/e2e/test_ranks.py)."""

import datetime
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
t = torch.ones(2)
dist.all_reduce(t)
if dist.get_rank() == 1:
    time.sleep(20)
dist.all_reduce(t)
