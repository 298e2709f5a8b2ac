"""`fttui report`: Markdown tables (stdout) or report.md + CSVs + PNG charts (--out DIR)."""

from __future__ import annotations

import json
import sys

from fttui.core.base.fmt import rel_path
from fttui.core.results.columns import GROUP_BY


def cmd_report(args) -> int:
    from fttui.core.results.filters import filter_rows
    from fttui.core.results.prices import load_prices
    from fttui.core.results.report import build_report, find_row, write_report
    from fttui.core.results.store import Store

    kind = getattr(args, "kind", "all") or "all"
    with Store() as store:
        rows = store.rows(kind=None if kind == "all" else kind)
        baseline = None
        if getattr(args, "baseline", None):
            # the baseline may lie outside the filtered rows (another kind, another GPU)
            baseline = find_row(rows if kind == "all" else store.rows(), args.baseline)
    rows = filter_rows(rows, getattr(args, "where", None) or [])
    prices = load_prices(args.prices) if getattr(args, "prices", None) else None
    if not rows:
        what = [f"kind={kind}"] if kind != "all" else []
        what += list(getattr(args, "where", None) or [])
        print(f"fttui: no stored rows to report{' (' + ', '.join(what) + ')' if what else ''}", file=sys.stderr)
        return 1
    rep = build_report(rows, group_by=getattr(args, "group_by", None), baseline=baseline, prices=prices)
    if getattr(args, "out", None):
        paths = write_report(rep, args.out)
        for p in paths:
            print(rel_path(str(p)))
        return 0
    if getattr(args, "json", False):
        print(json.dumps(rep.to_json_obj(), indent=1, default=str))
        return 0
    sys.stdout.write(rep.to_markdown())
    return 0


def add_parser(sub) -> None:
    """The subcommand ``report``: its arguments and handler."""
    p = sub.add_parser("report", help="Markdown tables, CSVs and PNG charts of the stored rows")
    p.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="keep rows whose column KEY equals VALUE; repeatable (same key twice: either)",
    )
    p.add_argument("--group-by", choices=list(GROUP_BY), help="colour and order the charts' bars by this setting")
    p.add_argument("--baseline", metavar="RUN_ID", help="relative throughput against this run (id or prefix)")
    p.add_argument("--prices", metavar="FILE", help="TOML or CSV: GPU name -> price per card")
    p.add_argument(
        "--out", metavar="DIR", help="write report.md, CSVs and PNG charts here (default: Markdown on stdout)"
    )
    p.add_argument(
        "--kind",
        choices=["run", "probe", "sweep", "command", "watch", "all"],
        default="all",
        help="only rows of this kind (default all)",
    )
    p.add_argument("--json", action="store_true", help="the tables as JSON (raw and shown cells) on stdout")
    p.set_defaults(handler=cmd_report)
