"""What a data set looks like after tokenisation: lengths, truncation and padding (torch-free).

The worker tokenises every record with the profile's tokenizer and template
(:mod:`fttui.worker.datastats`) and hands back one :class:`SampleLength` per record; everything
here is arithmetic on those lengths, so that any batch size or ``max_seq_len`` below the one
tokenised is answered from the cached lengths without tokenising again.

Definitions (the same in ``fttui data``, the app's details pane and the planner):

- a sample's *raw* length is its token count before truncation (template, BOS and EOS included);
  its *length* is ``min(raw, max_seq_len)``; it is *truncated* when ``raw > max_seq_len``;
- a sample is *dropped* when no response token survives truncation (the worker drops it too);
- percentiles are nearest-rank over the kept samples' lengths (p50 of 1..10 is 5);
- a batch is padded to its longest sample (the collator's rule); *padding share* is
  padded tokens / all tokens fed, over the epoch's batches (the last one may be short);
- random order: a seeded shuffle, as the Trainer's sampler draws it (same figures for any seed
  within a few percent on real data); grouped: HF's ``group_by_length`` rule (mega-batches of
  50 x batch size sorted by length, longest first).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

MEGABATCH_MULT = 50  # transformers' LengthGroupedSampler
HIST_BINS = 16


@dataclass(frozen=True)
class SampleLength:
    """One record: its index in the file, tokens before truncation, tokens it would train on
    before truncation (response tokens), and the first response token's position (-1: none)."""

    index: int
    raw: int
    first_label: int

    def length(self, max_seq_len: int) -> int:
        return min(self.raw, max_seq_len)

    def kept(self, max_seq_len: int) -> bool:
        return 0 <= self.first_label < max_seq_len


def percentile(sorted_values: Sequence[int], q: float) -> int:
    """Nearest-rank percentile of already sorted values (``q`` in 0..100)."""
    if not sorted_values:
        return 0
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return int(sorted_values[min(rank, len(sorted_values)) - 1])


def histogram(values: Sequence[int], top: int, bins: int = HIST_BINS) -> list[dict[str, int]]:
    """``bins`` equal-width bins over 1..top: ``[{"lo", "hi", "count"}]`` (hi inclusive)."""
    top = max(int(top), 1)
    width = max(1, math.ceil(top / bins))
    out = [{"lo": i * width + 1, "hi": min((i + 1) * width, top), "count": 0} for i in range(math.ceil(top / width))]
    for v in values:
        out[min(max(v - 1, 0) // width, len(out) - 1)]["count"] += 1
    return out


def _padding(lengths: Sequence[int], batch_size: int) -> dict[str, float | int]:
    """Real and fed (padded) tokens of the batches in this order; ``fed_tokens_x_len``: the fed
    tokens each times its batch's padded length (the attention term of the FLOPs)."""
    real = padded = x_len = 0
    for start in range(0, len(lengths), batch_size):
        batch = lengths[start : start + batch_size]
        real += sum(batch)
        padded += max(batch) * len(batch)
        x_len += max(batch) ** 2 * len(batch)
    return {
        "real_tokens": real,
        "fed_tokens": padded,
        "fed_tokens_x_len": x_len,
        "padding_share": round(1.0 - real / padded, 4) if padded else 0.0,
        "real_tokens_per_batch": round(real / max(1, math.ceil(len(lengths) / batch_size)), 1),
    }


def grouped_order(lengths: Sequence[int], batch_size: int, seed: int) -> list[int]:
    """Lengths in ``group_by_length`` order: shuffled, cut into mega-batches, each sorted longest first."""
    order = list(lengths)
    random.Random(seed).shuffle(order)
    mega = max(1, MEGABATCH_MULT * batch_size)
    out: list[int] = []
    for start in range(0, len(order), mega):
        out += sorted(order[start : start + mega], reverse=True)
    return out


@dataclass(frozen=True)
class DataStats:
    samples: int
    dropped: int
    truncated: int
    truncated_share: float
    max_seq_len: int
    batch_size: int
    tokens: dict[str, float | int]  # the mean has one decimal, the rest are whole
    histogram: list[dict[str, int]]
    random_order: dict[str, float | int]
    grouped: dict[str, float | int]
    longest: list[dict[str, int]]

    def to_dict(self) -> dict:
        return asdict(self)


def summarise(
    samples: Iterable[SampleLength], max_seq_len: int, batch_size: int, seed: int = 42, longest: int = 8
) -> DataStats:
    """The figures of ``fttui data`` for one ``max_seq_len`` and batch size."""
    all_samples = list(samples)
    kept = [s for s in all_samples if s.kept(max_seq_len)]
    lengths = [s.length(max_seq_len) for s in kept]
    ordered = sorted(lengths)
    truncated = sum(1 for s in kept if s.raw > max_seq_len)
    shuffled = list(lengths)
    random.Random(seed).shuffle(shuffled)
    batch_size = max(1, int(batch_size))
    tops = sorted(kept, key=lambda s: (-s.length(max_seq_len), s.index))[:longest]
    return DataStats(
        samples=len(kept),
        dropped=len(all_samples) - len(kept),
        truncated=truncated,
        truncated_share=round(truncated / len(kept), 4) if kept else 0.0,
        max_seq_len=int(max_seq_len),
        batch_size=batch_size,
        tokens={
            "min": ordered[0] if ordered else 0,
            "p50": percentile(ordered, 50),
            "p90": percentile(ordered, 90),
            "p99": percentile(ordered, 99),
            "max": ordered[-1] if ordered else 0,
            "mean": round(sum(ordered) / len(ordered), 1) if ordered else 0,
            "total": sum(ordered),
        },
        histogram=histogram(lengths, max(max_seq_len if truncated else (ordered[-1] if ordered else 1), 1)),
        random_order=_padding(shuffled, batch_size),
        grouped=_padding(grouped_order(lengths, batch_size, seed), batch_size),
        longest=[{"index": s.index, "tokens": s.length(max_seq_len), "raw": s.raw} for s in tops],
    )


def sparkline(hist: Sequence[dict[str, int]]) -> str:
    """The histogram as one line of block characters (for the app and plain output)."""
    blocks = " ▁▂▃▄▅▆▇█"
    peak = max((b["count"] for b in hist), default=0)
    if not peak:
        return ""
    return "".join(blocks[0 if not b["count"] else max(1, round(b["count"] / peak * 8))] for b in hist)
