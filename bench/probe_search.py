"""How many model loads the max_seq_len probe's search needs, over simulated growth curves with
a kink (no training: the simulator of tests/unit/test_probe_band.py, whose processes fit while
their peak stays within a budget and report their headroom; in-process trials fail a fifth early).

    .venv/bin/python bench/probe_search.py

Prints the count of curves per number of loads (of 1,152: slope 0.1 to 0.15 MiB per token, 0 to
0.4 more past a knee at 200 to 275 tokens, boundaries 266 to 281), and the share closed within
6 and 7 loads (a max_seq_len probe has MAX_LOADS + SEQ_EXTRA_LOADS). Figures: docs/bench-probe.md.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.unit.test_probe_band import Curve, _sim_prober  # noqa: E402


def main() -> int:
    loads: Counter[int] = Counter()
    for a in (0.1, 0.12, 0.125, 0.13, 0.135, 0.15):
        for k in (0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4):
            for knee in (200, 240, 250, 260, 270, 275):
                for b in (281.5, 278.5, 275.5, 266.5):
                    def peak(v, a=a, k=k, knee=knee):
                        return a * v + max(0, k * (v - knee))

                    p = _sim_prober(Curve(peak, peak(b)), lo=16, hi=512)
                    p.param, p.max_loads = "max_seq_len", 12
                    res = p.run()
                    loads[res.model_loads if res.exact else 99] += 1
    n = sum(loads.values())
    print("loads: curves  " + "  ".join(f"{k if k != 99 else 'open'}: {v}" for k, v in sorted(loads.items())))
    for m in (6, 7):
        print(f"closed within {m} loads: {sum(v for k, v in loads.items() if k <= m) / n:.1%} of {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
