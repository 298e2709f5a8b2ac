"""What several subcommands share: the profile arguments (``--profile``, ``--from``, ``--set``,
the limit flags), the profile they resolve to, and whether the terminal can show the app."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

from fttui.core.base.errors import FttuiError
from fttui.core.base.fmt import rel_path

if TYPE_CHECKING:
    from fttui.core.profiles.typed import Profile

__all__ = ["add_profile_args", "resolve", "is_tty", "gpus_given"]


def add_profile_args(p) -> None:
    p.add_argument("--profile", "-p", help="profile name or path to a .toml file")
    p.add_argument(
        "--from",
        dest="from_config",
        metavar="FILE.yaml",
        help="a LLaMA-Factory or axolotl training config instead of a profile "
        "(`fttui profiles --from FILE.yaml` shows the profile it becomes)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a profile key (dotted, e.g. train.batch_size=8); repeatable",
    )
    p.add_argument("--gpu-memory-limit", metavar="SIZE", help="cap each training process's CUDA memory (e.g. 24GiB)")
    p.add_argument(
        "--host-memory-limit", metavar="SIZE", help="cap the address space the training processes may add (e.g. 2GiB)"
    )


def is_tty() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty() and os.environ.get("TERM", "") != "dumb"


def resolve(args) -> Profile:
    from fttui.core.profiles import load_profile

    overrides = list(getattr(args, "overrides", []) or [])
    if getattr(args, "gpu_memory_limit", None):
        overrides.append(f"limits.gpu_memory={json.dumps(args.gpu_memory_limit)}")
    if getattr(args, "host_memory_limit", None):
        overrides.append(f"limits.host_memory={json.dumps(args.host_memory_limit)}")
    if getattr(args, "on_oom", None):  # fttui run --on-oom shrink
        overrides.append(f"train.on_oom={json.dumps(args.on_oom)}")
    from_config = getattr(args, "from_config", None)
    if from_config and args.profile:
        raise FttuiError("give --profile or --from, not both")
    if from_config:
        from fttui.core.profiles.foreign import load_config_profile, unmapped_line

        resolved, mapped = load_config_profile(from_config, overrides)
        if mapped.unmapped:
            print(unmapped_line(mapped), file=sys.stderr)
        if mapped.deepspeed_file is not None:
            print(f"{mapped.where}: DeepSpeed config {rel_path(mapped.deepspeed_file.resolve())}", file=sys.stderr)
        if mapped.gpu_note and not gpus_given(overrides):
            print(f"{mapped.where}: {mapped.gpu_note}", file=sys.stderr)
        return resolved
    if not args.profile:
        raise FttuiError("give a profile: --profile NAME (`fttui profiles` lists them) or --from FILE.yaml")
    resolved = load_profile(args.profile, overrides)
    import logging

    logging.getLogger("fttui.cli").debug(
        "profile %s from %s (%s)%s",
        resolved.name,
        resolved.source,
        resolved.origin,
        f", overrides {overrides}" if overrides else "",
    )
    return resolved


def gpus_given(overrides) -> bool:
    """An override sets the GPU count (``gpus=N`` or ``devices.gpus=N``)."""
    return any(str(o).split("=", 1)[0].strip() in ("gpus", "devices.gpus") for o in overrides or ())
