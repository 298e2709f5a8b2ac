"""Datasets and collator. ``load_records`` (torch-free) lives in :mod:`fttui.core.data.records`;
torch is imported lazily, only by the dataset / collator parts."""

from __future__ import annotations

from itertools import repeat
from typing import Any

from fttui.core.data.records import load_records
from fttui.core.profiles.typed import DataSettings

from .errors import DataError

__all__ = [
    "load_records",
    "DataError",
    "SyntheticDataset",
    "ListDataset",
    "Subset",
    "split_eval",
    "build_dataset",
    "Collator",
    "tokenize_record",
    "PROMPT_WITH_INPUT",
    "PROMPT_NO_INPUT",
    "longest_first_order",
    "longest_first_sampler",
    "sample_lengths",
]

PROMPT_WITH_INPUT = "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
PROMPT_NO_INPUT = "### Instruction:\n{instruction}\n\n### Response:\n"
IGNORE = -100
#: A text is tokenised by its head when longer than this many characters a token of room (English
#: BPE averages about 4, the byte tokenizer 1 or less); a head short of tokens is grown fourfold.
HEAD_CHARS_PER_TOKEN = 8
#: Tokens a head must hold past the room, so that the cut's neighbourhood is never kept.
HEAD_MARGIN = 64


class SyntheticDataset:
    """``num_samples`` samples of exactly ``seq_len`` random ids in [4, vocab_size); labels = ids.

    Generated lazily per index from ``seed + index`` (deterministic, no memory for large sets).
    """

    def __init__(self, num_samples: int, seq_len: int, vocab_size: int, seed: int) -> None:
        if vocab_size <= 4:
            raise DataError(None, f"synthetic: vocab_size {vocab_size} is too small")
        self.n, self.seq_len, self.vocab_size, self.seed = num_samples, seq_len, vocab_size, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch

        if i < 0 or i >= self.n:
            raise IndexError(i)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        ids = torch.randint(4, self.vocab_size, (self.seq_len,), generator=g, dtype=torch.long)
        return {"input_ids": ids, "labels": ids.clone()}


class ListDataset:
    def __init__(self, items: list[dict[str, list[int]]]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, list[int]]:
        return self.items[i]


class Subset:
    """The samples of ``base`` at ``indices``, in that order."""

    def __init__(self, base, indices: list[int]) -> None:
        self.base, self.indices = base, list(indices)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int):
        return self.base[self.indices[i]]


def split_eval(dataset, ratio: float, seed: int):
    """``(train, eval)``: ``round(ratio * n)`` samples (at least one) held out for evaluation,
    drawn with ``seed``; ``(dataset, None)`` when ``ratio`` is 0. Both keep the dataset's order."""
    import random

    n = len(dataset)
    if ratio <= 0:
        return dataset, None
    n_eval = max(1, round(ratio * n))
    if n_eval >= n:
        raise DataError(
            None,
            f"data.eval_ratio {ratio} of {n} samples leaves none to train on; lower eval_ratio or use more samples",
        )
    held = set(random.Random(seed).sample(range(n), n_eval))
    return (Subset(dataset, [i for i in range(n) if i not in held]), Subset(dataset, sorted(held)))


def _encode(tok, text: str, room: int) -> list[int]:
    """``tok.encode(text)``, or, for a text far longer than ``room`` tokens could need, the first
    ``room + 1`` tokens of a head of it that holds more than ``room + HEAD_MARGIN`` tokens: the same
    first ``room`` tokens as the whole text's (a tokenizer merges and splits characters near the
    cut only), for the cost of the head. ``room`` is what ``max_seq_len`` leaves for this text."""
    n = max(room, 1) * HEAD_CHARS_PER_TOKEN + HEAD_MARGIN
    while n < len(text):
        ids = tok.encode(text[:n])
        if len(ids) > room + HEAD_MARGIN:
            del ids[room + 1 :]
            return ids
        n *= 4
    return tok.encode(text)


def tokenize_record(rec: dict[str, Any], tok, max_seq_len: int) -> dict[str, list[int]]:
    """Token ids and labels (-100 on prompt / non-assistant parts), truncated to ``max_seq_len``.

    Only what ``max_seq_len`` tokens need is tokenised (:func:`_encode`): a 4 MiB answer at
    ``max_seq_len`` 512 costs a few KiB; ``fttui data`` (untruncated) builds each list once."""
    ids: list[int] = []
    labels: list[int] = []

    def add(part: list[int], train: bool) -> None:
        ids.extend(part)
        labels.extend(part if train else repeat(IGNORE, len(part)))

    if tok.bos_token_id is not None:
        add([int(tok.bos_token_id)], False)
    eos = tok.eos_token_id
    if rec["format"] == "instruction":
        tmpl = PROMPT_WITH_INPUT if rec.get("input") else PROMPT_NO_INPUT
        add(
            _encode(
                tok, tmpl.format(instruction=rec["instruction"], input=rec.get("input", "")), max_seq_len - len(ids)
            ),
            False,
        )
        if len(ids) < max_seq_len:
            answer = _encode(tok, rec["output"], max_seq_len - len(ids))
            if eos is not None:
                answer.append(int(eos))
            add(answer, True)
    else:
        for m in rec["messages"]:
            if len(ids) >= max_seq_len:
                break  # nothing after the cut is kept
            add(_encode(tok, f"<|{m['role']}|>\n", max_seq_len - len(ids)), False)
            body = _encode(tok, m["content"], max(max_seq_len - len(ids), 0))
            if m["role"] == "assistant":
                if eos is not None:
                    body.append(int(eos))
                add(body, True)
                add(tok.encode("\n"), False)
            else:
                body.extend(tok.encode("\n"))
                add(body, False)
    if len(ids) > max_seq_len:
        del ids[max_seq_len:], labels[max_seq_len:]
    return {"input_ids": ids, "labels": labels}


