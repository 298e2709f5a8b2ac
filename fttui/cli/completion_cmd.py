"""``fttui completion``: a shell completion script for the whole command line."""

from __future__ import annotations

import sys

from fttui.cli.conventions import SHELLS, completion_script

__all__ = ["add_parser", "cmd_completion"]


def cmd_completion(args) -> int:
    sys.stdout.write(completion_script(args.root_parser, args.shell))
    return 0


def add_parser(sub) -> None:
    """The subcommand ``completion``: its arguments and handler."""
    p = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print a completion script for bash or zsh: subcommands, options, their "
        'choices and profile names. Install: eval "$(fttui completion bash)" '
        "in ~/.bashrc (zsh: ~/.zshrc with `completion zsh`).",
    )
    p.add_argument("shell", choices=list(SHELLS), help="bash or zsh")
    p.set_defaults(handler=cmd_completion)
