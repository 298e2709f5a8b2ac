"""The run's own cgroup (cgroup v2), where one can be made: every process of the training, a
``setsid`` daemon included, is in it, and ending the run ends all of it with ``cgroup.kill``, even
after the supervisor itself died (issue 28 item 3). Stdlib only (the signals are sent by
:mod:`fttui.core.run.processes.proctree`).

- :func:`create` makes ``fttui-RUN_ID`` under the supervisor's own cgroup when the cgroup v2
  hierarchy is writable there (root without systemd; a subtree systemd delegated to the user);
  otherwise (or with ``FTTUI_CGROUP=0``) it says why, once, and the run is tracked through the
  supervisor alone (the child subreaper, :func:`fttui.core.run.processes.guard.become_subreaper`).
- The log writer (:mod:`fttui.core.run.supervising.logtee`) joins it (:func:`join`) before it starts the
  training, so every process the training starts is born in it.
- :func:`kill` ends every process in it (``cgroup.kill``; on kernels without it, the cgroup is
  frozen and each process killed) and removes it once empty. Its path is kept in
  ``supervisor.json`` (``cgroup``); :func:`end_run` ends it for whoever finishes the run: the
  supervisor, the log writer when the supervisor died, ``fttui cancel`` and the recovery of a run
  whose supervisor died (:mod:`fttui.core.run.supervising.recover`). A recorded path is used only when it is
  this run's cgroup on a cgroup v2 mount.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from fttui.core.run.files.runfiles import SupervisorFile
from fttui.core.run.processes.proctree import signal_pids

PREFIX = "fttui-"


def mount_points(mountinfo: str) -> list[tuple[str, Path]]:
    """The cgroup v2 mounts in ``/proc/self/mountinfo``'s text (the filesystem type follows
    `` - ``): (the cgroup mounted there, the mount point)."""
    out = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, kind = head.split(), tail.split()[:1]
        if sep and kind == ["cgroup2"] and len(fields) >= 5:
            out.append((fields[3], Path(fields[4].replace("\\040", " "))))
    return out


def own_path(proc_cgroup: str) -> str | None:
    """This process's cgroup v2 path from ``/proc/self/cgroup``'s text (the ``0::PATH`` line)."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            path = line[3:].strip()
            return path if path.startswith("/") and " (deleted)" not in path else None
    return None


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def base() -> tuple[Path | None, str]:
    """The folder of this process's cgroup v2 cgroup, or ``None`` and why there is none."""
    mounts = mount_points(_read("/proc/self/mountinfo"))
    own = own_path(_read("/proc/self/cgroup"))
    if not mounts:
        return None, "no cgroup v2 hierarchy is mounted"
    if own is None:
        return None, "this process is in no cgroup v2 cgroup"
    for root, point in mounts:
        rel = os.path.relpath(own, root)
        folder = point / ("" if rel == "." else rel)
        if not rel.startswith("..") and (folder / "cgroup.procs").is_file():
            return folder, ""
    return None, f"its cgroup {own} is not under a cgroup v2 mount ({mounts[0][1]})"


def create(run_id: str, parent: Path | None = None) -> tuple[Path | None, str]:
    """Make the run's cgroup (under ``parent``, this process's own cgroup by default): its path,
    or ``None`` and the note that says why the run has none (not an error)."""
    why = ""
    if os.environ.get("FTTUI_CGROUP") == "0":
        return None, "no cgroup for the run's processes (FTTUI_CGROUP=0)"
    if parent is None:
        parent, why = base()
    if parent is None:
        return None, f"no cgroup for the run's processes ({why})"
    path = Path(parent) / f"{PREFIX}{run_id}"
    try:
        path.mkdir()
        if not (path / "cgroup.procs").is_file() or not os.access(path / "cgroup.procs", os.W_OK):
            remove(path)
            return None, f"no cgroup for the run's processes ({parent} is not a writable cgroup v2 folder)"
    except OSError as e:
        return None, f"no cgroup for the run's processes (cgroup v2 is not writable here: {e.strerror or e})"
    return path, ""


