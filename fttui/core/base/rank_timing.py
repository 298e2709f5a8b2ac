"""The names the ranks and fttui share about where time goes between ranks (issue 39): the switch,
the flight recorder's variable, and the files of a run directory's ``stacks`` folder.

Stdlib only: fttui's Trainer callback loads it by path into a command's own Python, through
:mod:`fttui.integrations.hangdump`.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "RANK_TIMING_ENV",
    "FR_BUFFER_ENV",
    "FR_ENTRIES",
    "STACKS_DIR",
    "REQUEST",
    "ANSWER_SUFFIX",
    "answer_name",
    "timing_off",
    "flight_recorder_env",
]

#: ``0`` turns the rank timing off: no collective timed, no flight recorder set, no answering thread
RANK_TIMING_ENV = "FTTUI_RANK_TIMING"
#: PyTorch's flight recorder (entries per process group); fttui's launches set it unless the user did
FR_BUFFER_ENV = "TORCH_FR_BUFFER_SIZE"
FR_ENTRIES = 2000
#: the run directory's folder of stack dumps and answers
STACKS_DIR = "stacks"
#: fttui's request to every rank: a request id, written to ``stacks/request``
REQUEST = "request"
ANSWER_SUFFIX = ".json"


def answer_name(rank: int, pid: int) -> str:
    """A rank's answer to the latest request, in ``stacks/``."""
    return f"rank-{rank}-pid-{pid}{ANSWER_SUFFIX}"


def timing_off(environ: Mapping[str, str]) -> bool:
    """Whether the rank timing is off (``FTTUI_RANK_TIMING=0``)."""
    return environ.get(RANK_TIMING_ENV, "1").strip() == "0"


def flight_recorder_env(outer: Mapping[str, str]) -> dict[str, str]:
    """The variables that turn PyTorch's flight recorder on for a run's process groups, unless
    the user sized it (``TORCH_FR_BUFFER_SIZE``, ``TORCH_NCCL_TRACE_BUFFER_SIZE``) or turned
    fttui's rank timing off."""
    if FR_BUFFER_ENV in outer or "TORCH_NCCL_TRACE_BUFFER_SIZE" in outer or timing_off(outer):
        return {}
    return {FR_BUFFER_ENV: str(FR_ENTRIES)}
