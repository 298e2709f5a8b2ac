"""App test helpers: bounded waiting inside a Pilot session."""

from __future__ import annotations

import time

import pytest


def _screen_ready(app) -> bool:
    """The current screen has built what it builds after its first frame (the picker's override
    fields, ``PickerScreen.ready``): what a user could type into is there."""
    return getattr(app.screen, "ready", True) is not False


async def until(pilot, cond, timeout: float = 20.0, what: str = "condition", step: float = 0.1):
    """Pause the pilot until ``cond()`` is true on a ready screen (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v and _screen_ready(pilot.app):
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await pilot.pause(step)


@pytest.fixture
def fake_gpu_sampler():
    from fttui.monitor import FakeGpuSampler

    from tests.tui.fixtures import FAKE_GPUS

    return FakeGpuSampler(str(FAKE_GPUS))


@pytest.fixture
def anyio_backend():
    return "asyncio"
