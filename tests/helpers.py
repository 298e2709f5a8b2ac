"""Helpers for end-to-end tests: process checks and waiting."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    from fttui.core.profiles.typed import Profile
    from fttui.core.run.files.sample_records import Sample


def processes_mentioning(text: str) -> list[psutil.Process]:
    """Live processes whose command line mentions `text` (a run directory, say): one argument
    holds it. Reads each ``/proc/PID/cmdline`` (its arguments, NUL-separated, so a ``text``
    without NUL matches within one argument) and asks psutil only about the processes that match:
    a scan through ``psutil.process_iter`` costs ten times the CPU, and tests call this in their
    wait loops, five times a second."""
    needle = os.fsencode(text)
    found = []
    try:
        pids = [d for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if needle not in f.read():  # a zombie's is empty
                    continue
            p = psutil.Process(int(pid))
            if p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (OSError, psutil.Error):
            pass
    return found


def processes_with_env(key: str, value: str, under: bool = False) -> list[psutil.Process]:
    """Live processes whose environment has ``key`` = ``value`` (``under``: that folder or one
    below it), this process left out: every process of a run (``FTTUI_RUN_DIR``), of a test or a
    session (``FTTUI_HOME`` under its temporary folder). Reads ``/proc`` (none found without it)."""
    want, val = f"{key}=".encode(), value.rstrip("/").encode()
    found = []
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return []
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = b"\0" + f.read()  # a zombie's is empty
        except OSError:
            continue
        at = env.find(b"\0" + want)
        if at < 0:
            continue
        got = env[at + 1 + len(want):].split(b"\0", 1)[0]
        if got == val or (under and got.startswith(val + b"/")):
            try:
                found.append(psutil.Process(pid))
            except psutil.Error:
                pass
    return found


def _not_ours(procs: list) -> list:
    """Leave out the helpers of this test process itself: multiprocessing's resource tracker and
    fork server (started by torch or a DataLoader in a test's own process) live until it exits."""
    mine = []
    for p in procs:
        try:
            if p.ppid() == os.getpid() and any("multiprocessing." in c for c in p.cmdline()):
                continue
        except psutil.Error:
            continue
        mine.append(p)
    return mine


def end_leftovers(folder: Path, grace: float) -> list[str]:
    """Processes started with ``FTTUI_HOME`` in ``folder`` (a test's or a session's temporary
    folder) that are still alive after ``grace`` seconds: killed (SIGKILL), the lock of a DeepSpeed
    op build among them removed (a killed build's lock hangs every later DeepSpeed run), the
    cgroups of their runs ended; one line each (pid and command line), none when all ended."""
    deadline = time.monotonic() + grace
    left = _not_ours(processes_with_env("FTTUI_HOME", str(folder), under=True))
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _not_ours(processes_with_env("FTTUI_HOME", str(folder), under=True))
    lines, build_dirs, run_dirs = [], set(), set()
    for p in left:
        try:
            cmd = p.cmdline()
            if cmd and os.path.basename(cmd[0]) == "ninja":
                build_dirs.add(p.cwd())
            for mod in ("fttui.core.run.supervising.supervisor", "fttui.core.run.supervising.logtee"):
                if mod in cmd and cmd.index(mod) + 1 < len(cmd):
                    run_dirs.add(cmd[cmd.index(mod) + 1])
            lines.append(f"pid {p.pid}: {' '.join(cmd)[:300]}")
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=10)
    for d in build_dirs:
        Path(d, "lock").unlink(missing_ok=True)
    from fttui.core.run.processes.cgroup import end_run
    from fttui.core.run.files.rundir import RunDir

    for d in run_dirs:
        end_run(RunDir(d))
    return lines


def wait_for(cond, timeout: float = 120, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def only_run_dir(home: Path) -> Path:
    runs = sorted((home / "runs").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def profile_of(obj) -> Profile:
    """A test's hand-written profile (a resolved dict, whole or in part, or a ``to_dict()`` changed
    by the test) as the typed Profile, read as a run's ``profile.json`` is
    (:func:`fttui.core.profiles.stored.stored_profile`): the one place a test turns a dict into
    the profile fttui's functions take."""
    from fttui.core.profiles.stored import stored_profile

    return stored_profile(obj)


def sample_of(obj) -> Sample:
    """A test's hand-written ``samples.jsonl`` line (``{"t", "gpu", "host"}``) as the record the
    folds take, read as a line of the file is (:meth:`fttui.core.run.files.sample_records.Sample.from_dict`)."""
    from fttui.core.run.files.sample_records import Sample

    rec = Sample.from_dict(obj)
    assert rec is not None, obj
    return rec


def wikitext_folder(folder: Path) -> Path:
    """``folder/data/wikitext-2.txt`` as Lightning's ``LightningLSTM`` demo reads it, generated
    (nothing is downloaded): 600 lines of 12 words drawn from 150, seeded. Returns ``folder``, the
    folder to run the demo in."""
    import random

    (folder / "data").mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    words = [f"w{i}" for i in range(150)]
    (folder / "data" / "wikitext-2.txt").write_text(
        "\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(600)) + "\n")
    return folder
