"""`fttui data`: token lengths of a profile's data, checked against an independent count."""

from __future__ import annotations

import json
import random

from fttui.core.data.lengths import SampleLength, grouped_order, histogram, percentile, sparkline, summarise
from tests.conftest import run_fttui


def test_percentile_is_nearest_rank():
    vals = list(range(1, 11))
    assert [percentile(vals, q) for q in (50, 90, 99, 100)] == [5, 9, 10, 10]
    assert percentile([7], 50) == 7 and percentile([], 50) == 0


def test_histogram_counts_every_value_once():
    vals = [1, 2, 16, 17, 100, 128]
    hist = histogram(vals, 128, bins=8)
    assert sum(b["count"] for b in hist) == len(vals)
    assert hist[0] == {"lo": 1, "hi": 16, "count": 3} and hist[-1]["hi"] == 128


def test_summary_padding_and_truncation_by_hand():
    samples = [SampleLength(0, 10, 2), SampleLength(1, 30, 5), SampleLength(2, 50, 40), SampleLength(3, 20, -1)]
    s = summarise(samples, max_seq_len=32, batch_size=2, seed=0)
    # #2 loses every response token at 32 (first at 40), #3 has none at all within its 20
    assert s.samples == 2 and s.dropped == 2
    assert s.tokens["max"] == 30 and s.truncated == 0
    s = summarise(samples, max_seq_len=45, batch_size=4, seed=0)
    assert s.samples == 3 and s.truncated == 1 and s.truncated_share == round(1 / 3, 4)
    # one batch of 3 padded to 45: 135 fed, 10 + 30 + 45 real
    assert s.random_order["fed_tokens"] == 135 and s.random_order["real_tokens"] == 85


def test_grouping_by_length_never_pads_more_on_a_long_tail():
    rng = random.Random(1)
    lens = [rng.randint(20, 200) for _ in range(400)] + [rng.randint(1000, 4000) for _ in range(10)]
    samples = [SampleLength(i, n, 0) for i, n in enumerate(lens)]
    s = summarise(samples, 2048, 8)
    assert s.grouped["padding_share"] < s.random_order["padding_share"]
    assert sorted(grouped_order(lens, 8, 0)) == sorted(lens)


def _byte_len(rec: dict) -> int:
    """The byte tokenizer's count of fttui's chat template, written out independently:
    BOS, then per message '<|role|>\\n' + content + (EOS if assistant) + '\\n'."""
    n = 1
    for m in rec["messages"]:
        n += len(f"<|{m['role']}|>\n".encode()) + len(m["content"].encode()) + 1
        n += 1 if m["role"] == "assistant" else 0
    return n


def _long_tail_chat(path, n=60, seed=3):
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            long = i % 10 == 0  # a tenth of the samples are far longer than the rest
            answer = "x" * (rng.randint(400, 900) if long else rng.randint(10, 80))
            rec = {"messages": [{"role": "user", "content": "q" * rng.randint(5, 30)},
                                {"role": "assistant", "content": answer}]}
            f.write(json.dumps(rec) + "\n")


def test_fttui_data_json_equals_an_independent_count(tmp_path):
    data = tmp_path / "chat.jsonl"
    _long_tail_chat(data)
    recs = [json.loads(line) for line in data.read_text().splitlines()]
    raw = sorted(_byte_len(r) for r in recs)
    args = ["data", "--profile", "tiny-lora", "--set", f"data.source={data}", "--set", "data.max_seq_len=256", "--json"]
    from fttui.core.profiles import load_profile
    from fttui.tui.details import data_lengths

    prof = load_profile("tiny-lora", [f"data.source={data}", "data.max_seq_len=256"])
    assert "not measured yet" in str(data_lengths(prof))  # the app's details pane never tokenises
    p = run_fttui(*args, check=True)
    out = json.loads(p.stdout)
    kept = sorted(min(n, 256) for n in raw)
    assert out["samples"] == len(recs) and out["dropped"] == 0 and out["cached"] is False
    assert out["tokens"]["min"] == kept[0] and out["tokens"]["max"] == kept[-1]
    assert out["tokens"]["p50"] == kept[29] and out["tokens"]["p90"] == kept[53]
    assert out["truncated_share"] == round(sum(n > 256 for n in raw) / len(raw), 4) == 0.1
    assert sum(b["count"] for b in out["histogram"]) == len(recs)
    again = json.loads(run_fttui(*args, check=True).stdout)
    assert again["cached"] is True and again["tokens"] == out["tokens"]
    text = run_fttui(*args[:-1], check=True).stdout
    assert "truncated at 256: 6 samples (10.0%)" in text
    # the app's details pane, from the cache: the same figures and the histogram's sparkline
    pane = str(data_lengths(prof))
    assert pane.startswith(f"{len(recs)} samples, p50 {kept[29]}  p90 {kept[53]}  max {kept[-1]}, 10% truncated")
    assert pane.rstrip().endswith(sparkline(out["histogram"]).rstrip())


def test_fttui_data_bad_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    p = run_fttui("data", "--profile", "tiny-lora", "--set", f"data.source={bad}")
    assert p.returncode == 2 and "assistant" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
