"""A run that failed in its collectives, classified: a collective timeout, a lost peer, an NCCL
error, with the rank that reported it and the rank it points at (issue 39 item 2).

A rank that stops (a crash, a hang, a lost node) shows in the others as an error of the
communication library, often the only line in the log: gloo's ``Timed out waiting 1800000ms for
recv operation to complete``, NCCL's watchdog ``WorkNCCL(SeqNum=1516, OpType=ALLREDUCE, ...) ran
for 600084 milliseconds before timing out``, ``Connection closed by peer``. :func:`classify` reads
the log's tail: the cause, the operation and its sequence number where said, how long it waited,
the ranks that reported it (torchrun's ``[rankN]:`` prefix, NCCL's ``[Rank N]``) and, when the
world size is known, the ranks that did not: the ones the others waited for.

Pure (plus :func:`in_log`, which reads a log's tail).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fttui.core.base.bounded import read_tail

__all__ = ["CommFailure", "classify", "in_log", "TAIL_BYTES"]

#: the log's tail read for the classification
TAIL_BYTES = 256 * 1024

_NCCL_TIMEOUT = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=(\w+).*?\) "
    r"ran for (\d+) milliseconds"
)
_GLOO_TIMEOUT = re.compile(r"Timed out waiting (\d+)ms for (recv|send) operation to complete")
_PEER = re.compile(r"Connection (?:closed|reset) by peer|ECONNRESET|Broken pipe")
_NCCL_ERROR = re.compile(
    r"(ncclUnhandledCudaError|ncclSystemError|ncclInternalError|ncclInvalidUsage|ncclRemoteError|"
    r"NCCL communicator was aborted|NCCL error in: [^\n]*)"
)
_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:")
_RANK_NCCL = re.compile(r"\[Rank (\d+)\]")


@dataclass(frozen=True)
class CommFailure:
    """``cause``: ``collective timeout``, ``peer lost`` or ``NCCL error``; ``reporters``: the ranks
    whose lines said it; ``silent``: the ranks of the world that did not (``()`` when the world
    size is unknown): under a timeout, the ones the others waited for."""

    cause: str
    backend: str | None
    line: str
    op: str | None = None
    seq: int | None = None
    waited_s: float | None = None
    reporters: tuple[int, ...] = ()
    silent: tuple[int, ...] = ()

    @property
    def rank(self) -> int | None:
        """The rank it points at: the one silent rank, else the one reporter, else ``None``."""
        if len(self.silent) == 1:
            return self.silent[0]
        return self.reporters[0] if len(self.reporters) == 1 and not self.silent else None

    def text(self) -> str:
        """``collective timeout (gloo, after 4 s): rank 0 timed out waiting; rank 1 did not report
        it (the rank the others waited for): RuntimeError: ... Timed out waiting 4000ms ...``"""
        what = [x for x in (self.backend, f"{self.op} #{self.seq}" if self.op else None) if x]
        if self.waited_s is not None:
            what.append(f"after {self.waited_s:.0f} s")
        head = self.cause + (f" ({', '.join(what)})" if what else "")
        parts = []
        if self.reporters:
            verb = "timed out waiting" if self.cause == "collective timeout" else "reported it"
            parts.append(f"{_ranks(self.reporters)} {verb}")
        if self.silent:
            whom = " (the rank the others waited for)" if len(self.silent) == 1 else ""
            parts.append(f"{_ranks(self.silent)} did not report it{whom}")
        return head + (": " + "; ".join(parts) if parts else "") + f": {self.line[:300]}"


def _ranks(ranks: tuple[int, ...]) -> str:
    return ("ranks " if len(ranks) > 1 else "rank ") + ", ".join(map(str, ranks))


def _rank_of(line: str) -> int | None:
    m = _RANK_PREFIX.match(line) or _RANK_NCCL.search(line)
    return int(m.group(1)) if m else None


def classify(text: str, world_size: int | None = None) -> CommFailure | None:
    """The communication failure a log's text shows, the first kind found in the order timeout,
    NCCL error, lost peer (a lost peer is what the other ranks see after a rank's own failure, so
    it is the weakest evidence); ``None`` when it shows none."""
    lines = text.splitlines()
    for kind in ("timeout", "nccl", "peer"):
        found: list[tuple[str, re.Match[str]]] = []
        for line in lines:
            m = (
                (_NCCL_TIMEOUT.search(line) or _GLOO_TIMEOUT.search(line))
                if kind == "timeout"
                else (_NCCL_ERROR.search(line) if kind == "nccl" else _PEER.search(line))
            )
            if m:
                found.append((line, m))
        if not found:
            continue
        reporters = tuple(sorted({r for r in (_rank_of(ln) for ln, _ in found) if r is not None}))
        silent = tuple(r for r in range(world_size) if r not in reporters) if world_size and reporters else ()
        line, m = found[0]
        clean = _RANK_PREFIX.sub("", line).strip()
        if kind == "timeout" and m.re is _NCCL_TIMEOUT:
            return CommFailure(
                "collective timeout", "nccl", clean, op=m.group(2).lower(), seq=int(m.group(1)),
                waited_s=int(m.group(3)) / 1000, reporters=reporters, silent=silent,
            )  # fmt: skip
        if kind == "timeout":
            return CommFailure(
                "collective timeout", "gloo", clean, waited_s=int(m.group(1)) / 1000, reporters=reporters, silent=silent
            )
        if kind == "nccl":
            return CommFailure("NCCL error", "nccl", clean, reporters=reporters, silent=silent)
        return CommFailure("peer lost", None, clean, reporters=reporters, silent=silent)
    return None


def in_log(path: Path, world_size: int | None = None) -> CommFailure | None:
    """:func:`classify` of the last :data:`TAIL_BYTES` of a log (``None`` when unreadable)."""
    data = read_tail(path, TAIL_BYTES)
    return None if data is None else classify(data.decode("utf-8", errors="replace"), world_size)
