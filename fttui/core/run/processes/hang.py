"""Where a hang is (issue 39 item 2): which rank stopped and where the others wait, in one sentence.

:func:`ask` asks every rank of a run at once, three ways:

* a request in ``RUN_DIR/stacks/request``, answered within half a second by each rank's thread
  (:mod:`fttui.integrations.hangdump`) with its flight recorder's latest collectives and its main
  thread's stack (a rank blocked in a collective waits with the interpreter released, so the
  thread runs);
* SIGUSR1, answered by ``faulthandler`` with every thread's stack (:mod:`.stacks`: works while a C
  call holds the interpreter);
* ``py-spy dump`` from outside, when installed, for a rank that answered neither.

A rank that answers nothing is named by that, with its state (stopped, gone) and the last step it
reported. The answers and the sentence are kept in ``RUN_DIR/hang.json``; the stack dumps stay in
``RUN_DIR/stacks/``. :func:`sentence` is pure: ``ranks 0, 1, 2 wait in all_reduce #1516; rank 3
has not reached it: stopped (SIGSTOP), last seen at step 212``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fttui.core.base import rank_timing
from fttui.core.run.files.events import StartEvent, StepEvent, read_events
from fttui.core.run.processes import stacks

__all__ = ["RankWhere", "Hang", "HANG_FILE", "ask", "sentence", "waits_in", "read_answer"]

#: the run directory's record of the latest ask: every rank's answer and the sentence
HANG_FILE = "hang.json"
#: seconds given to py-spy for one rank
SPY_S = 5.0
_SPY_FRAME = re.compile(r"^\s+\S.* \(.+:\d+\)\s*$")  # py-spy dump's frame line: "    fn (file.py:12)"
#: Python frames that are a rank waiting for its peers (the innermost frame of its main thread)
_WAITING = {
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "_all_gather_base",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "_reduce_scatter_base",
    "broadcast",
    "barrier",
    "monitored_barrier",
    "reduce",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
    "wait",
    "_engine_run_backward",  # DDP's reducer waits for its buckets inside backward, in C++
}


@dataclass(frozen=True)
class RankWhere:
    """One rank at the ask: whether it answered, its state, the latest step it reported, the
    collective it waits in (sequence number and operation, from its flight recorder), the latest
    one it finished, and its innermost Python frame (its own, else faulthandler's, else py-spy's)."""

    rank: int
    pid: int
    node: str | None = None
    answered: bool = False
    stopped: bool = False
    gone: bool = False
    step: int | None = None
    waiting: tuple[int, str] | None = None
    done: int | None = None
    frame: str | None = None
    function: str | None = None
    recorder: bool = False  # its flight recorder answered
    registered: bool = True  # it set fttui's SIGUSR1 stack dump up (its stacks file exists)

    def where(self) -> str:
        """``in FILE:LINE in FN at step N`` (what is known)."""
        parts = [f"in {self.frame}"] if self.frame else []
        if self.step is not None:
            parts.append(f"at step {self.step}")
        return " ".join(parts)


@dataclass(frozen=True)
class Hang:
    """The sentence, every rank's answer, ``hang.json``'s path and the SIGUSR1 dumps (:mod:`.stacks`)."""

    sentence: str
    ranks: tuple[RankWhere, ...]
    path: Path
    dumps: tuple[stacks.Rank, ...] = ()


def _op(name: str) -> str:
    return name.split(":", 1)[-1] if name else "a collective"


def waits_in(answer: dict[str, Any]) -> tuple[tuple[int, str] | None, int | None]:
    """From a rank's answer: the collective it waits in (the latest recorded entry not finished)
    and the sequence number of the latest one it finished."""
    entries = [e for e in answer.get("collectives") or [] if isinstance(e, dict) and isinstance(e.get("seq"), int)]
    done = [e["seq"] for e in entries if e.get("retired") or e.get("state") == "completed"]
    open_ = [e for e in entries if not (e.get("retired") or e.get("state") == "completed")]
    waiting = (open_[-1]["seq"], _op(str(open_[-1].get("op") or ""))) if open_ else None
    return waiting, max(done) if done else None


def _list(ranks: list[int]) -> str:
    return ("ranks " if len(ranks) > 1 else "rank ") + ", ".join(map(str, ranks))


def _why_silent(r: RankWhere) -> str:
    if r.gone:
        return "not running"
    if r.stopped:
        return "stopped (SIGSTOP)"
    if not r.registered:
        return "did not answer (no fttui stack dump in it: its own SIGUSR1 handler, or no fttui callback)"
    return "did not answer (deadlocked, or in a C call that holds the interpreter)"


def _silent(r: RankWhere) -> str:
    return f"rank {r.rank}: {_why_silent(r)}" + (f" (py-spy: {r.frame})" if r.frame else "")


def sentence(ranks: list[RankWhere]) -> str:
    """Which rank stopped and where the others wait, in one sentence (pure)."""
    if not ranks:
        return "no rank of this run reported a start: nothing to ask"
    waiting = [r for r in ranks if r.waiting is not None]
    if waiting:  # by collective, the earliest first: the ranks past it wait for it to end elsewhere
        at = waiting
        groups: dict[tuple[int, str], list[int]] = {}
        for r in sorted(waiting, key=lambda r: (r.waiting or (0, ""), r.rank)):
            groups.setdefault(r.waiting or (0, ""), []).append(r.rank)
        said = [f"{_list(rs)} {'wait' if len(rs) > 1 else 'waits'} in {op} #{seq}" for (seq, op), rs in groups.items()]
        head = said[0] + "".join(f", {x.replace(' waits in ', ' in ').replace(' wait in ', ' in ')}" for x in said[1:])
    else:
        at = [r for r in ranks if r.answered and r.function in _WAITING]
        if not at:
            parts = [f"rank {r.rank} " + (r.where() or "answered") if r.answered else _silent(r) for r in ranks]
            return "no rank waits in a collective: " + "; ".join(parts)
        verb = "wait" if len(at) > 1 else "waits"
        whose = "their" if len(at) > 1 else "its"
        head = f"{_list([r.rank for r in at])} {verb} in {at[0].function} ({whose} Python frame: no flight recorder)"
    rest = []
    for r in ranks:
        if r in at:
            continue
        if not r.answered:
            last = f", last seen at step {r.step}" if r.step is not None else ""
            frame = f" (py-spy: {r.frame})" if r.frame else ""
            rest.append(f"rank {r.rank} has not reached it: {_why_silent(r)}{last}{frame}")
        else:
            rest.append(f"rank {r.rank} has not reached it, last seen {r.where() or 'with no Python frame'}")
    return "; ".join([head, *rest])


def read_answer(path: Path, request: str) -> dict[str, Any] | None:
    """A rank's answer to ``request`` (``None``: none yet, or to an older request)."""
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) and body.get("request") == request else None


