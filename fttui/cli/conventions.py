"""Command-line conventions shared by every subcommand: ``--json`` wherever data is printed,
``-v`` for debug logs, and shell completion generated from the parser itself.

:func:`finish_parser` is applied to the finished parser (so a new subcommand or option gets the
conventions without a line of its own); :func:`completion_script` writes a bash or zsh completion
script from the same parser: subcommands, their options, the choices of an option, and profile
names for ``--profile`` (asked from ``fttui profiles --names`` when the user presses TAB).
"""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["SHELLS", "completion_script", "finish_parser", "follow_as_json", "run_json", "setup_logging", "subcommands"]

SHELLS = ("bash", "zsh")


def subcommands(ap: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """name -> parser of each subcommand."""
    for action in ap._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions if a.option_strings]


def finish_parser(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give every subcommand ``-v`` and, where it prints data as ``--format json``, ``--json``."""
    ap.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="debug logs on stderr (what is launched, read and written); -vv for more",
    )
    helps = {
        c.dest: c.help for a in ap._actions if isinstance(a, argparse._SubParsersAction) for c in a._choices_actions
    }
    for name, p in subcommands(ap).items():
        text = helps.get(name)
        if not p.description and text:  # `fttui NAME --help` says what NAME does
            p.description = text[:1].upper() + text[1:] + "."
        opts = {s for a in _options(p) for s in a.option_strings}
        fmt = next((a for a in _options(p) if "--format" in a.option_strings), None)
        if fmt is not None and "--json" not in opts and "json" in (fmt.choices or ()):
            p.add_argument(
                "--json",
                dest="format",
                action="store_const",
                const="json",
                help="print JSON (the same as --format json)",
            )
        if "-v" not in opts:
            # SUPPRESS: a -v given before the subcommand is not reset by the subcommand's default
            p.add_argument(
                "-v", "--verbose", action="count", default=argparse.SUPPRESS, help="debug logs on stderr; -vv for more"
            )
    return ap


def setup_logging(verbosity: int) -> None:
    """``-v``: fttui's debug logs on stderr (and for the processes it starts: FTTUI_LOG_LEVEL)."""
    level = os.environ.get("FTTUI_LOG_LEVEL", "").upper()
    if not verbosity and not level:
        return
    import logging

    if verbosity:
        level = "DEBUG"
        os.environ["FTTUI_LOG_LEVEL"] = "DEBUG"  # the supervisor and worker log the same way
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("fttui %(levelname).1s %(name)s: %(message)s"))
    log = logging.getLogger("fttui")
    log.addHandler(handler)
    log.setLevel(level)
    if verbosity > 1:
        logging.getLogger().setLevel(logging.DEBUG)  # -vv: the libraries' own debug logs too


def _words(p: argparse.ArgumentParser) -> str:
    return " ".join(s for a in _options(p) for s in a.option_strings)


def _choices(ap: argparse.ArgumentParser) -> list[tuple[str, str, str]]:
    """(subcommand or "", option, space-separated choices) of every option with choices."""
    out = []
    for name, p in [("", ap), *subcommands(ap).items()]:
        for a in _options(p):
            if a.choices and not isinstance(a, argparse._SubParsersAction):
                for s in a.option_strings:
                    out.append((name, s, " ".join(str(c) for c in a.choices)))
    return out


def _positional_choices(ap: argparse.ArgumentParser) -> dict[str, str]:
    """subcommand -> choices of its first positional argument (``results show|export|import``)."""
    out = {}
    for name, p in subcommands(ap).items():
        for a in p._actions:
            if not a.option_strings and a.choices and not isinstance(a, argparse._SubParsersAction):
                out[name] = " ".join(str(c) for c in a.choices)
                break
    return out


def completion_script(ap: argparse.ArgumentParser, shell: str, prog: str = "fttui") -> str:
    """A completion script for ``shell`` (bash or zsh; zsh loads the bash one through
    ``bashcompinit``). Install: ``eval "$(fttui completion bash)"`` in ~/.bashrc."""
    if shell not in SHELLS:
        raise ValueError(f"shell must be one of {', '.join(SHELLS)}")
    subs = subcommands(ap)
    fn = f"_{prog}_complete"
    lines = [f"# {prog} completion for {shell}; generated by `{prog} completion {shell}`"]
    if shell == "zsh":
        lines += ["autoload -U +X bashcompinit && bashcompinit"]
    lines += [
        f"{fn}() {{",
        "    local cur prev cmd i",
        '    cur="${COMP_WORDS[COMP_CWORD]}"',
        '    prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    cmd=""',
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        case "${COMP_WORDS[i]}" in',
        f'            {"|".join(subs)}) cmd="${{COMP_WORDS[i]}}"; break ;;',
        "        esac",
        "    done",
        '    case "$prev" in',
        # profile names are data: read line by line and matched as text, never expanded by
        # compgen -W (which would run $(...) and backticks inside a name)
        "        --profile|-p)",
        "            COMPREPLY=()",
        "            local name",
        "            while IFS= read -r name; do",
        '                [[ "$name" == "$cur"* ]] && COMPREPLY+=("$name")',
        f"            done < <({prog} profiles --names 2>/dev/null)",
        "            return ;;",
        '        --from|--out|--prices) COMPREPLY=($(compgen -f -- "$cur")); return ;;',
        "    esac",
    ]
    for name, opt, choices in _choices(ap):
        test = f'"$prev" == "{opt}"' + (f' && "$cmd" == "{name}"' if name else "")
        lines.append(f'    if [[ {test} ]]; then COMPREPLY=($(compgen -W "{choices}" -- "$cur")); return; fi')
    lines += ['    case "$cmd" in']
    positional = _positional_choices(ap)
    for name, p in subs.items():
        words = f"{_words(p)} {positional.get(name, '')}".strip()
        lines.append(f'        {name}) COMPREPLY=($(compgen -W "{words}" -- "$cur")) ;;')
    lines += [
        f'        *) COMPREPLY=($(compgen -W "{" ".join(subs)} {_words(ap)}" -- "$cur")) ;;',
        "    esac",
        "}",
        f"complete -o default -F {fn} {prog}",
    ]
    return "\n".join(lines) + "\n"


def run_json(rd, attempts: list[str] | None = None) -> str:
    """A run as JSON (``run --json``, ``attach --json``, ``cancel --json``): its id, directory,
    ``status.json`` (null while live) and summary row (``row.json``; null until written);
    ``attempts``: the run ids of a chain that recovered from out of memory, first to last."""
    import json

    final = rd.final_status()
    status = final.to_dict() if final is not None else None
    doc = {"run_id": rd.run_id, "run_dir": str(rd.path), "status": status, "row": rd.row()}
    return json.dumps(doc | ({"attempts": attempts} if attempts else {}), indent=1, default=str)


def follow_as_json(rd, follow) -> int:
    """``follow()`` (a view that prints progress) with its lines on stderr, then the run as JSON on
    stdout: a script reads one JSON document whatever the run printed."""
    import contextlib

    from fttui.core.run.control.watch import attempts

    with contextlib.redirect_stdout(sys.stderr):
        code = follow()
    chain = attempts(rd)  # a run continued after an out of memory: the last attempt, naming them all
    print(run_json(chain[-1], [r.run_id for r in chain] if len(chain) > 1 else None), flush=True)
    return code
