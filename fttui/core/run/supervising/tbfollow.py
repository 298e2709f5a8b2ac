"""The training losses a command writes to TensorBoard event files while it runs.

:class:`TbFollower` looks for ``events.out.tfevents.*`` files under the command's working folder
(breadth first, at most :data:`MAX_DEPTH` folders deep, :data:`MAX_DIRS` folders visited per look,
hidden folders, virtual environments, ``node_modules`` and symbolic links to folders left out),
follows the first :data:`MAX_FILES` of them that were written since the run started, and reads
the scalars appended to them (:mod:`fttui.core.run.files.tfevents`: stdlib only). A scalar whose tag is one of
:data:`LOSS_TAGS` is the training loss of its step: per file, the first of those tags the file
holds (in that order) is its loss; the first file that holds one is the run's.

Steps: the event's ``step``, as the writer counted it. Lightning's ``TensorBoardLogger`` (a file
with Lightning's ``hparams.yaml`` beside it, which it writes right after its first flush: a file's
first losses wait one read for it) counts from 0 (its step is the optimizer steps done before the
one it logs), so its step ``k`` is step ``k + 1`` here; ``accelerator.log(...,
step=...)`` and ``SummaryWriter.add_scalar(tag, value, step)`` keep the writer's number.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from fttui.core.run.files.tfevents import TfEventsFile

__all__ = ["TbFollower", "LossPoint", "LOSS_TAGS", "MAX_DEPTH", "MAX_FILES", "MAX_DIRS"]

#: The scalar tags read as the training loss, best first (Lightning's ``self.log("train_loss")``
#: and its ``_step`` variant with ``on_epoch=True``, accelerate's ``accelerator.log({"train_loss"})``,
#: the common ``SummaryWriter`` names)
LOSS_TAGS = ("train_loss", "train_loss_step", "train/loss", "Loss/train", "loss/train", "loss")
MAX_DEPTH = 5
MAX_FILES = 16
MAX_DIRS = 2000
#: How often (seconds) the folders are looked through for new files at first; each look that finds
#: no loss waits :data:`SCAN_BACKOFF` times longer, up to :data:`SCAN_MAX_S` (a command that writes
#: no event file costs a look every half minute). Followed files are read at every poll.
SCAN_EVERY_S = 2.0
SCAN_BACKOFF = 1.5
SCAN_MAX_S = 30.0
_SKIP = {"node_modules", "__pycache__", "site-packages", "venv", "env"}
_PREFIX = "events.out.tfevents."
#: Lightning's TensorBoardLogger writes its hyperparameters beside its event file
_LIGHTNING_HPARAMS = "hparams.yaml"


@dataclass(frozen=True)
class LossPoint:
    """One training loss read from an event file: the step (as fttui counts: from 1), the
    writer's wall time, the value and its tag."""

    step: int
    wall_time: float | None
    loss: float
    tag: str


class _Followed:
    def __init__(self, path: Path) -> None:
        self.file = TfEventsFile(path)
        self.tag: str | None = None  # the loss tag of this file, once one is seen
        self.offset: int | None = None  # 1 for Lightning's logger (counts from 0), else 0
        self.held: list[tuple[int, float | None, float]] = []  # (step, wall time, loss) before the offset is known
        self.waited = False

    def points(self, final: bool = False) -> list[LossPoint]:
        for s in self.file.read():
            if self.tag is None:
                self.tag = next((t for t in LOSS_TAGS if t in s.values), None)
            if self.tag is not None and self.tag in s.values:
                self.held.append((s.step, s.wall_time, s.values[self.tag]))
        if not self.held or self.tag is None:
            return []
        if self.offset is None:
            # Lightning writes its hparams.yaml right after it flushes its first metrics: a file
            # with losses and none beside it waits one read for it (the last read decides at once)
            if (self.file.path.parent / _LIGHTNING_HPARAMS).exists():
                self.offset = 1
            elif self.waited or final:
                self.offset = 0
            else:
                self.waited = True
                return []
        out = [LossPoint(step + self.offset, wall, loss, self.tag) for step, wall, loss in self.held]
        self.held = []
        return out


class TbFollower:
    """``poll(now)``: the loss points written since the last poll (of the run's file: the first
    that gave one). ``since``: the run's start (unix time); older files are not followed."""

    def __init__(self, root: Path, since: float) -> None:
        self.root, self.since = root, since
        self.files: dict[Path, _Followed] = {}
        self.chosen: Path | None = None
        self.scanned_at: float | None = None
        self.scan_every = SCAN_EVERY_S

    def _scan(self) -> None:
        """Breadth first (the shallow folders a logger writes to before a deep data tree), at most
        :data:`MAX_DIRS` folders, :data:`MAX_DEPTH` deep."""
        queue: deque[tuple[Path, int]] = deque([(self.root, 0)])
        visited = 0
        while queue and visited < MAX_DIRS and len(self.files) < MAX_FILES:
            folder, depth = queue.popleft()
            visited += 1
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if depth + 1 <= MAX_DEPTH and not entry.name.startswith(".") and entry.name not in _SKIP:
                            queue.append((Path(entry.path), depth + 1))
                    elif entry.name.startswith(_PREFIX) and Path(entry.path) not in self.files:
                        if entry.stat().st_mtime < self.since - 1.0:
                            continue  # an earlier run's
                        self.files[Path(entry.path)] = _Followed(Path(entry.path))
                        if len(self.files) >= MAX_FILES:
                            return
                except OSError:
                    continue

    def poll(self, now: float, scan: bool = True, force: bool = False) -> list[LossPoint]:
        """The new loss points; ``scan`` False reads the files already followed without looking
        for new ones; ``force`` (the run's end) looks for them however recently it looked, and a
        file's first losses no longer wait for Lightning's hparams.yaml."""
        due = force or self.scanned_at is None or now - self.scanned_at >= self.scan_every
        if scan and due and self.chosen is None:
            if self.scanned_at is not None:
                self.scan_every = min(SCAN_MAX_S, self.scan_every * SCAN_BACKOFF)
            self.scanned_at = now
            try:
                self._scan()
            except OSError:
                pass
        out: list[LossPoint] = []
        for path, followed in list(self.files.items()):
            if self.chosen is not None and path != self.chosen:
                continue
            points = followed.points(final=force)
            if points and self.chosen is None:
                self.chosen = path
            if path == self.chosen:
                out += points
        return out
