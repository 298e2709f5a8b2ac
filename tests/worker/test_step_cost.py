"""What the worker does per step, kept cheap (bench/measure_cost.py, docs/benchmarks.md)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fttui.worker.data import Collator, SyntheticDataset  # noqa: E402
from tests.helpers import profile_of  # noqa: E402


def _slow_path(batch, pad_id, width):
    """The per-sample padding loop, as the collator runs it when lengths differ."""
    n = len(batch)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    labels = torch.full((n, width), -100, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, b in enumerate(batch):
        s = torch.as_tensor(b["input_ids"])
        k = min(len(s), width)
        ids[i, :k] = s[:k]
        labels[i, :k] = torch.as_tensor(b["labels"])[:k]
        mask[i, :k] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


@pytest.mark.parametrize("pad_to_max", [False, True])
def test_equal_length_batches_collate_like_the_padding_loop(pad_to_max):
    ds = SyntheticDataset(8, 16, 512, seed=3)
    batch = [ds[i] for i in range(8)]
    got = Collator(0, 16, pad_to_max=pad_to_max)(batch)
    want = _slow_path(batch, 0, 16)
    for k in want:
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
    # the batch is a copy: changing it leaves the dataset's samples alone
    got["input_ids"][0, 0] = -1
    assert int(batch[0]["input_ids"][0]) != -1


def test_shorter_samples_still_pad_and_mask():
    batch = [{"input_ids": [5, 6, 7], "labels": [5, 6, 7]}, {"input_ids": [5, 6, 7], "labels": [5, 6, 7]}]
    out = Collator(0, 4, pad_to_max=True)(batch)
    assert out["input_ids"].tolist() == [[5, 6, 7, 0]] * 2
    assert out["labels"].tolist() == [[5, 6, 7, -100]] * 2
    assert out["attention_mask"].tolist() == [[1, 1, 1, 0]] * 2


def test_the_trainer_does_not_log_every_step(tmp_path, tiny_profile):
    from fttui.worker.trainer import training_args

    args = training_args(profile_of(tiny_profile()), str(tmp_path), 1, False)
    # the step events carry loss and lr; the Trainer's own per-step log was pure overhead
    assert str(getattr(args.logging_strategy, "value", args.logging_strategy)) == "no"
