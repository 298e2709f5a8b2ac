"""Recorded GPUs: ``FakeGpuSampler`` replays GPU figures from a list or a JSON file (tests and
demos on machines without GPUs), and :func:`make_gpu_sampler` picks it over the real NVML sampler
when ``FTTUI_FAKE_GPUS`` names such a file. Like the real sampler it never raises.

A recorded card is a ``GpuInfo`` dict. It may also list the processes holding memory on it:
``"processes": [{"run": true, "used_mb": 5000}, {"pid": 5000001, "used_mb": 3000, "user":
"alice"}]``. Then its ``proc_mem_mb`` is computed per sample as NVML's per-process figure would
be: the memory of the processes among the pids given to ``sample(pids=...)`` (the run's process
tree), ``None`` without pids. ``"run": true`` stands for a process of the run's tree, whatever its
pid (real pids change from run to run); an entry with a ``pid`` counts only when that pid is
given (pids above 2**22 never exist: another user's). The card's ``mem_used_mb`` (device used)
stays as recorded: every process's memory is in it. Cards without ``processes`` keep their
recorded ``proc_mem_mb``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from fttui.monitor.gpu import GpuSampler
from fttui.monitor.snapshots import GpuInfo, GpuSnapshot, num, opt_int, opt_str
from fttui.monitor.visible import resolve_visible

__all__ = ["FAKE_GPUS_ENV", "FakeGpuSampler", "make_gpu_sampler"]

FAKE_GPUS_ENV = "FTTUI_FAKE_GPUS"


class FakeGpuSampler:
    """Replays recorded GPU figures cyclically (for tests and demos on machines without GPUs).

    ``source`` is a list of frames (each a list of ``GpuInfo`` dicts, see the module's doc for
    their ``processes``), a dict ``{"driver", "cuda", "used_api", "frames"}``, or the path of a JSON file holding
    that dict. An unreadable
    file does not raise: ``sample()`` then reports ``available=False`` with the reason.
    """

    def __init__(
        self,
        source: Sequence[Sequence[dict[str, Any]]] | dict[str, Any] | str | os.PathLike[str],
        driver: str | None = None,
        cuda: str | None = None,
    ) -> None:
        self._error: str | None = None
        data: Any = source
        if isinstance(source, (str, os.PathLike)):
            try:
                with open(source, encoding="utf-8") as f:
                    data = json.load(f)
            except (OSError, ValueError) as exc:
                self._error = f"fake GPU file {os.fspath(source)!r} unreadable: {exc}"
                data = {}
        if isinstance(data, dict):
            driver = driver if driver is not None else opt_str(data.get("driver"))
            cuda = cuda if cuda is not None else opt_str(data.get("cuda"))
            frames = data.get("frames") or []
        else:
            frames = data
        self.driver = driver
        self.cuda = cuda
        self.used_api = opt_str(data.get("used_api")) if isinstance(data, dict) else None
        raw = [
            [g for g in frame if isinstance(g, dict)]
            for frame in (frames if isinstance(frames, (list, tuple)) else [])
            if isinstance(frame, (list, tuple))
        ]
        self.frames: list[tuple[GpuInfo, ...]] = [
            tuple(GpuInfo.from_dict(g, i) for i, g in enumerate(frame)) for frame in raw
        ]
        # per frame, per card: the recorded processes, or None for a card without the list
        self.processes: list[tuple[list[tuple[int, float]] | None, ...]] = [
            tuple(_processes(g.get("processes")) for g in frame) for frame in raw
        ]
        if not self.frames and self._error is None:
            self._error = "fake GPU data has no frames"
        self._pos = 0

    def sample(self, pids: Iterable[int] = ()) -> GpuSnapshot:
        if self._error is not None:
            return GpuSnapshot(available=False, reason=self._error, gpus=())
        pos = self._pos % len(self.frames)
        self._pos += 1
        wanted = {int(p) for p in pids}
        frame = tuple(
            g if procs is None else replace(g, proc_mem_mb=_run_mem(procs, wanted))
            for g, procs in zip(self.frames[pos], self.processes[pos])
        )
        vis = resolve_visible(None, frame)
        return GpuSnapshot(
            available=True,
            reason=None,
            driver=self.driver,
            cuda=self.cuda,
            gpus=frame,
            visible=vis.indices,
            mig=vis.mig,
            used_api=self.used_api,
        )

    def close(self) -> None:
        pass

    def __enter__(self) -> FakeGpuSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


RUN = -1  # the pid slot of a ``"run": true`` process: one of the run's tree, whatever its pid


def _processes(value: Any) -> list[tuple[int, float]] | None:
    """(pid or RUN, used MB) per recorded process; ``None`` when the card lists none."""
    if not isinstance(value, list):
        return None
    out = []
    for p in value:
        if not isinstance(p, dict):
            continue
        pid = RUN if p.get("run") is True else opt_int(p.get("pid"))
        if pid is not None and (pid == RUN or pid >= 0):
            out.append((pid, num(p.get("used_mb")) or 0.0))
    return out


def _run_mem(procs: list[tuple[int, float]], pids: set[int]) -> float | None:
    """The memory of the run's processes on the card, as the real sampler sums it."""
    if not pids:
        return None
    return sum(mb for pid, mb in procs if pid == RUN or pid in pids)


def make_gpu_sampler() -> GpuSampler | FakeGpuSampler:
    """``FakeGpuSampler`` when ``FTTUI_FAKE_GPUS`` names a JSON file, else ``GpuSampler``."""
    path = os.environ.get(FAKE_GPUS_ENV, "").strip()
    if path:
        return FakeGpuSampler(path)
    return GpuSampler()
