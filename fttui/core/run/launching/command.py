"""Command runs: any command (``fttui run -- CMD ARGS...``, or a profile's ``[command] argv``)
supervised as a profile run is (docs/commands.md).

The run directory holds the command (``command.json``: ``argv``, ``cwd``, ``kind = "command"``)
and a small ``profile.json`` (the name, the limits, the stall timeout and the command itself); the
supervisor starts the command in its folder under the log writer, which also reads the
Trainer's printed progress (:mod:`fttui.core.run.supervising.logparse`) while no callback writes events.

For a Python command the environment gets fttui's Trainer integration
(:mod:`fttui.integrations.hf`): ``FTTUI_RUN_DIR`` names the run directory, and the folder of
fttui's ``sitecustomize`` goes first on ``PYTHONPATH``, so that a ``transformers.Trainer``
created in any process of the command gets fttui's callback (``FTTUI_INJECT=0`` turns that off).
The core never imports the integration: it only names its folder.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fttui.core.base import rank_timing
from fttui.core.base.errors import FttuiError
from fttui.core.profiles.stored import stored_profile
from fttui.core.profiles.typed import Profile

__all__ = [
    "RUN_DIR_ENV",
    "INJECT_ENV",
    "KIND",
    "autoload_dir",
    "check_command",
    "command_name",
    "command_profile",
    "command_env",
    "command_text",
    "command_of",
    "row_profile",
]

#: The run directory, for the callback (the integration's documented variable).
RUN_DIR_ENV = "FTTUI_RUN_DIR"
#: ``0``: no automatic callback in the command's Trainers (the one-line callback still works).
INJECT_ENV = "FTTUI_INJECT"
KIND = "command"


def autoload_dir() -> Path:
    """The folder holding the integration's ``sitecustomize.py`` (put first on ``PYTHONPATH``)."""
    return Path(__file__).resolve().parents[3] / "integrations" / "autoload"


def check_command(
    argv: list[str] | tuple[str, ...] | None, cwd: str | os.PathLike | None = None, path: str | None = None
) -> list[str]:
    """The command as a list, checked before anything is written: not empty, and its program
    exists (on ``PATH``, or as a file from ``cwd`` when it names a path). FttuiError (one line)
    otherwise."""
    argv = [str(a) for a in (argv or [])]
    if not argv or not argv[0].strip():
        raise FttuiError("empty command: give one after --, e.g. fttui run -- python train.py")
    prog = argv[0]
    if os.sep in prog:
        full = Path(cwd or ".") / os.path.expanduser(prog)
        if not full.is_file():
            raise FttuiError(f"command not found: {prog} (no such file)")
        if not os.access(full, os.X_OK):
            raise FttuiError(f"command not executable: {prog} (run it with its interpreter, or chmod +x)")
    elif shutil.which(prog, path=path if path is not None else os.environ.get("PATH")) is None:
        raise FttuiError(f"command not found: {prog} (not on PATH)")
    return argv


def command_name(argv: list[str]) -> str:
    """A run name from the command: the script's stem (``train.py`` -> ``train``), the module of
    ``-m`` (``pkg.train`` -> ``train``), else the program's name."""
    for i, arg in enumerate(argv):
        if arg.endswith(".py") and not arg.startswith("-"):
            return Path(arg).stem or "command"
        if arg == "-m" and i + 1 < len(argv) and i <= 1:
            return argv[i + 1].rsplit(".", 1)[-1] or "command"
    return Path(argv[0]).name or "command"


def command_profile(
    argv: list[str],
    *,
    name: str | None = None,
    cwd: str | None = None,
    host_memory: str = "",
    stall_timeout_s: float = 0.0,
    description: str = "",
) -> Profile:
    """The profile of ``fttui run -- CMD``: the name, the command, the limits and the stall
    timeout; the rest is the schema's defaults, which nothing reads (a command states no model,
    data or batch: the row takes those from the Trainer's events, or leaves them unknown,
    :func:`row_profile`)."""
    return stored_profile(
        {
            "name": name or command_name(argv),
            "source": "",
            "origin": "command",
            "description": description,
            "command": {"argv": list(argv), "cwd": str(cwd or os.getcwd())},
            "limits": {"gpu_memory": "", "host_memory": host_memory or ""},
            "monitor": {"stall_timeout_s": float(stall_timeout_s or 0.0)},
        }
    )


def command_of(resolved: Profile | None) -> dict[str, Any] | None:
    """The profile's ``[command]`` (``argv``, ``cwd``) when it holds a command, else ``None``."""
    if resolved is None:
        return None
    cmd = resolved.command
    return {"argv": list(cmd.argv), "cwd": cmd.cwd} if cmd.argv else None


def command_text(resolved: Profile) -> str | None:
    """What a profile's command runs, as a shell would show it, with its folder: the line the
    picker shows before launching it; ``None`` for a profile without a command."""
    cmd = command_of(resolved)
    if cmd is None:
        return None
    return f"{shlex.join(str(a) for a in cmd['argv'])}   (in {cmd.get('cwd') or os.getcwd()})"


def command_env(
    run_dir: Path, *, inject: bool = True, host_limit: bool = False, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The variables added to the command's environment (recorded in ``command.json``)."""
    outer: Mapping[str, str] = os.environ if environ is None else environ
    env = {"PYTHONUNBUFFERED": "1", RUN_DIR_ENV: str(run_dir)}
    if inject and outer.get(INJECT_ENV, "1") != "0":
        prev = outer.get("PYTHONPATH")
        env["PYTHONPATH"] = str(autoload_dir()) + (os.pathsep + prev if prev else "")
    else:
        env[INJECT_ENV] = "0"
    env.update(rank_timing.flight_recorder_env(outer))  # where a hang is (fttui.core.run.control.hang)
    if host_limit:
        # every thread's malloc arena is address space: fewer arenas, a steadier boundary
        env["MALLOC_ARENA_MAX"] = "1"
    return env


def row_profile(prof: Profile, start_config: dict[str, Any] | None, cards_used: int) -> Profile:
    """The profile a command run's row is built from: the run's name and limits, and what the
    Trainer told (its start event's ``config``, the JSON the integration sent: model, method,
    sharding, precision, GPUs per node); ``None`` for what nobody stated (a command never states
    the schema's defaults). ``cards_used``: the cards the command's processes had memory on (the
    GPUs when the Trainer did not say)."""

    def told(section: str) -> Mapping[str, Any]:
        value = cfg.get(section)
        return value if isinstance(value, Mapping) else {}

    cfg = start_config if isinstance(start_config, Mapping) else {}
    model, train, dev = told("model"), told("train"), told("devices")
    gpus = dev.get("gpus") if isinstance(dev.get("gpus"), int) else cards_used
    return prof.with_settings(
        {
            "method": cfg.get("method"),
            "sharding": cfg.get("sharding"),
            "model.name_or_path": model.get("name_or_path") or prof.model.name_or_path,
            "model.arch": None,
            "data.name": None,
            "data.max_seq_len": None,
            "train.precision": train.get("precision"),
            "train.gradient_checkpointing": train.get("gradient_checkpointing"),
            "train.batch_size": None,
            "train.grad_accum": None,
            "devices.gpus": gpus,
            "devices.cpu_processes": 1,
            "devices.nodes": int(dev.get("nodes") or 1),
        }
    )
