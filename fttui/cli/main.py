"""The `fttui` command.

Exit codes: 0 completed (or success), 1 failed, 2 bad input (profile, dataset, arguments),
3 out of memory, 4 cancelled, 130 interrupted before launch.
"""

from __future__ import annotations

import os
import sys

from fttui import __version__
from fttui.cli.common import is_tty
from fttui.core.base.constants import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK
from fttui.core.base.errors import FttuiError

#: the subcommands' modules, in the order ``fttui --help`` lists them: each owns its arguments and
#: its handler (``add_parser(sub)`` sets ``handler``)
COMMAND_MODULES = (
    "run_cmd",
    "submit_cmd",
    "profiles_cmd",
    "results_cmd",
    "runs_cmd",
    "stacks_cmd",
    "probe_cmds",
    "report_cmd",
    "data_cmd",
    "estimate_cmd",
    "plan_cmd",
    "watch_cmd",
    "completion_cmd",
)


def build_parser():
    import argparse
    import importlib

    from fttui.cli.conventions import finish_parser

    ap = argparse.ArgumentParser(prog="fttui", description="Launch, watch and record LLM fine-tuning runs.")
    ap.add_argument("--version", action="version", version=f"fttui {__version__}")
    ap.add_argument("--profile", "-p", help="launch this profile and open its run screen")
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --profile: override a profile key (dotted, e.g. train.batch_size=8); repeatable",
    )
    ap.add_argument("--headless", action="store_true", help="no app: plain progress lines")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"fttui.cli.{name}").add_parser(sub)
    ap.set_defaults(root_parser=ap)  # `fttui completion` walks the whole parser
    return finish_parser(ap)


def cmd_app(args) -> int:
    if args is not None and args.profile:
        from fttui.cli.run_cmd import cmd_run

        args.detach = False
        return cmd_run(args)
    if not is_tty():
        print(
            "fttui: the app needs a terminal; use `fttui run --profile NAME --headless` or `fttui --profile NAME`",
            file=sys.stderr,
        )
        return 2
    from fttui.tui.app import run_app

    return run_app()


def main(argv: list[str] | None = None) -> int:
    from fttui.core.base.paths import resolve_home

    try:  # a number fttui's processes read from the environment, checked before anything is written
        from fttui.core.base.envnumbers import check_env

        resolve_home()  # a relative FTTUI_HOME, resolved once against the folder fttui started in
        check_env()
    except FttuiError as e:
        print(f"fttui: {e}", file=sys.stderr)
        return e.exit_code
    if argv is None and len(sys.argv) == 1 and is_tty() and os.environ.get("FTTUI_NO_APP") != "1":
        # bare `fttui` on a terminal: the app at once (no parser to build before its first frame)
        if os.environ.get("FTTUI_LOG_LEVEL"):
            from fttui.cli.conventions import setup_logging

            setup_logging(0)
        try:
            return cmd_app(None)
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
    args = build_parser().parse_args(argv)
    from fttui.cli.conventions import setup_logging

    setup_logging(getattr(args, "verbose", 0) or 0)
    try:
        if args.cmd is None:
            return cmd_app(args)
        return args.handler(args)
    except FttuiError as e:
        from fttui.core.base.inert import inert
        from fttui.core.base.redact import mask_text

        print(f"fttui: {inert(mask_text(str(e)))}", file=sys.stderr)  # one line, whatever it quotes
        return e.exit_code
    except KeyboardInterrupt:
        print("fttui: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except OSError as e:  # the machine said no (a read-only or full disk, a folder of another user)
        if getattr(args, "verbose", 0):
            raise
        from fttui.core.base.inert import inert

        print(f"fttui: {inert(str(e))} (-v shows where)", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
