"""Which process an event is from: two processes that claim the same rank are never folded into one.

A Trainer script that drops the launcher's rank variables before importing transformers
(``torchrun --nproc_per_node 2`` around it) starts processes that each say rank 0 of world 1.
Their events carry their ``pid`` (fttui's callback writes it): the first process claiming a rank
keeps that rank as its slot, every other process claiming it gets a slot of its own above every
rank the run can have, so that its steps, samples and peaks are counted beside the first's instead
of being dropped as duplicates. :func:`clash_text` says so in every view and the row
(:func:`clash_mismatch`). fttui's worker writes its training events with the same callback; events
without a pid (the worker's own phase and error events, the printed log) keep their rank.

Pure, stdlib only.
"""

from __future__ import annotations

from typing import Any

from fttui.core.base.event_records import Event, StartEvent
from fttui.core.run.fold.snapshot import to_int

__all__ = ["RankSlots", "clash_text", "clash_mismatch"]


class RankSlots:
    """``slot(event)``: the key an event's figures are folded under (its rank, or a slot of its
    own for a second process claiming that rank); ``clashes()``: rank -> the pids claiming it,
    for the ranks more than one process claimed."""

    def __init__(self) -> None:
        self._pids: dict[int, list[int]] = {}  # rank -> pids, in the order they appeared
        self._slot: dict[tuple[int, int], int] = {}
        self._world = 1  # the largest world size any process claimed

    def slot(self, event: Event) -> int:
        rank = to_int(event.rank)
        rank = 0 if rank is None else rank
        pid = to_int(event.pid)
        world = to_int(event.world_size) if isinstance(event, StartEvent) else None
        if world is not None and world > self._world:
            self._world = world
        if pid is None or rank < 0:
            return rank
        key = (rank, pid)
        if key not in self._slot:
            pids = self._pids.setdefault(rank, [])
            pids.append(pid)
            used = set(self._slot.values()) | set(self._pids)
            self._slot[key] = rank if len(pids) == 1 else max(self._world, max(used) + 1)
        return self._slot[key]

    def clashes(self) -> dict[int, tuple[int, ...]]:
        return {r: tuple(p) for r, p in sorted(self._pids.items()) if len(p) > 1}

    def processes(self) -> int:
        """How many distinct processes reported (each with its pid)."""
        return len(self._slot)


def clash_text(clash: dict[int, tuple[int, ...]]) -> str | None:
    """``RANK CLASH: 2 processes each report rank 0 (pids 11, 12): ...``, or ``None`` without a
    clash."""
    if not clash:
        return None
    parts = [f"{len(p)} processes each report rank {r} (pids {', '.join(map(str, p))})" for r, p in clash.items()]
    return (
        "RANK CLASH: " + "; ".join(parts) + ": the launcher's rank variables did not reach them, "
        "so each ran on its own; their figures are counted separately and summed"
    )


def clash_mismatch(
    clash: dict[int, tuple[int, ...]], stated_world: int | None, processes: int | None
) -> dict[str, Any]:
    """The row's ``mismatch`` entry of a clash: the world size the processes stated (their start
    events) against the processes that reported, with the words; empty without a clash."""
    if not clash:
        return {}
    return {"world_size": {"stated": stated_world, "observed": processes, "note": clash_text(clash)}}