def join(path: Path, pid: int = 0) -> None:
    """Move ``pid`` (0: this process) into the cgroup; what it starts from then on is born there.
    Raises OSError."""
    with open(Path(path) / "cgroup.procs", "w") as f:
        f.write(str(pid or os.getpid()))


def leave(path: Path) -> None:
    """Move this process to the cgroup above ``path`` (to end ``path`` without ending itself)."""
    join(Path(path).parent)


def members(path: Path) -> list[int]:
    """The pids in the cgroup and the cgroups below it (none when it is gone)."""
    pids: list[int] = []
    for folder, _dirs, _files in os.walk(path):
        pids += [int(x) for x in _read(os.path.join(folder, "cgroup.procs")).split() if x.isdigit()]
    return pids


def signal_members(path: Path | None, sig: int, exclude: int | None = None) -> int:
    """Send ``sig`` to every process in the cgroup (``exclude`` left out); how many were sent it."""
    return signal_pids(members(path) if path else [], sig, exclude)


def _write(path: Path, text: str) -> bool:
    try:
        with open(path, "w") as f:
            f.write(text)
        return True
    except OSError:
        return False


def remove(path: Path) -> bool:
    """Remove the cgroup and the cgroups below it once they are empty (deepest first)."""
    for folder, _dirs, _files in sorted(os.walk(path), key=lambda w: -len(w[0])):
        try:
            os.rmdir(folder)
        except OSError:
            pass
    return not os.path.exists(path)


def kill(path: Path, timeout: float = 10.0) -> list[int]:
    """End every process in the cgroup (SIGKILL) and remove it once empty; the pids it held.
    ``cgroup.kill`` where the kernel has it (5.14), else frozen (``cgroup.freeze``, 5.2) and each
    process killed, then thawed: none can fork away meanwhile."""
    path = Path(path)
    if not (path / "cgroup.procs").is_file():
        return []
    held = members(path)
    deadline = time.monotonic() + timeout
    while members(path) and time.monotonic() < deadline:
        if not _write(path / "cgroup.kill", "1"):
            frozen = _write(path / "cgroup.freeze", "1")
            signal_members(path, signal.SIGKILL)
            if frozen:
                _write(path / "cgroup.freeze", "0")
        time.sleep(0.05)
    remove(path)
    return held


def oom_kills(path: Path | None) -> int | None:
    """The cgroup's processes that an OOM killer ended, the kernel's own count (``memory.events``'
    ``oom_kill``: the cgroup's limit or the whole machine's memory); None without the file. Read
    before :func:`kill` removes the cgroup: the evidence a SIGKILL was the OOM killer's."""
    if path is None:
        return None
    for line in _read(str(Path(path) / "memory.events")).splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def recorded(sup: SupervisorFile | None, run_id: str) -> Path | None:
    """The run's cgroup as ``supervisor.json`` records it, when it is this run's (named after it,
    on a cgroup v2 mount): a path written there by anything else is never used."""
    value = sup.cgroup if sup is not None else None
    if not isinstance(value, str) or not value:
        return None
    path = Path(os.path.normpath(value))
    if path.name != f"{PREFIX}{run_id}" or not any(
        m in path.parents for _, m in mount_points(_read("/proc/self/mountinfo"))
    ):
        return None
    return path


def end_run(rd) -> list[int]:
    """End what is left in run ``rd``'s cgroup and remove it (see :func:`kill`); the pids ended."""
    path = recorded(rd.supervisor(), rd.run_id)
    return kill(path) if path is not None else []


__all__ = [
    "PREFIX",
    "mount_points",
    "own_path",
    "base",
    "create",
    "join",
    "leave",
    "members",
    "signal_members",
    "remove",
    "kill",
    "oom_kills",
    "recorded",
    "end_run",
]
