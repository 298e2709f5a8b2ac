"""Recorded GPUs: ``FakeGpuSampler`` replays GPU figures from a list or a JSON file (tests and
demos on machines without GPUs), and :func:`make_gpu_sampler` picks it over the real NVML sampler
when ``FTTUI_FAKE_GPUS`` names such a file. Like the real sampler it never raises.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Sequence

from fttui.monitor.gpu import GpuSampler
from fttui.monitor.snapshots import GpuInfo, GpuSnapshot, opt_str

__all__ = ["FAKE_GPUS_ENV", "FakeGpuSampler", "make_gpu_sampler"]

FAKE_GPUS_ENV = "FTTUI_FAKE_GPUS"


class FakeGpuSampler:
    """Replays recorded GPU figures cyclically (for tests and demos on machines without GPUs).

    ``source`` is a list of frames (each a list of ``GpuInfo`` dicts), a dict
    ``{"driver", "cuda", "frames"}``, or the path of a JSON file holding that dict. An unreadable
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
        self.frames: list[tuple[GpuInfo, ...]] = [
            tuple(GpuInfo.from_dict(g, i) for i, g in enumerate(frame) if isinstance(g, dict))
            for frame in (frames if isinstance(frames, (list, tuple)) else [])
            if isinstance(frame, (list, tuple))
        ]
        if not self.frames and self._error is None:
            self._error = "fake GPU data has no frames"
        self._pos = 0

    def sample(self, pids: Iterable[int] = ()) -> GpuSnapshot:
        if self._error is not None:
            return GpuSnapshot(available=False, reason=self._error, gpus=())
        frame = self.frames[self._pos % len(self.frames)]
        self._pos += 1
        return GpuSnapshot(available=True, reason=None, driver=self.driver, cuda=self.cuda, gpus=frame)

    def close(self) -> None:
        pass

    def __enter__(self) -> "FakeGpuSampler":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_gpu_sampler() -> GpuSampler | FakeGpuSampler:
    """``FakeGpuSampler`` when ``FTTUI_FAKE_GPUS`` names a JSON file, else ``GpuSampler``."""
    path = os.environ.get(FAKE_GPUS_ENV, "").strip()
    if path:
        return FakeGpuSampler(path)
    return GpuSampler()
