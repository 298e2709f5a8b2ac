"""Test driver, run under torchrun: the worker's own setup and Trainer (``fttui.worker.train``'s
``setup`` and ``make_trainer``, sharding included) train a run folder's profile, then each rank
writes the bytes it holds in parameters and optimizer states, read from its tensors
(:func:`fttui.worker.sharding.held_tensors`), to ``held-<rank>.json`` in the run folder.

    python -m torch.distributed.run --nproc-per-node 2 -m tests.worker.held_main --run-dir DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from fttui.worker.train import Emitter, make_trainer, setup


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True)
    run_dir = ap.parse_args().run_dir
    rank = int(os.environ.get("RANK", "0"))
    emit = Emitter(os.path.join(run_dir, "events.jsonl"), rank)
    su = setup(run_dir, {"rank": rank, "emit": emit, "counters": None})
    from fttui.worker.data import build_dataset
    from fttui.worker.sharding import held_tensors, sharding_info

    vocab = su.model.get_input_embeddings().num_embeddings
    dataset, _ = build_dataset(su.profile.data, su.tok, vocab, 42, records=su.records)
    trainer = make_trainer(su, su.profile, dataset, [])
    trainer.train()
    out = {"rank": rank, "held": held_tensors(trainer), "sharding": sharding_info(trainer)}
    with open(os.path.join(run_dir, f"held-{rank}.json"), "w", encoding="utf-8") as f:
        json.dump(out, f)
    from fttui.worker.train import _close_process_group

    _close_process_group(trainer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