def _spy(pid: int) -> str | None:
    """The innermost frame of ``pid``'s main thread by ``py-spy dump`` (``None``: no py-spy, or
    it could not read the process)."""
    exe = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "dump", "--pid", str(pid), "--nonblocking"], capture_output=True, text=True, timeout=SPY_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    in_thread = False
    for line in out.stdout.splitlines():
        if line.startswith("Thread "):
            in_thread = True
        elif in_thread and _SPY_FRAME.match(line):
            return line.strip()  # "function (file:line)", innermost first
    return None


def _facts(run_dir: Path) -> tuple[dict[int, str], dict[int, int]]:
    """Each rank's node and the latest step it reported, from the run's events."""
    nodes: dict[int, str] = {}
    steps: dict[int, int] = {}
    for ev in read_events(run_dir / "events.jsonl"):
        rank = int(ev.rank or 0) if isinstance(ev.rank, int) else 0
        if isinstance(ev, StartEvent) and isinstance(ev.node, str):
            nodes[rank] = ev.node
        elif isinstance(ev, StepEvent) and isinstance(ev.step, int):
            steps[rank] = max(steps.get(rank, 0), ev.step)
    return nodes, steps


def ask(run_dir: Path, wait_s: float = stacks.WAIT_S) -> Hang:
    """Ask every rank of ``run_dir`` where it is; the sentence, each rank, and ``hang.json``'s path."""
    folder = run_dir / rank_timing.STACKS_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    request = f"{time.time():.6f}"
    tmp = folder / f"{rank_timing.REQUEST}.tmp"
    tmp.write_text(request + "\n", encoding="utf-8")
    os.replace(tmp, folder / rank_timing.REQUEST)
    dumped = {r.rank: r for r in stacks.ask(run_dir, wait_s)}  # SIGUSR1: waits up to wait_s
    nodes, steps = _facts(run_dir)
    deadline = time.monotonic() + 1.0  # the threads poll twice a second: one more poll at most
    answers: dict[int, dict[str, Any]] = {}
    while True:
        for r in dumped.values():
            if r.rank not in answers:
                got = read_answer(folder / rank_timing.answer_name(r.rank, r.pid), request)
                if got is not None:
                    answers[r.rank] = got
        if len(answers) == len(dumped) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    ranks = []
    for rank, d in sorted(dumped.items()):
        got = answers.get(rank)
        waiting, done = waits_in(got) if got is not None else (None, None)
        stack = (got or {}).get("stack") or []
        frame = function = None
        entries = [e for e in stack if isinstance(e, list) and len(e) == 3]
        top = next((e for e in entries if stacks.in_source(str(e[0]))), entries[0] if entries else None)
        if top is not None:
            frame, function = f"{top[0]}:{top[1]} in {top[2]}", str(top[2])
        elif d.frame is not None:
            frame, function = d.frame.text(), d.frame.function
        elif not d.answered and not d.gone:
            frame = _spy(d.pid)
        step = got.get("step") if got is not None and isinstance(got.get("step"), int) else steps.get(rank)
        ranks.append(
            RankWhere(
                rank=rank,
                pid=d.pid,
                node=nodes.get(rank),
                answered=got is not None or d.answered,
                stopped=d.stopped,
                gone=d.gone,
                step=step,
                waiting=waiting,
                done=done,
                frame=frame,
                function=function,
                recorder=bool(got is not None and got.get("collectives") is not None),
                registered=d.registered,
            )
        )
    text = sentence(ranks)
    path = run_dir / HANG_FILE
    body = {"t": time.time(), "request": request, "sentence": text, "ranks": [dataclasses.asdict(r) for r in ranks]}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({**body, "answers": {str(k): v for k, v in answers.items()}}, f, indent=1)
    return Hang(sentence=text, ranks=tuple(ranks), path=path, dumps=tuple(dumped.values()))
