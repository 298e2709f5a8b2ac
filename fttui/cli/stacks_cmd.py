"""`fttui stacks RUN`: where each rank of a live run is, from its Python stack, and where a hang is
in one sentence (issue 39 item 2: fttui.core.run.processes.hang)."""

from __future__ import annotations

import sys

from fttui.core.base.errors import FttuiError


def cmd_stacks(args) -> int:
    from fttui.cli.runs_cmd import _find_run
    from fttui.core.run.processes import hang, stacks

    try:
        rd = _find_run(args.run, live_only=True)
    except FttuiError as e:
        print(f"fttui: {e}", file=sys.stderr)
        return 2
    where = hang.ask(rd.path)
    if not where.dumps:
        print(f"fttui: run {rd.run_id} has no rank that started training yet", file=sys.stderr)
        return 2
    for r in where.dumps:
        print(r.line())
    print(f"where: {where.sentence}")
    print(f"the stacks (every thread): {rd.path / stacks.STACKS_DIR}; every rank's answer: {where.path}")
    return 0 if all(r.answered for r in where.ranks) else 1


def add_parser(sub) -> None:
    """The subcommand ``stacks``: its arguments and handler."""
    p = sub.add_parser("stacks", help="each rank's Python stack of a live run (where a hang is)")
    p.add_argument("run", nargs="?", help="run id or prefix (default: the latest live run)")
    p.set_defaults(handler=cmd_stacks)
