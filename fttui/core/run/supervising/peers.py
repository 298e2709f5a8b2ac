"""The other nodes of a Slurm job, for the ranks' skew (issue 39 item 1).

Each node of a job keeps its own ranks' events in its own run directory (``<job run>-n<rank>``,
:mod:`fttui.core.run.slurm.slurmnode`), under the ``FTTUI_HOME`` every node shares: no node's fold
sees every rank. A node's supervisor reads its sibling nodes' start and step events too
(:meth:`NodePeers.read_new`), folds them into its ranks' skew only
(:meth:`~fttui.core.run.fold.state.RunState.apply_peer`), and writes its judgement as a
``straggler`` event whenever the rank it names changes (:meth:`NodePeers.tell`): the node's views
and row read it from its own events.
"""

from __future__ import annotations

import time

from fttui.core.run.files import rundir
from fttui.core.run.files.events import Event, EventTail, StartEvent, StepEvent, StragglerEvent
from fttui.core.run.files.runfiles import CommandFile
from fttui.core.run.fold.state import RunState

__all__ = ["NodePeers", "SCAN_S"]

#: how often the runs folder is looked at for a node that started since
SCAN_S = 5.0


class NodePeers:
    """The sibling node runs of a Slurm node's run (none for any other run)."""

    def __init__(self, rd: rundir.RunDir, command: CommandFile) -> None:
        job = command.slurm
        self.prefix: str | None = None
        if job is not None and (job.nodes or 0) > 1 and job.node_rank is not None:
            own = f"-n{job.node_rank}"
            self.prefix = rd.run_id[: -len(own)] if rd.run_id.endswith(own) else None
        self.own = rd.run_id
        self.tails: dict[str, EventTail] = {}
        self.scanned = 0.0
        self.told: int | None = None  # the straggler the latest straggler event named

    @property
    def active(self) -> bool:
        return self.prefix is not None

    def read_new(self) -> list[Event]:
        """The start and step events the other nodes wrote since the last call."""
        if self.prefix is None:
            return []
        now = time.monotonic()
        if now - self.scanned >= SCAN_S:
            self.scanned = now
            for d in rundir.paths.runs_dir().glob(f"{self.prefix}-n*"):
                if d.name != self.own and d.name not in self.tails and d.name[len(self.prefix) + 2 :].isdigit():
                    self.tails[d.name] = EventTail(d / "events.jsonl")
        return [ev for tail in self.tails.values() for ev in tail.read_new() if isinstance(ev, (StartEvent, StepEvent))]

    def tell(self, state: RunState) -> StragglerEvent | None:
        """The straggler event to write when the rank named over every node changed, else ``None``."""
        if self.prefix is None or not self.tails:
            return None
        skew = state.skew.own()
        if skew is None or skew.rank == self.told:
            return None
        self.told = skew.rank
        return StragglerEvent(
            straggler=skew.rank,
            node=skew.node,
            skew=skew.skew,
            share=skew.share,
            ranks=len(skew.ranks),
            message=skew.text,
        )
