"""Stale JIT build locks: DeepSpeed builds its C++ ops on first use with torch's extension
builder, which holds a ``lock`` file in the op's build folder (``$TORCH_EXTENSIONS_DIR`` or
``~/.cache/torch_extensions/<py>_<accelerator>/<op>/lock``) while it compiles. A build that is
killed (Ctrl-C during a first DeepSpeed run, a cancelled run, an OOM-kill) leaves the file
behind, and every later run of any DeepSpeed sharding then waits on it forever with no message.

A lock is stale when no process on this machine works in its folder (the compiler and ninja run
there) and it is older than a build's start-up. The worker removes stale locks before DeepSpeed
loads its ops and says so in the run's log; a lock another machine may hold (a shared home over
NFS, a build started less than a minute ago) is left alone."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

MIN_AGE_S = 60.0  # torch writes the lock, then build.ninja, then starts ninja in the folder


def build_folders_in_use() -> set[str]:
    """The working folders of this machine's processes (a build runs in its op's folder)."""
    folders: set[str] = set()
    for proc in psutil.process_iter(["cwd"]):
        cwd = proc.info.get("cwd")
        if cwd:
            folders.add(os.path.realpath(cwd))
    return folders


def stale_locks(
    root: Path, *, min_age_s: float = MIN_AGE_S, now: float | None = None, in_use: Iterable[str] | None = None
) -> list[Path]:
    """The stale ``lock`` files one or two levels under ``root`` (the extensions folder, with or
    without torch's ``<py>_<accelerator>`` level)."""
    root = Path(root)
    if not root.is_dir():
        return []
    now = time.time() if now is None else now
    locks = [*root.glob("*/lock"), *root.glob("*/*/lock")]
    if not locks:
        return []
    busy = set(build_folders_in_use() if in_use is None else in_use)
    stale = []
    for lock in locks:
        try:
            age = now - lock.stat().st_mtime
        except OSError:
            continue  # released meanwhile
        if age >= min_age_s and os.path.realpath(lock.parent) not in busy:
            stale.append(lock)
    return stale


def clear_stale_locks(root: Path, log: Callable[[str], None], **kw) -> list[Path]:
    """Remove the stale locks under ``root``; one log line each. Returns the removed paths."""
    removed = []
    for lock in stale_locks(root, **kw):
        try:
            lock.unlink()
        except FileNotFoundError:
            continue
        except OSError as e:
            log(
                f"a stale op build lock could not be removed ({e}): {lock}; delete it by hand, "
                "or DeepSpeed waits on it forever"
            )
            continue
        removed.append(lock)
        log(f"removed a stale op build lock left by an interrupted DeepSpeed build: {lock}")
    return removed


__all__ = ["MIN_AGE_S", "build_folders_in_use", "clear_stale_locks", "stale_locks"]
