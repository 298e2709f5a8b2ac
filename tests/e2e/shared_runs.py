"""A home of its own for a module-scoped fixture whose run serves several tests (one training
process, not one per test: each costs ~8 CPU-s, most of it importing torch, transformers and
peft; docs/benchmarks.md). The autouse ``fttui_home`` of tests/conftest.py is per test, so such
a fixture names its own ``FTTUI_HOME`` in the environment of every command it starts, and the
tests that share it read that home's files. Tests sharing one fixture share an xdist group
(under xdist a module's fixture is built once per worker)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import LEFT_BEHIND, fttui_env


def home_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a command run on ``home``, as tests/conftest.py's ``fttui_home`` gives
    every test's: no app, no colour setting, no fake GPUs, one thread."""
    env = fttui_env(FTTUI_HOME=str(home), **extra)
    env.pop("FTTUI_FAKE_GPUS", None)
    env.pop("NO_COLOR", None)
    env["FTTUI_NO_APP"] = "1"
    return env


@contextmanager
def shared_home(tmp_path_factory, name: str):
    """A fresh ``FTTUI_HOME`` for a module fixture; at its end no process started with it may be
    alive (those left are killed and the fixture fails, naming them), as for a test's own home."""
    from tests.helpers import end_leftovers

    folder = tmp_path_factory.mktemp(name)
    try:
        yield folder / "fttui-home"
    finally:  # a fixture that failed half-way leaves nothing behind either
        lines = end_leftovers(folder, grace=30)
    if lines:
        pytest.fail(LEFT_BEHIND.format(what=f"the shared runs of {name}", n=len(lines), lines="\n".join(lines)),
                    pytrace=False)
