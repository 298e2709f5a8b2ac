"""``status.json``'s record: how a run ended, the supervisor's verdict.

``FinalStatus`` is built once by ``fttui.core.run.row.summary.final_status``, written by the
supervisor (through :class:`~fttui.core.run.files.rundir.RunDir`), read back with
``FinalStatus.from_dict`` (tolerant of any JSON) and folded into the run's state by
``RunState.set_final``, so that the ``RunSnapshot`` alone carries the status, its message and the
OOM kind (the status line every view shows is :mod:`fttui.core.run.fold.status`'s).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from fttui.monitor import num


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def to_int(value: Any) -> int | None:
    """An int from any finite number (or numeric string); ``None`` for anything else."""
    f = num(value)
    return None if f is None else int(f)


@dataclass(frozen=True)
class FinalStatus:
    """How a run ended (``status.json``). ``status`` is one of ``FINAL_STATUSES`` when the
    supervisor wrote it ("" when a file lacks it); ``signal`` is the signal's name
    ("SIGKILL"); ``error`` the message shown after the status; ``row_saved`` and ``ended`` are
    set by the supervisor once the summary row is stored. ``extra``: the keys of the file this
    record does not declare (a Slurm job directory's ``slurm_state`` and ``nodes``), written back
    as they were."""

    status: str
    returncode: int | None = None
    signal: str | None = None
    oom_kind: str | None = None
    error: str | None = None
    error_step: int | None = None
    error_rank: int | None = None
    row_saved: bool | None = None
    ended: float | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    #: the keys ``from_dict`` reads (the others go to ``extra``)
    _KEYS: ClassVar[tuple[str, ...]] = (
        "status",
        "returncode",
        "signal",
        "oom_kind",
        "error",
        "error_step",
        "error_rank",
        "row_saved",
        "ended",
    )

    @classmethod
    def from_dict(cls, d: Any) -> FinalStatus | None:
        """Read ``status.json``'s object; ``None`` when it is not one. Wrong types read as unset;
        an ``error`` given as an object ``{message, oom_kind, step, rank}`` is read too."""
        if not isinstance(d, dict):
            return None
        err = d.get("error")
        detail: dict[str, Any] = err if isinstance(err, dict) else {}
        saved = d.get("row_saved")
        return cls(
            status=_str(d.get("status")) or "",
            returncode=to_int(d.get("returncode")),
            signal=_str(d.get("signal")),
            oom_kind=_str(d.get("oom_kind")) or _str(detail.get("oom_kind")),
            error=_str(detail.get("message")) if detail else _str(err),
            error_step=to_int(d.get("error_step") if d.get("error_step") is not None else detail.get("step")),
            error_rank=to_int(d.get("error_rank") if d.get("error_rank") is not None else detail.get("rank")),
            row_saved=saved if isinstance(saved, bool) else None,
            ended=num(d.get("ended")),
            extra={k: v for k, v in d.items() if k not in cls._KEYS},
        )

    def to_dict(self) -> dict[str, Any]:
        """``status.json``'s object: the verdict's keys always, ``row_saved`` and ``ended`` once
        the supervisor set them."""
        out: dict[str, Any] = {
            "returncode": self.returncode,
            "signal": self.signal,
            "oom_kind": self.oom_kind,
            "error": self.error,
            "error_step": self.error_step,
            "error_rank": self.error_rank,
            "status": self.status,
        }
        if self.row_saved is not None:
            out["row_saved"] = self.row_saved
        if self.ended is not None:
            out["ended"] = self.ended
        return {**out, **self.extra}


__all__ = ["FinalStatus"]
