"""`fttui results`: show the stored rows, export them, import other machines' rows."""

from __future__ import annotations

import logging
import os
import sys

from fttui.cli.common import is_tty
from fttui.core.base.errors import FttuiError


def cmd_results(args, is_tty=is_tty) -> int:
    from fttui.core.base import paths
    from fttui.core.results import tables
    from fttui.core.results.store import Store
    from fttui.core.run.supervising.recover import recover_all

    logging.getLogger("fttui.cli").debug("results store %s", paths.store_path())
    recover_all()
    if args.action == "export":
        return _results_export(args)
    if args.action == "import":
        return _results_import(args)
    if args.action == "delete":
        return _results_delete(args)
    if args.files or args.out:
        raise FttuiError("FILE and --out go with `fttui results export` / `fttui results import`")
    with Store() as store:
        rows = store.rows(kind=None if args.kind == "all" else args.kind, limit=args.limit or None)
    if args.format == "json":
        sys.stdout.write(tables.to_json(rows))
        return 0
    if args.format in ("csv", "markdown"):
        headers, body = tables.reference_table(rows)
        sys.stdout.write((tables.to_csv if args.format == "csv" else tables.to_markdown)(headers, body))
        return 0
    from fttui.core.results.terminal import fit_table, terminal_width

    # the columns that fit the terminal (COLUMNS, else the terminal, else 100 on a pipe)
    sys.stdout.write(tables.to_text(*fit_table(rows, terminal_width())))
    return 0


def _results_delete(args) -> int:
    """``fttui results delete RUN_ID``: remove one stored row (an exact run id; the run directory
    is left as it is)."""
    from fttui.core.results.store import Store

    if len(args.files) != 1:
        raise FttuiError("`fttui results delete` takes one RUN_ID (the exact id `fttui results --json` shows)")
    with Store() as store:
        if not store.delete(args.files[0]):
            raise FttuiError(f"no stored row has run id {args.files[0]!r}")
    print(f"deleted the row of {args.files[0]}")
    return 0


def _limit(text: str) -> int:
    """``--limit N``: 0 (every row) to a billion; a larger number is one line, not a traceback."""
    import argparse

    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count: {text!r}") from None
    if not 0 <= n <= 10**9:
        raise argparse.ArgumentTypeError(f"{text} is out of range (0 to 1000000000)")
    return n


def _results_export(args) -> int:
    from pathlib import Path

    from fttui.core.results.exchange import export
    from fttui.core.results.store import Store

    if args.files:
        raise FttuiError("`fttui results export` takes no FILE; use --out FILE")
    with Store() as store:
        if not args.out:
            n = export(store, sys.stdout)
        else:
            import stat
            import tempfile

            out = Path(args.out)
            try:  # never over a device, a folder, a link or a pipe (as root, /dev/null is replaceable)
                st = os.lstat(out)
                if not stat.S_ISREG(st.st_mode):
                    raise FttuiError(f"--out {args.out}: exists and is not a regular file; give a new file name")
            except FileNotFoundError:
                pass
            except OSError as e:
                raise FttuiError(f"--out {args.out}: {e.strerror or e}") from None
            tmp = None
            try:  # a new file of our own (O_EXCL, 0600) beside the target, then renamed over it
                fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    n = export(store, f)
                os.replace(tmp, out)
                tmp = None
            except OSError as e:
                raise FttuiError(f"--out {args.out}: {e.strerror or e}") from None
            finally:
                if tmp is not None:
                    Path(tmp).unlink(missing_ok=True)
    print(f"exported {n} row(s)" + (f" to {args.out}" if args.out else ""), file=sys.stderr)
    return 0


def _results_import(args) -> int:
    from fttui.core.results.exchange import import_files
    from fttui.core.results.store import Store

    if not args.files:
        raise FttuiError("`fttui results import` needs at least one FILE (made by `fttui results export`)")
    with Store() as store:
        rep = import_files(store, args.files)
    print(f"imported {len(rep.added)} row(s); {len(rep.same)} already there; {len(rep.conflicts)} conflict(s)")
    for rid, cols in rep.conflicts:
        print(
            f"conflict: {rid} is stored with other figures ({', '.join(cols[:6])}"
            f"{' ...' if len(cols) > 6 else ''}); kept the stored row",
            file=sys.stderr,
        )
    return 1 if rep.conflicts else 0


def add_parser(sub) -> None:
    """The subcommand ``results``: its arguments and handler."""
    p = sub.add_parser(
        "results",
        help="the stored summary rows; export them, import other machines' rows",
        description="Show the stored summary rows (default), `export` them as JSON lines "
        "(every column and the environment), or `import` such files from other "
        "machines (idempotent by run id; conflicts are reported, never overwritten).",
    )
    p.add_argument(
        "action",
        nargs="?",
        choices=["show", "export", "import", "delete"],
        default="show",
        help="show (default), export, import, or delete RUN_ID (one stored row)",
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="import: export files to read; delete: the run id")
    p.add_argument("--out", metavar="FILE", help="export: write here instead of stdout")
    p.add_argument(
        "--format",
        choices=["table", "markdown", "csv", "json"],
        default="table",
        help="show: a table (default), Markdown, CSV or JSON (every column)",
    )
    p.add_argument(
        "--kind",
        choices=["run", "probe", "sweep", "command", "watch", "all"],
        default="all",
        help="only rows of this kind: runs, probe trials, sweep cells (default all)",
    )
    p.add_argument("--limit", type=_limit, default=0, help="only the latest N rows")
    p.set_defaults(handler=cmd_results)
