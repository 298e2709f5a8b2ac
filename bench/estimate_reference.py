"""The estimator against the measured tables: the Markdown tables of docs/estimate.md.

    .venv/bin/python bench/estimate_reference.py [--h100]

Without a flag: every memory figure of the reference tables (the copy in
tests/unit/test_estimate.py, REFERENCE_ROWS, checked there against ../shared/reference/*.csv),
predicted with the card size of its row: a summary per table, then one row per figure.
``--h100``: fttui's own runs on an H100 (tests/unit/test_estimate_h100.py, recorded by
bench/estimate_gpu.py). Pure arithmetic: no GPU, no torch.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))

MIB = 1 << 20


def reference() -> None:
    import test_estimate as T

    lines, per_table, oom = [], {}, []
    for table, label, profile, ov, mem, card in T.REFERENCE_ROWS:
        e = T._predict(profile, ov, card)
        peak = max(e.gpu_peak_bytes)
        setting = f"`{profile}` {' '.join(ov)}"
        if mem == "OOM":
            allocated = peak - e.breakdown["allocator"]
            ok = allocated >= card
            oom.append((label, ok))
            verdict = "OOM predicted" if ok else "**fits: missed**"
            lines.append(f"| {table} | {label} | {setting} | OOM | {allocated / MIB:.0f} allocated "
                         f"(card {card / MIB:.0f}) | {verdict} |")
            continue
        errs = [(peak - m) / m for m in mem]
        per_table.setdefault(table, []).extend(errs)
        flag = " **(>15%)**" if any(abs(x) > 0.15 for x in errs) else ""
        lines.append(f"| {table} | {label} | {setting} | {';'.join(f'{m / MIB:.0f}' for m in mem)} "
                     f"| {peak / MIB:.0f} | {', '.join(f'{x:+.1%}' for x in errs)}{flag} |")
    print("| table | figures | max error | mean error | bias | within 15% |")
    print("| --- | --- | --- | --- | --- | --- |")
    everything = [x for v in per_table.values() for x in v]
    for name, errs in [*per_table.items(), ("all", everything)]:
        a = [abs(x) for x in errs]
        print(f"| {name} | {len(errs)} | {max(a):.1%} | {sum(a) / len(a):.1%} | "
              f"{sum(errs) / len(errs):+.1%} | {sum(x <= 0.15 for x in a)} |")
    print(f"\nOOM rows predicted: {sum(ok for _l, ok in oom)} of {len(oom)}")
    print("\n| table | row | profile + overrides | measured MiB (per card) | predicted MiB | error |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(lines))


def h100() -> None:
    import test_estimate_h100 as H

    print("| run | NVML used MiB | torch reserved | torch allocated | predicted | error "
          "| predicted tensors (no context, no allocator slack) | error |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    errs = []
    for label, profile, ov, used, reserved, allocated in H.RUNS:
        e = H._estimate(profile, ov)
        peak = max(e.gpu_peak_bytes)
        tensors = peak - e.breakdown["cuda_context"] - e.breakdown["allocator"]
        err = (peak - used * MIB) / (used * MIB)
        errs.append(abs(err))
        print(f"| {label} | {used:,.0f} | {reserved:,} | {allocated:,} | {peak / MIB:,.0f} | {err:+.1%} "
              f"| {tensors / MIB:,.0f} | {(tensors - allocated * MIB) / (allocated * MIB):+.1%} |")
    print(f"\nmax {max(errs):.1%}, mean {sum(errs) / len(errs):.1%} over {len(errs)} runs")
    for label, profile, ov in H.OOM:
        e = H._estimate(profile, ov)
        print(f"- {label}: out of CUDA memory; predicted {max(e.gpu_peak_bytes) / MIB:,.0f} MiB "
              f"(card {H.H100 / MIB:,.0f} MiB): {'does not fit' if e.fits is False else 'FITS (missed)'}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--h100", action="store_true")
    args = ap.parse_args()
    h100() if args.h100 else reference()
    return 0


if __name__ == "__main__":
    sys.exit(main())
