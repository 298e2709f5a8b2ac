"""``fttui stacks``: every rank's Python stack, on demand (issue 39 item 2, "where a hang is").

Each rank (fttui's worker, a script with fttui's Trainer callback) registers Python's
``faulthandler`` for SIGUSR1 (:func:`fttui.integrations.hf.register_stacks`), appending every
thread's stack to ``RUN_DIR/stacks/rank-R-pid-P.txt``. :func:`ask` sends SIGUSR1 to each rank
named by the run's ``start`` events and waits for its file to grow; :func:`parse_dump` and
:func:`main_frame` read a dump (pure functions).
"""

from __future__ import annotations

import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from fttui.core.base import rank_timing
from fttui.core.run.files.events import StartEvent, read_events
from fttui.core.run.processes import proctree

#: The folder of the run directory the dumps go to (``fttui.integrations.hf.STACKS_DIR``).
STACKS_DIR = rank_timing.STACKS_DIR
#: How long a rank is given to write its dump.
WAIT_S = 3.0

_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[[^\]]*\])? \(most recent call first\):\s*$")
_STACK = re.compile(r"^Stack \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+|\?\?\?) in (.*?)\s*$')


@dataclass(frozen=True)
class Frame:
    file: str
    line: int | None
    function: str

    def text(self) -> str:
        return f"{self.file}:{self.line if self.line is not None else '?'} in {self.function}"


@dataclass
class Thread:
    ident: str  # 0x... ("" for a dump of one thread)
    current: bool  # the thread that got the signal
    frames: list[Frame] = field(default_factory=list)  # innermost first


def parse_dump(text: str) -> list[Thread]:
    """The threads of a ``faulthandler`` dump (``all_threads`` or not), in the dump's order; the
    lines that are no frame (``<no Python frame>``, ``...``) skipped."""
    threads: list[Thread] = []
    for line in text.splitlines():
        m = _THREAD.match(line)
        if m:
            threads.append(Thread(ident=m.group(2), current=m.group(1) == "Current thread"))
            continue
        if _STACK.match(line):
            threads.append(Thread(ident="", current=True))
            continue
        f = _FRAME.match(line)
        if f and threads:
            ln = f.group(2)
            threads[-1].frames.append(Frame(f.group(1), int(ln) if ln.isdigit() else None, f.group(3)))
    return threads


def main_thread(threads: list[Thread]) -> Thread | None:
    """The main thread of a dump: the one whose outermost frame is a module's (a script's
    ``<module>``), else one not started by :mod:`threading` (``python -m``: runpy's frames), else
    the thread that got the signal, else the first."""
    for t in threads:
        if t.frames and t.frames[-1].function == "<module>":
            return t
    for t in threads:
        if t.frames and not (t.frames[-1].function == "_bootstrap" and t.frames[-1].file.endswith("threading.py")):
            return t
    return next((t for t in threads if t.current), threads[0] if threads else None)


def in_source(file: str) -> bool:
    """A frame's file is a source file: not code Python made from a string (``<string>``: a
    dataclass's generated ``__init__``, an ``exec``) or a frozen module (``<frozen ...>``)."""
    return not file.startswith("<")


def main_frame(text: str) -> Frame | None:
    """The innermost frame in a source file of a dump's main thread (:func:`in_source`: a rank
    caught in a dataclass's generated ``__init__`` is named by the line that built it), else its
    innermost frame, or ``None`` (no frame in it)."""
    t = main_thread(parse_dump(text))
    if t is None or not t.frames:
        return None
    return next((f for f in t.frames if in_source(f.file)), t.frames[0])


@dataclass
class Rank:
    rank: int
    pid: int
    path: Path
    frame: Frame | None = None
    answered: bool = False
    stopped: bool = False
    gone: bool = False
    registered: bool = True  # its stack file exists: it set the SIGUSR1 dump up

    def line(self) -> str:
        head = f"rank {self.rank} (pid {self.pid}): "
        if self.answered:
            return head + (self.frame.text() if self.frame is not None else "answered with no Python frame")
        if self.gone:
            return head + "not running"
        if not self.registered:
            return head + "no stack dump set up (not sent SIGUSR1: its own handler, or an older fttui)"
        if self.stopped:
            return head + "did not answer: stopped (SIGSTOP)"
        return head + "did not answer (stopped, or in a C call that holds the interpreter)"


def ranks_of(run_dir: Path) -> dict[int, int]:
    """Each rank's pid, from the run's ``start`` events (the latest per rank)."""
    out: dict[int, int] = {}
    for ev in read_events(run_dir / "events.jsonl"):
        if isinstance(ev, StartEvent) and isinstance(ev.pid, int):
            out[int(ev.rank or 0)] = ev.pid
    return dict(sorted(out.items()))


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def ask(run_dir: Path, wait_s: float = WAIT_S) -> list[Rank]:
    """SIGUSR1 to every rank of ``run_dir``; each rank's frame where it answered within ``wait_s``."""
    folder = run_dir / STACKS_DIR
    ranks = [Rank(r, pid, folder / f"rank-{r}-pid-{pid}.txt") for r, pid in ranks_of(run_dir).items()]
    before = {r.rank: _size(r.path) for r in ranks}
    for r in ranks:
        if not proctree.pid_alive(r.pid):
            r.gone = True
            continue
        r.stopped = _stopped(r.pid)
        if not r.path.exists():
            r.registered = False  # SIGUSR1's default would end the rank
            continue
        proctree.signal_pids([r.pid], signal.SIGUSR1)
    deadline = time.monotonic() + wait_s
    waiting = [r for r in ranks if not r.gone and r.registered]
    while waiting and time.monotonic() < deadline:
        grown = [r for r in waiting if _size(r.path) > before[r.rank]]
        if grown:
            time.sleep(0.2)  # the dump is written in several writes: let it end
            for r in grown:
                with open(r.path, encoding="utf-8", errors="replace") as f:
                    f.seek(before[r.rank])
                    r.frame = main_frame(f.read())
                r.answered = True
            waiting = [r for r in waiting if not r.answered]
            continue
        time.sleep(0.05)
    return ranks


__all__ = ["Frame", "Thread", "Rank", "parse_dump", "main_thread", "main_frame", "in_source", "ranks_of", "ask"]
