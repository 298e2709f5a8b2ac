"""Build DeepSpeed's CPU ops ahead of time, on a machine without a GPU (the test suite's and the
CPU demo's): DeepSpeed JIT-compiles an op into torch's extension cache the first time a run needs
it (the shared-memory collectives for every ZeRO run on CPU ranks, CPU Adam, fused Adam for
``[deepspeed] optimizer = "deepspeed"``), a minute or more of compiling each on two cores.
scripts/setup.sh runs this in the background while it installs Slurm; a later run finds the ops
built. Does nothing where deepspeed is missing or a CUDA device is visible (CUDA ops are built by
the run that needs them, with the user's compiler).

    .venv/bin/python scripts/build_ops.py
"""

from __future__ import annotations

import importlib.util
import sys
import time

OPS = ("ShareMemCommBuilder", "CPUAdamBuilder", "FusedAdamBuilder")


def main() -> int:
    if importlib.util.find_spec("deepspeed") is None:
        return 0
    import torch

    if torch.cuda.is_available():
        return 0
    from deepspeed.accelerator import get_accelerator

    acc = get_accelerator()
    if acc.device_name() != "cpu":
        return 0
    # A build killed earlier (an interrupted setup or suite) left its lock: every later build of
    # that op would wait on it forever, this one first (fttui.core.run.launching.oplocks)
    import os
    from pathlib import Path

    from fttui.core.run.launching.oplocks import clear_stale_locks

    clear_stale_locks(Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache/torch_extensions"), print)
    for name in OPS:
        t0 = time.monotonic()
        try:
            builder = acc.create_op_builder(name)
            if builder is None or not builder.is_compatible():
                continue
            builder.load(verbose=False)
        except Exception as e:  # noqa: BLE001 - a run that needs it builds it (and says why it cannot)
            print(f"build_ops: {name}: {e}", file=sys.stderr)
            continue
        print(f"build_ops: {name} ready ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
