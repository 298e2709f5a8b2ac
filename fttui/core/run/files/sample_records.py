"""``samples.jsonl``'s record and its one reader and writer (issue 37, the run directory as a typed
contract; docs/architecture.md, "Run directory").

A line of ``samples.jsonl`` is one resource sample of a run's process tree: when it was taken
(``t``), the cards (a :class:`~fttui.monitor.GpuSnapshot`) and the host figures (a
:class:`~fttui.monitor.HostSnapshot`). Every sampler writes it through :func:`append_sample`
(``fttui.core.run.files.sampling.take_sample``); every reader gets :class:`Sample` records, each line
parsed once, from :func:`read_samples` (a whole file) or :class:`SampleTail` (what another
process appended since the last read). The folds take records, never the line's object.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from fttui.core.run.files.events import append_jsonl
from fttui.core.run.files.jsonl import RecordTail, read_jsonl
from fttui.monitor import GpuSnapshot, HostSnapshot, num

__all__ = ["Sample", "SampleTail", "append_sample", "read_samples"]


@dataclass(frozen=True)
class Sample:
    """One line of ``samples.jsonl``. ``gpu`` / ``host``: ``None`` when the line holds no such
    object (every sampler writes both; a hand-made or damaged line may lack one), so that a
    sample without cards leaves the latest card figures as they were."""

    t: float
    gpu: GpuSnapshot | None = None
    host: HostSnapshot | None = None

    def to_dict(self) -> dict[str, Any]:
        """The line's object: ``{"t", "gpu", "host"}``, the snapshots' own ``to_dict``."""
        out: dict[str, Any] = {"t": self.t}
        if self.gpu is not None:
            out["gpu"] = self.gpu.to_dict()
        if self.host is not None:
            out["host"] = self.host.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Any) -> Sample | None:
        """Tolerant, never raises: ``None`` for anything but an object with a finite ``t``; a
        ``gpu`` or ``host`` that is no object reads as ``None``, malformed figures in them as
        ``None`` (the snapshots' ``from_dict``)."""
        if not isinstance(d, dict):
            return None
        t = num(d.get("t"))
        if t is None:
            return None
        gpu, host = d.get("gpu"), d.get("host")
        return cls(
            t=t,
            gpu=GpuSnapshot.from_dict(gpu) if isinstance(gpu, dict) else None,
            host=HostSnapshot.from_dict(host) if isinstance(host, dict) else None,
        )


def _records(objs: Iterable[dict[str, Any]]) -> Iterator[Sample]:
    for obj in objs:
        rec = Sample.from_dict(obj)
        if rec is not None:
            yield rec


def append_sample(path: str | os.PathLike[str], sample: Sample) -> None:
    """Append ``sample`` to a samples file as one line (one ``os.write``: lines of several
    samplers never interleave)."""
    append_jsonl(path, sample.to_dict())


def read_samples(path: str | os.PathLike[str]) -> Iterator[Sample]:
    """Every sample record of a samples file, in file order (corrupt lines and lines that are no
    sample skipped; a missing file gives nothing)."""
    return _records(read_jsonl(path))


class SampleTail(RecordTail[Sample]):
    """The sample records another process appended to a samples file since the last
    :meth:`read_new` (:class:`~fttui.core.run.files.jsonl.RecordTail`)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, _records)
