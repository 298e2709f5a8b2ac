"""The slow rank, named: each rank's compute and wait over the latest steps, the skew between
them, and the rank the others wait for (issue 39 item 1; docs/reliability.md, "The slow rank").

Under synchronous data parallelism every rank's step takes as long as the slowest rank's: the
step time cannot name it. What differs is where the time goes. Each rank's step events carry the
seconds it was blocked in collectives (``comm_wait_s``, :mod:`fttui.integrations.commwait`); its
compute is the rest of its step. In each step every rank has reported, the rank that waited least
is the one the others waited for, and for as long as the others' median wait exceeds its own: its
lateness. Over the latest :data:`WINDOW` such steady steps (sums, not medians: a rank slowed now
and then, by a busy host or a throttled card, is late in a few steps and on time in the rest), the
rank with the most lateness is the straggler when the others waited for it :data:`SHARE_AT` of
the window's time, at least :data:`LEAD` times as long as for any other rank (noise makes every
rank a little late now and then, about equally), it computes :data:`SKEW_AT` times the median of
the others, and all of it held for :data:`HELD` windows in a row. Sentence: ``rank 3 on n2 computes 1.8x the
median; the others wait for it 40% of each step`` (its compute over the median of the others').

Pure, stdlib only.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, replace

from fttui.core.base.event_records import StartEvent, StepEvent, StragglerEvent
from fttui.core.run.files.statusfile import to_int
from fttui.monitor import num

__all__ = ["WINDOW", "MIN_STEPS", "SHARE_AT", "LEAD", "SKEW_AT", "HELD", "RankTime", "Skew", "SkewFold", "skew_of"]

#: the latest steps every rank reported that the straggler is judged over
WINDOW = 20
#: fewer such steps are not judged yet
MIN_STEPS = 5
#: the others waited for the straggler at least this share of the window's time ...
SHARE_AT = 0.2
#: ... at least this many times as long as for any other rank ...
LEAD = 2.5
#: ... it computes at least this many times the median of the others ...
SKEW_AT = 1.4
#: ... in this many windows in a row (one noisy window names nobody)
HELD = 2
_PENDING = 64  # steps some rank has not reported yet, kept at most


@dataclass(frozen=True)
class RankTime:
    """One rank over the window: its steps, mean step, blocked and compute seconds, and the share
    of the window's time the others waited for it."""

    rank: int
    node: str | None
    steps: int
    step_s: float
    wait_s: float
    late_share: float = 0.0

    @property
    def compute_s(self) -> float:
        return max(0.0, self.step_s - self.wait_s)

    @property
    def wait_share(self) -> float:
        return self.wait_s / self.step_s if self.step_s > 0 else 0.0


@dataclass(frozen=True)
class Skew:
    """The ranks' compute and wait over the window, and the straggler when there is one (``rank``
    ``None``: no rank stands out). ``skew``: the rank the others waited for most, its compute over
    the median of the others'; ``share``: the share of the window's time the others waited for it."""

    ranks: tuple[RankTime, ...]
    skew: float | None = None
    share: float | None = None
    rank: int | None = None
    node: str | None = None

    @property
    def text(self) -> str | None:
        """``rank 3 on n2 computes 1.8x the median; the others wait for it 40% of each step``."""
        if self.rank is None or self.skew is None or self.share is None:
            return None
        where = f" on {self.node}" if self.node else ""
        return (
            f"rank {self.rank}{where} computes {self.skew:.1f}x the median; "
            f"the others wait for it {100 * self.share:.0f}% of each step"
        )


#: one step every rank reported: rank -> (step seconds, blocked seconds)
StepTimes = dict[int, tuple[float, float]]


