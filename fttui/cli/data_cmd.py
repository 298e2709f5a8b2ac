"""`fttui data`: the profile's data after the template and truncation, tokenised with its tokenizer.

Figures from :func:`fttui.core.experiments.datalens.data_stats` (definitions in
:mod:`fttui.core.data.lengths`); a progress bar on a terminal while a large file is tokenised.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from contextlib import contextmanager

from fttui.cli.common import add_profile_args, resolve
from fttui.core.base.fmt import rel_path


def add_parser(sub) -> None:
    p = sub.add_parser(
        "data",
        help="your data's token lengths: percentiles, truncation, padding per batch",
        description="Tokenise the profile's data set with its tokenizer and template (cached by the "
        "file's hash and the tokenizer) and show the sample count, token-length percentiles "
        "and histogram, the share truncated at max_seq_len, and real vs padded tokens per "
        "batch at the profile's batch size, in random order and grouped by length.",
    )
    add_profile_args(p)
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        metavar="N",
        help="padding figures at this batch size (default: the profile's)",
    )
    p.add_argument("--json", action="store_true", help="the figures as JSON")
    p.set_defaults(handler=cmd_data)


@contextmanager
def _progress_bar(enabled: bool):
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("tokenising"),
        BarColumn(),
        DownloadColumn(),
        TextColumn("{task.fields[n]} records"),
        TimeRemainingColumn(),
        transient=True,
        console=None,
    ) as bar:
        task = bar.add_task("tok", total=None, n=0)

        def update(done: int, total: int, records: int) -> None:
            bar.update(task, completed=done, total=total, n=records)

        yield update


def render(stats, profile_name: str, source: str, tokenizer: str, cached: bool | None) -> str:
    from fttui.core.data.lengths import sparkline

    s = stats
    t = s.tokens
    r, g = s.random_order, s.grouped
    lines = [
        f"{profile_name}: {source}, tokenizer {tokenizer}, max_seq_len {s.max_seq_len}, batch {s.batch_size}",
        f"{s.samples} samples" + (f" ({s.dropped} dropped: no response token within max_seq_len)" if s.dropped else ""),
        f"tokens per sample: min {t['min']}, p50 {t['p50']}, p90 {t['p90']}, p99 {t['p99']}, "
        f"max {t['max']} (mean {t['mean']}, {t['total']:,} in all)",
        f"truncated at {s.max_seq_len}: {s.truncated} samples ({s.truncated_share:.1%})",
        f"lengths {s.histogram[0]['lo']}..{s.histogram[-1]['hi']}: [{sparkline(s.histogram)}]" if s.histogram else "",
        f"per batch of {s.batch_size}: random order {r['real_tokens_per_batch']:g} real tokens, "
        f"{r['padding_share']:.1%} of the tokens fed are padding; grouped by length "
        f"{g['padding_share']:.1%} padding",
        "longest: "
        + ", ".join(
            f"#{x['index']} {x['tokens']}" + (f" (of {x['raw']})" if x["raw"] > x["tokens"] else "") for x in s.longest
        ),
        "(lengths from the cache: tokenised before)" if cached else "",
    ]
    return "\n".join(ln for ln in lines if ln) + "\n"


@contextlib.contextmanager
def _ended_cleanly():
    """SIGTERM and SIGHUP (a closed terminal) end the measurement as Ctrl-C does: its worker is
    stopped and its scratch folder removed (they left ``cache/data/tmp*`` behind: issue 36)."""

    def stop(signum, _frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def cmd_data(args, resolve=resolve) -> int:
    from fttui.core.data.records import check_file
    from fttui.core.experiments.datalens import data_stats, tokenizer_spec

    profile = resolve(args)
    if args.batch_size is not None and args.batch_size < 1:
        from fttui.core.base.errors import FttuiError

        raise FttuiError("--batch-size: must be >= 1")
    if (profile.data.source or "synthetic") != "synthetic":
        check_file(profile.data.source)  # a named pipe, a device: one line, before anything is read
    with _progress_bar(sys.stderr.isatty() and not args.json) as bar, _ended_cleanly():
        stats, cached = data_stats(profile, args.batch_size, bar)
    source = profile.data.source or "synthetic"
    if args.json:
        out = {
            "profile": profile.name,
            "source": source,
            "tokenizer": tokenizer_spec(profile.model),
            "cached": cached,
            **stats.to_dict(),
        }
        print(json.dumps(out, indent=2))
        return 0
    shown = source if source == "synthetic" else rel_path(source)
    sys.stdout.write(render(stats, str(profile.name or ""), shown, tokenizer_spec(profile.model), cached))
    return 0
