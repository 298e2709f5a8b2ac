"""A run's recovery lock (``recover.lock`` in its run directory): one command at a time finishes
a run whose supervisor died or stores a row the results store could not take.
"""

from __future__ import annotations

import os
import time

from fttui.core.run.files.rundir import RunDir

#: A recovery lock older than this is left over by a command that died while recovering.
STALE_LOCK_S = 120.0


def take(rd: RunDir) -> bool:
    """Take run ``rd``'s recovery lock (``recover.lock``, made exclusively); ``False`` when
    another command holds it (a lock older than :data:`STALE_LOCK_S` is a dead command's: taken
    over)."""
    path = rd.path / "recover.lock"
    for _ in range(2):
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            return True
        except FileExistsError:
            try:
                if time.time() - path.stat().st_mtime < STALE_LOCK_S:
                    return False
                path.unlink()
            except FileNotFoundError:
                continue
        except OSError:
            return False
    return False


def release(rd: RunDir) -> None:
    """Release run ``rd``'s recovery lock."""
    try:
        (rd.path / "recover.lock").unlink()
    except OSError:
        pass


__all__ = ["STALE_LOCK_S", "take", "release"]
