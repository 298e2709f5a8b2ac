"""Prints what a Hugging Face Trainer prints (a tqdm bar on stderr, log dicts on stdout) without
importing transformers or fttui: the run's steps and loss can only come from reading its output.
Its figures (STEPS, the losses) are written to STATE_FILE for the test to compare. CHILD_TOKEN:
start a sleeping child process whose command line holds it (the cancel test)."""
import json
import math
import os
import sys
import time

from tqdm import tqdm

steps = int(os.environ.get("STEPS", "7"))
if os.environ.get("CHILD_TOKEN"):
    import subprocess

    subprocess.Popen([sys.executable, "-c", "import time, sys; time.sleep(600)", os.environ["CHILD_TOKEN"]])
bar = tqdm(total=steps, dynamic_ncols=True)
losses = []
t0 = time.time()
for step in range(1, steps + 1):
    time.sleep(0.12)
    bar.update(1)
    loss = 3.0 + math.cos(step) / (step + 1)
    losses.append(float(f"{loss:.4g}"))
    bar.write(str({"loss": f"{loss:.4g}", "grad_norm": f"{1 / step:.4g}", "learning_rate": f"{1e-3 * (steps - step + 1) / steps:.4g}",
                   "epoch": f"{step / steps:.4g}"}))
runtime = time.time() - t0
bar.write(str({"train_runtime": f"{runtime:.4g}", "train_samples_per_second": f"{steps * 4 / runtime:.4g}",
               "train_steps_per_second": f"{steps / runtime:.4g}", "train_loss": f"{sum(losses) / steps:.4g}"}))
bar.close()
with open(os.environ.get("STATE_FILE", "state.json"), "w") as f:
    json.dump({"steps": steps, "losses": losses, "runtime": runtime}, f)
sys.exit(0)
