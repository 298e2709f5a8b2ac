"""`fttui probe` and `fttui sweep`."""

from __future__ import annotations

import json
import signal
import sys

from fttui.cli.common import add_profile_args, resolve
from fttui.core.base import fmt
from fttui.core.base.constants import EXIT_CANCELLED, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, PROBE_PARAMS, PROBE_STEPS


def _raise_interrupt(_s, _f):
    raise KeyboardInterrupt


# SIGINT too, explicitly: a process started from a background job of a non-interactive shell
# (a CI script, `cmd &`) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt
# for it: Ctrl-C (or `kill -INT`) would leave the probe running.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


TRIAL_HEADERS = [
    "value",
    "result",
    "clean",
    "load",
    "gpu_mem_mb",
    "torch_reserved_mb",
    "host_rss_mb",
    "s_per_step",
    "samples_per_s",
]


def cmd_probe(args, resolve=resolve) -> int:
    from fttui.core.experiments.boundary import band
    from fttui.core.experiments.probe import Prober, parse_range, trial_cells
    from fttui.core.results.tables import to_markdown, to_text

    resolved = resolve(args)
    lo, hi = parse_range(args.range)
    out = sys.stderr if args.json else sys.stdout

    def on_trial(t):
        fresh = " (fresh launch)" if prober.launches(t.load) else " (fresh process)"
        print(
            f"  {args.param}={t.value}: {'fit' if t.status == 'fit' else 'OOM (' + str(t.oom_kind) + ')'}"
            f"{fresh if t.fresh else ('' if t.clean else ' (after an OOM: guide only)')}"
            f"  host RSS {fmt.mb(t.peak_host_rss_mb)}"
            + (f"  {t.samples_per_s:.2f} samples/s" if t.samples_per_s else ""),
            file=out,
            flush=True,
        )

    start, why = args.start, None
    if start is None:
        from fttui.core.experiments.probe import predicted_start

        start, why = predicted_start(resolved, args.param, lo, hi)
    prober = Prober(
        resolved,
        param=args.param,
        lo=lo,
        hi=hi,
        steps=args.steps,
        start=start,
        repeats=args.repeats,
        data=args.data,
        on_trial=on_trial,
        on_log=lambda s: print(s, file=out, flush=True),
    )
    if why:  # after the Prober has checked its arguments: bad input is one line
        print(why, file=out, flush=True)
    old = {s: signal.signal(s, _raise_interrupt) for s in _STOP_SIGNALS}
    print(
        f"probe {prober.probe_id}: {args.param} in {lo}..{hi}, {args.steps} steps per trial, "
        + (
            "the data's longest samples first"
            if args.data
            else f"worst-case length (every sample {prober.resolved.data.max_seq_len} tokens)"
        )
        + ("; each trial a fresh launch of all ranks" if prober.launched else "")
        + f"; at most {prober.max_loads} {prober.unit}",
        file=out,
        flush=True,
    )
    try:
        res = prober.run()
    except KeyboardInterrupt:
        prober.stop()
        print("fttui: probe interrupted; no process left", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if args.json:
        print(json.dumps(res.to_dict(), indent=2))
    else:
        body = [trial_cells(t) for t in sorted(res.trials, key=lambda t: (t.value, t.load))]
        print()
        print((to_markdown if args.markdown else to_text)(TRIAL_HEADERS, body))
        print(
            f"largest {res.param} that fits: {res.largest_fit}   smallest that fails: {res.smallest_oom}"
            f"   ({'exact' if res.exact else 'NOT exact'}; {res.model_loads} "
            f"{prober.unit}, {len(res.trials)} trials, {fmt.duration(res.wall_s)})"
        )
        print(res.samples_note)
        for m in res.mixed:
            print(f"went both ways: {res.param}={m['value']} fit {m['fit']}x, OOM {m['oom']}x in fresh processes")
        if res.note:
            print(f"note: {res.note}")
    closed = band(res.trials).adjacent or res.exact
    return EXIT_OK if closed else EXIT_ERROR  # an open boundary is not an answer


def cmd_sweep(args, resolve=resolve) -> int:
    from fttui.core.experiments.sweep import Sweeper, parse_grid, render_matrix, render_rows

    resolved = resolve(args)
    grid = parse_grid(args.grid)
    sweeper = Sweeper(
        resolved,
        grid,
        steps=args.steps,
        on_cell=lambda c: print(
            "  "
            + ", ".join(f"{k}={v}" for k, v in c.settings.items())
            + f": {c.status}"
            + (" (a smaller setting ran out of memory)" if c.status == "skipped" else "")
            + (
                f"  {c.row['samples_per_s']:.2f} samples/s"
                if c.row and c.row.get("samples_per_s") and c.status == "completed"
                else ""
            ),
            file=sys.stderr,
            flush=True,
        ),
    )
    n = len(sweeper.cells)
    print(f"sweep {sweeper.sweep_id}: {n} cells, {args.steps} steps each", file=sys.stderr, flush=True)
    old = {s: signal.signal(s, _raise_interrupt) for s in _STOP_SIGNALS}
    try:
        res = sweeper.run()
    except KeyboardInterrupt:
        print("fttui: sweep interrupted; the running cell was cancelled", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    text = f"## {resolved.name}: sweep {res.sweep_id}\n\n" + render_rows(res)
    matrix = render_matrix(res)
    if matrix:
        text += "\n" + matrix
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        print(f"table written to {args.out}", file=sys.stderr)
    if getattr(args, "json", False):
        print(
            json.dumps(
                {
                    "sweep_id": res.sweep_id,
                    "profile": resolved.name,
                    "grid": dict(res.grid),
                    "interrupted": res.interrupted,
                    "cells": [
                        {
                            "settings": c.settings,
                            "status": c.status,
                            "run_id": c.run_id,
                            "skipped_because": c.skipped_because,
                            "row": c.row,
                        }
                        for c in res.cells
                    ],
                },
                indent=1,
                default=str,
            )
        )
    else:
        print(text)
    return EXIT_CANCELLED if res.interrupted else EXIT_OK


def add_parser(sub) -> None:
    """The subcommands ``probe``, ``sweep``: their arguments and handler."""
    p = sub.add_parser("probe", help="find the largest batch size / sequence length that fits")
    add_profile_args(p)
    p.add_argument(
        "--param", choices=list(PROBE_PARAMS), default="batch_size", help="the setting to probe (default batch_size)"
    )
    p.add_argument("--range", default="1..1024", metavar="LO..HI", help="the values to search (default 1..1024)")
    p.add_argument(
        "--steps",
        type=int,
        default=PROBE_STEPS,
        help=f"training steps per trial (default {PROBE_STEPS}: the second is the first with the optimizer's states)",
    )
    p.add_argument("--start", type=int, default=None, help="first value to try (default LO)")
    p.add_argument(
        "--repeats",
        type=int,
        default=0,
        metavar="K",
        help="check both values next to the boundary K more times in fresh processes; a value that "
        "goes both ways makes a band (default 0; at most 4 + 2K model loads)",
    )
    p.add_argument(
        "--data",
        action="store_true",
        help="train each trial on the longest samples of the profile's data set (tokenised and "
        "truncated as a run does; cached like `fttui data`), the longest in the first step, "
        "instead of synthetic samples of max_seq_len tokens",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("--markdown", action="store_true", help="print the trial table as Markdown")
    p.set_defaults(handler=cmd_probe)
    p = sub.add_parser("sweep", help="run a grid of settings and render a reference-style table")
    add_profile_args(p)
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="a dimension of the grid, e.g. batch_size=1,2,4; repeatable",
    )
    p.add_argument("--steps", type=int, default=10, help="training steps per cell (default 10)")
    p.add_argument("--out", help="also write the Markdown table to this file")
    p.add_argument(
        "--json", action="store_true", help="print the cells (settings, status, run id, row) as JSON instead"
    )
    p.set_defaults(handler=cmd_sweep)
