"""DeepSpeed's shared-memory buffers that no process holds any more, removed.

DeepSpeed's collectives on CPU ranks of one machine (its ``ShareMemComm`` op, used when its
launcher's ``LOCAL_SIZE`` equals the world size: every ZeRO run fttui starts on CPU ranks, one
rank included) give each rank a workspace of about 66 MB in POSIX shared memory,
``/dev/shm/deepspeed_allreduce_buffer_{uid}_{MASTER_ADDR}_{MASTER_PORT}_{rank}``, and never
unlink it: the memory stays taken after the run's processes are gone. On the development machine
276 of them (18 GiB of its 24) were left by a few days of test suites and benchmarks, until the
kernel's OOM killer took the type checker of a CI run.

:func:`remove_unheld` removes this user's such buffers that no living process of this user maps
(every ``/proc/PID/maps`` read; a buffer file is 0600, so only its owner's processes can map it)
and that are older than :data:`MIN_AGE_S` (a rank maps its buffer right after creating it: a file
of a moment ago may be between the two). A process whose maps this user may not read (a
sandbox's init as pid 1, under another security context) is no DeepSpeed rank of this user's
runs and is passed over. The supervisor calls it once a run's processes are gone
(:meth:`fttui.core.run.supervising.supervisor.Supervisor.reap_leftovers`), so a run also clears
what earlier runs, its own killed ones included, left. Nothing is removed when /proc cannot be
listed or a maps file fails to read for another reason. Stdlib only.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["PREFIX", "MIN_AGE_S", "SHM_DIR", "remove_unheld", "buffers"]

#: DeepSpeed's name of a rank's shared workspace (``SHM_BUFFER_NAME`` in its csrc/cpu/comm/shm.cpp)
PREFIX = "deepspeed_allreduce_buffer"
#: a buffer younger than this is left alone (created, not yet mapped by its rank: DeepSpeed writes
#: the 66 MB workspace, then maps it, within a fraction of a second); a run's own buffers are older
#: than this by its end
MIN_AGE_S = 5.0
SHM_DIR = Path("/dev/shm")


def buffers(shm_dir: Path = SHM_DIR, uid: int | None = None) -> list[Path]:
    """This user's DeepSpeed buffer files in ``shm_dir`` (the uid is in the name: DeepSpeed's
    ``getuid()``), none when the folder cannot be read."""
    uid = os.getuid() if uid is None else uid
    try:
        return sorted(shm_dir.glob(f"{PREFIX}_{uid}_*"))
    except OSError:
        return []


def _mapped_by_own_processes(uid: int) -> set[str] | None:
    """The file paths mapped by every living process of ``uid``, or ``None`` when one of them
    could not be read (its maps: nothing is then proven free)."""
    paths: set[str] = set()
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
                for line in f:
                    if PREFIX in line:
                        paths.add(line.rstrip("\n").split(maxsplit=5)[-1].removesuffix(" (deleted)"))
        except (FileNotFoundError, ProcessLookupError):  # the process ended meanwhile: it maps nothing
            continue
        except PermissionError:  # another security context (a sandbox's init as pid 1): no rank
            continue
        except OSError:
            return None
    return paths


def remove_unheld(shm_dir: Path = SHM_DIR, min_age_s: float = MIN_AGE_S, now: float | None = None) -> list[str]:
    """Remove this user's DeepSpeed buffers in ``shm_dir`` that no living process of this user
    maps and that are older than ``min_age_s``; the names removed. Never raises."""
    uid = os.getuid()
    found = buffers(shm_dir, uid)
    if not found:
        return []
    held = _mapped_by_own_processes(uid)
    if held is None:
        return []
    now = time.time() if now is None else now
    removed: list[str] = []
    for path in found:
        try:
            if str(path) in held or now - path.stat().st_mtime < min_age_s:
                continue
            path.unlink()
            removed.append(path.name)
        except OSError:
            continue
    return removed