def build_dataset(data: DataSettings, tok, vocab_size: int, seed: int, records=None):
    """Dataset from the resolved ``data`` section. Returns ``(dataset, info)``; ``info`` has
    ``name``, ``num_samples``, ``dropped`` (samples with no trainable token after truncation)."""
    source = data.source or "synthetic"
    max_len = int(data.max_seq_len or 512)
    n = int(data.num_samples or 0)
    if source == "synthetic":
        if n <= 0:
            n = 256
        return SyntheticDataset(n, max_len, vocab_size, seed), {"name": "synthetic", "num_samples": n, "dropped": 0}
    if records is None:
        records = load_records(source, data.format or "auto")
    if n > 0:
        records = records[:n]
    items = []
    dropped = 0
    tok_vocab = getattr(tok, "vocab_size", None)
    if tok_vocab is not None and tok_vocab > vocab_size:
        from .errors import ConfigError

        raise ConfigError(
            f"tokenizer has {tok_vocab} ids but the model vocabulary is {vocab_size}; "
            "raise model.arch_config.vocab_size or use a matching tokenizer"
        )
    for rec in records:
        item = tokenize_record(rec, tok, max_len)
        if all(lab == IGNORE for lab in item["labels"]):
            dropped += 1
            continue
        items.append(item)
    if not items:
        raise DataError(None, f"{source}: no sample has a response token within max_seq_len={max_len}")
    return ListDataset(items), {"name": data.name or source, "num_samples": len(items), "dropped": dropped}


def sample_lengths(dataset) -> list[int] | None:
    """Every sample's token count (None for synthetic data: all are ``max_seq_len`` long)."""
    if isinstance(dataset, SyntheticDataset):
        return None
    return [len(dataset[i]["input_ids"]) for i in range(len(dataset))]


def longest_first_order(lengths: list[int], first: int, seed: int, epoch: int) -> list[int]:
    """The sample order of one epoch under ``train.longest_first``: a seeded shuffle (``seed +
    epoch``); in the first epoch the ``first`` longest samples (longest first, ties by index)
    lead, so that the first optimizer steps carry them."""
    import random

    order = list(range(len(lengths)))
    random.Random(seed + epoch).shuffle(order)
    if epoch:
        return order
    top = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))[: max(0, first)]
    lead = set(top)
    return top + [i for i in order if i not in lead]


def longest_first_sampler(lengths: list[int], first: int, seed: int):
    """A torch Sampler over :func:`longest_first_order`, counting its epochs by its iterations
    (deterministic: a resumed run replays the same order and the Trainer skips what was trained).
    Every rank builds the same order; accelerate deals its batches out in turn, so the first
    ``batch x accumulation x processes`` samples make the first optimizer step, the next as many
    the second."""
    from torch.utils.data import Sampler

    class LongestFirst(Sampler):
        def __init__(self) -> None:
            self.epoch = 0

        def __len__(self) -> int:
            return len(lengths)

        def __iter__(self):
            order = longest_first_order(lengths, first, seed, self.epoch)
            self.epoch += 1
            return iter(order)

        def set_epoch(self, epoch: int) -> None:
            self.epoch = int(epoch)

    return LongestFirst()


class Collator:
    """Pads to the longest sample of the batch (or to ``max_len`` with ``pad_to_max``); labels
    padded with -100; builds ``attention_mask``."""

    def __init__(self, pad_id: int, max_len: int, pad_to_max: bool = False) -> None:
        self.pad_id, self.max_len, self.pad_to_max = int(pad_id), int(max_len), bool(pad_to_max)

    def __call__(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        seqs = [torch.as_tensor(b["input_ids"], dtype=torch.long) for b in batch]
        labs = [torch.as_tensor(b["labels"], dtype=torch.long) for b in batch]
        width = self.max_len if self.pad_to_max else max(len(s) for s in seqs)
        n = len(seqs)
        if all(len(s) == width for s in seqs) and all(len(lab) == width for lab in labs):
            # every sample already has the batch's width (synthetic data, packed samples): no
            # padding, one copy per tensor (the per-sample loop below cost ~0.1 ms a batch).
            return {
                "input_ids": torch.stack(seqs),
                "labels": torch.stack(labs),
                "attention_mask": torch.ones((n, width), dtype=torch.long),
            }
        input_ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        labels = torch.full((n, width), IGNORE, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, (s, lab) in enumerate(zip(seqs, labs)):
            k = min(len(s), width)
            input_ids[i, :k] = s[:k]
            labels[i, :k] = lab[:k]
            mask[i, :k] = 1
        return {"input_ids": input_ids, "labels": labels, "attention_mask": mask}
