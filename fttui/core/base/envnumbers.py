"""The numbers fttui reads from its environment, declared once with their bounds (issue 36).

``FTTUI_STALL_TIMEOUT=abc`` crashed a run's supervisor 30 s after the start (``float('abc')``),
leaving the run lost; ``nan``, ``inf`` and negative values were taken as they came. Each number is
declared here; :func:`check_env` refuses a bad one in one line before anything is written (the
command line calls it first), and :func:`env_float` is what a process reads it with.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from fttui.core.base.errors import FttuiError

__all__ = ["ENV_NUMBERS", "EnvNumber", "check_env", "env_float"]


@dataclass(frozen=True)
class EnvNumber:
    name: str
    low: float  # inclusive
    high: float  # inclusive
    meaning: str


#: every number fttui reads from its environment (docs/reliability.md says what each does)
ENV_NUMBERS: dict[str, EnvNumber] = {
    e.name: e
    for e in (
        EnvNumber("FTTUI_STALL_TIMEOUT", 0, 30 * 86400, "seconds without a step before a run is stalled, 0: automatic"),
        EnvNumber("FTTUI_STALL_FLOOR", 0, 30 * 86400, "the automatic stall timeout's floor, in seconds"),
        EnvNumber("FTTUI_KILL_GRACE", 0, 3600, "seconds between SIGTERM and SIGKILL when a run is stopped"),
        EnvNumber("FTTUI_SAMPLE_INTERVAL", 0.05, 60, "seconds between two samples of a run's memory"),
        EnvNumber("FTTUI_LINK_TIMEOUT", 1, 86400, "seconds fttui plan --link's test may take, Slurm's queue included"),
    )
}


def _parse(e: EnvNumber, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not e.low <= value <= e.high:
        raise FttuiError(
            f"{e.name}={text!r}: give a number from {e.low:.10g} to {e.high:.10g} ({e.meaning}), or unset it"
        )
    return value


def env_float(name: str, default: float, env: Mapping[str, str] | None = None) -> float:
    """The number ``name`` holds, else ``default`` (unset or empty); FttuiError when it is not one
    within its bounds (:data:`ENV_NUMBERS`)."""
    text = (os.environ if env is None else env).get(name, "").strip()
    return _parse(ENV_NUMBERS[name], text) if text else default


def check_env(env: Mapping[str, str] | None = None) -> None:
    """FttuiError, one line, for the first number of the environment that is not one."""
    source = os.environ if env is None else env
    for e in ENV_NUMBERS.values():
        text = source.get(e.name, "").strip()
        if text:
            _parse(e, text)