def skew_of(steps: list[StepTimes], nodes: dict[int, str] | None = None) -> Skew | None:
    """The skew over ``steps`` (each with the same ranks), its straggler named when the window
    alone names one (:class:`SkewFold` also asks it to hold); ``None``: under two ranks or
    :data:`MIN_STEPS` steps, or steps of different ranks."""
    if len(steps) < MIN_STEPS or len(steps[0]) < 2 or any(set(s) != set(steps[0]) for s in steps):
        return None
    nodes = nodes or {}
    late = dict.fromkeys(steps[0], 0.0)
    total = 0.0
    for times in steps:
        waits = {r: w for r, (_, w) in times.items()}
        first = min(waits, key=lambda r: waits[r])
        late[first] += max(0.0, statistics.median(w for r, w in waits.items() if r != first) - waits[first])
        total += statistics.median(t for t, _ in times.values())
    ranks = [
        RankTime(
            rank=r,
            node=nodes.get(r),
            steps=len(steps),
            step_s=sum(s[r][0] for s in steps) / len(steps),
            wait_s=sum(s[r][1] for s in steps) / len(steps),
            late_share=late[r] / total if total > 0 else 0.0,
        )
        for r in sorted(late)
    ]
    slow = max(ranks, key=lambda r: r.late_share)
    others = [r for r in ranks if r is not slow]
    median = statistics.median(r.compute_s for r in others)
    runner_up = max(r.late_share for r in others)
    skew = slow.compute_s / median if median > 0 else None
    named = slow.late_share >= SHARE_AT and slow.late_share >= LEAD * runner_up and skew is not None and skew >= SKEW_AT
    return Skew(
        ranks=tuple(ranks),
        skew=None if skew is None else round(skew, 2),
        share=round(slow.late_share, 3),
        rank=slow.rank if named else None,
        node=slow.node if named else None,
    )


class SkewFold:
    """The latest :data:`WINDOW` steady steps every rank reported with a blocked time, each rank's
    node (its start event's), the skew now (:meth:`now`) and the worst of the run (:meth:`worst`:
    one with a named straggler first, the largest share among those)."""

    def __init__(self, warmup_exclude_steps: int = 1) -> None:
        self.warmup = warmup_exclude_steps
        self._ranks: set[int] = set()
        self._node: dict[int, str] = {}
        self._pending: dict[int, StepTimes] = {}
        self._window: deque[StepTimes] = deque(maxlen=WINDOW)
        self._now: Skew | None = None
        self._worst: Skew | None = None
        self._held: tuple[int | None, int] = (None, 0)  # the rank the latest windows named, how many in a row
        self._told: Skew | None = None  # the supervisor's judgement over every node (a straggler event)

    def on_start(self, ev: StartEvent, rank: int) -> None:
        self._ranks.add(rank)
        if isinstance(ev.node, str) and ev.node:
            self._node[rank] = ev.node

    def on_step(self, ev: StepEvent, rank: int, step: int) -> None:
        took, wait = num(ev.step_time), num(ev.comm_wait_s)
        if took is None or wait is None or took <= 0 or step <= self.warmup:
            return
        self._ranks.add(rank)
        times = self._pending.setdefault(step, {})
        times[rank] = (took, min(wait, took))
        if len(times) < len(self._ranks):
            if len(self._pending) > _PENDING:  # a rank that stopped reporting: its steps never complete
                del self._pending[min(self._pending)]
            return
        for old in [s for s in self._pending if s <= step]:
            del self._pending[old]
        if self._window and set(self._window[-1]) != set(times):  # a rank joined (a node's peers read later)
            self._window.clear()
        self._window.append(times)
        self._judge()

    def _judge(self) -> None:
        now = skew_of(list(self._window), self._node)
        if now is None:
            return
        rank, held = self._held
        self._held = (now.rank, held + 1 if now.rank == rank else 1)
        if now.rank is not None and self._held[1] < HELD:
            now = replace(now, rank=None, node=None)
        self._now = now
        worst = self._worst
        if worst is None or (now.rank is not None, now.share or 0.0) > (worst.rank is not None, worst.share or 0.0):
            self._worst = now

    def on_told(self, ev: StragglerEvent) -> None:
        """The supervisor's judgement over every node's ranks (a Slurm job: each node's run holds
        its own ranks): it names a straggler this node's ranks alone may not show."""
        told = Skew(ranks=(), skew=num(ev.skew), share=num(ev.share), rank=to_int(ev.straggler), node=ev.node)
        self._told = told
        worst = self._worst
        if told.rank is not None and (
            worst is None or (True, told.share or 0.0) > (worst.rank is not None, worst.share or 0.0)
        ):
            self._worst = told

    def own(self) -> Skew | None:
        """The judgement of the ranks folded here (not a straggler event's)."""
        return self._now

    def now(self) -> Skew | None:
        if self._told is not None and self._told.rank is not None:
            return self._told
        return self._now

    def worst(self) -> Skew | None:
        return self._worst
