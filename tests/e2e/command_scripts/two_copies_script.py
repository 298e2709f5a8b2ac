"""Two copies of trainer_script.py at once, without the launcher's rank variables: what a Trainer
script that drops RANK / WORLD_SIZE before importing transformers does under ``torchrun
--nproc_per_node 2``: each process says rank 0 of world size 1. Each copy writes its Trainer's
own figures to STATE_FILE.<k>."""
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")}
state = os.environ.get("STATE_FILE", "state.json")
out = os.environ.get("OUT_DIR", "out")
procs = [subprocess.Popen([sys.executable, os.path.join(here, "trainer_script.py")],
                          env=env | {"STATE_FILE": f"{state}.{k}", "OUT_DIR": f"{out}{k}"}) for k in range(2)]
sys.exit(max(p.wait() for p in procs))
