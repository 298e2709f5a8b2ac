"""``fttui profiles``: list the profiles, or show the profile a YAML config becomes."""

from __future__ import annotations

import json
import sys

from fttui.core.base.errors import FttuiError, ProfileError
from fttui.core.base.fmt import rel_path
from fttui.core.base.inert import inert

__all__ = ["add_parser", "cmd_profiles"]


def cmd_profiles(args) -> int:
    from fttui.core.profiles import discover, load_profile, profile_summary
    from fttui.core.profiles.discovery import valid_name

    if args.from_config:
        from fttui.core.profiles.foreign import load_config_profile, profile_toml, with_overrides

        overrides = list(getattr(args, "overrides", []) or [])
        try:
            _, mapped = load_config_profile(args.from_config, overrides)  # checked as the run would check it
            mapped = with_overrides(mapped, overrides)
        except ProfileError as e:  # the mapping stands, the profile is refused: show both
            from fttui.core.profiles.foreign import read_config

            mapped = read_config(args.from_config)  # a config that does not even map: its one line
            mapped.notes.insert(
                0,
                f"REFUSED: fttui run / estimate / probe / sweep --from refuse this profile: "
                f"{e.key + ': ' if e.key else ''}{e.message}" + (f" ({e.hint})" if e.hint else ""),
            )
        if args.format == "json":
            print(
                json.dumps(
                    {
                        "tool": mapped.tool,
                        "profile": mapped.data,
                        "notes": mapped.notes,
                        "unmapped": [{"key": k, "value": v, "why": why} for k, v, why in mapped.unmapped],
                    },
                    indent=2,
                    default=str,
                )
            )
        else:
            sys.stdout.write(profile_toml(mapped))
        return 0
    if args.names:
        # only names a profile may have (valid_name): nothing in them a shell would expand
        print("\n".join(ref.name for ref in discover() if valid_name(ref.name)))
        return 0
    items, errors = [], []
    for ref in discover():
        try:
            items.append(profile_summary(load_profile(str(ref.path))) | {"origin": ref.origin})
        except FttuiError as e:
            errors.append(str(e))
    if args.format == "json":
        print(json.dumps(items, indent=2))
    else:
        from fttui.core.results.tables import to_text

        headers = ["name", "model", "method", "batch", "accum", "gpus", "seq_len", "dataset", "origin", "source"]
        body = [
            [
                str(i["name"]),
                str(i["model"]),
                str(i["method"]),
                str(i["batch_size"]),
                str(i["grad_accum"]),
                str(i["gpus"]),
                str(i["max_seq_len"]),
                str(i["dataset"]),
                i["origin"],
                rel_path(i["source"]),
            ]
            for i in items
        ]
        sys.stdout.write(to_text(headers, body))
    for message in errors:  # a file's name quoted raw would reach the terminal
        print(f"warning: {inert(message)}", file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    """The subcommand ``profiles``: its arguments and handler."""
    p = sub.add_parser("profiles", help="list the profiles, or show the profile a YAML config becomes")
    p.add_argument("--format", choices=["table", "json"], default="table", help="a table (default) or JSON")
    p.add_argument("--names", action="store_true", help="only the profile names, one per line (for completion)")
    p.add_argument(
        "--from",
        dest="from_config",
        metavar="FILE.yaml",
        help="print the profile (TOML) a LLaMA-Factory or axolotl config maps to, with the keys that do not map",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --from: override a key of the mapped profile (e.g. devices.gpus=8); repeatable",
    )
    p.set_defaults(handler=cmd_profiles)
