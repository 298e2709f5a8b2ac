"""The records of a run directory's JSON files besides the profile and the status: ``command.json``
(:class:`CommandFile`), ``supervisor.json`` (:class:`SupervisorFile`) and ``exit.json``
(:class:`ExitFile`). :class:`fttui.core.run.rundir.RunDir` reads each into its record and writes
it back; nothing else reads these files.

Reading is tolerant, as for the events: a missing key, or a value of the wrong type, reads as
``None`` (or the field's default); a key the record does not declare is kept in ``extra`` and
written back. Writing leaves ``None`` fields out except those the file has always held
(``ALWAYS``), so a reader of an older fttui finds what it found. Pure, stdlib only.
docs/architecture.md, "Run directory".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = ["CommandFile", "SupervisorFile", "ExitFile"]


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _pid(v: Any) -> int | None:
    """A process id: 2 to 2^22 (Linux's largest pid_max); 0, 1 (init), negatives (a kill of -1
    signals every process) and 10^20 (an OverflowError in os.kill) read as none (issue 36)."""
    n = _int(v)
    return n if n is not None and 1 < n <= 1 << 22 else None


def _num(v: Any) -> float | None:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    try:
        return v if math.isfinite(v) else None
    except OverflowError:  # an integer too large for a float
        return None


def _time(v: Any) -> float | None:
    """A Unix time: 0 to 2^33 s (the year 2242); 1e400 or a huge integer read as none (they
    overflowed datetime)."""
    t = _num(v)
    return t if t is not None and 0 <= t < 2**33 else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _map(v: Any) -> dict[str, Any] | None:
    return dict(v) if isinstance(v, Mapping) else None


class _File:
    """``from_dict`` (tolerant, by each field's reader in ``READ``) and ``to_dict``."""

    READ: ClassVar[dict[str, Any]] = {}
    ALWAYS: ClassVar[tuple[str, ...]] = ()
    extra: dict[str, Any]  # each record's own field: the keys it does not declare

    @classmethod
    def from_dict(cls, obj: Any) -> Any:
        """The record of a parsed file; ``None`` when it is no JSON object."""
        if not isinstance(obj, Mapping):
            return None
        known = {k: read(obj.get(k)) for k, read in cls.READ.items() if k in obj}
        extra = {k: v for k, v in obj.items() if k not in cls.READ}
        return cls(**{k: v for k, v in known.items() if v is not None}, extra=extra)  # type: ignore[call-arg]

    def to_dict(self) -> dict[str, Any]:
        out = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if f.name != "extra" and (getattr(self, f.name) is not None or f.name in self.ALWAYS)
        }
        return {**out, **self.extra}


@dataclass(frozen=True, kw_only=True)
class CommandFile(_File):
    """``command.json``: what the supervisor starts (``argv``, the ``env`` it adds, masked), when the
    directory was made, the launch's ``kind`` (``run``, ``probe``, ``sweep``, ``watch``,
    ``command``, ``slurm``; ``None``: a directory written before it moved here from profile.json)
    and ``group`` (the probe or sweep id); a command run's ``cwd`` and ``host_limit_bytes``; what a
    resumed run continues (``resume``: ``run_id``, ``checkpoint``, ``step``), an attempt that
    recovers from an out of memory (``attempt``), a Slurm node's job (``slurm``)."""

    ALWAYS: ClassVar[tuple[str, ...]] = ("argv", "env", "created", "kind", "group")
    READ: ClassVar[dict[str, Any]] = {
        "argv": lambda v: [str(a) for a in v] if isinstance(v, list) else None,
        "env": _map,
        "created": _time,
        "kind": lambda v: str(v or "run"),
        "group": _str,
        "cwd": _str,
        "host_limit_bytes": _int,
        "resume": _map,
        "attempt": _map,
        "slurm": _map,
    }
    argv: list[str] | None = None
    env: dict[str, Any] = field(default_factory=dict)
    created: float | None = None
    kind: str | None = None
    group: str | None = None
    cwd: str | None = None
    host_limit_bytes: int | None = None
    resume: dict[str, Any] | None = None
    attempt: dict[str, Any] | None = None
    slurm: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, kw_only=True)
class SupervisorFile(_File):
    """``supervisor.json``: the supervisor's (or a watcher's) ``pid``, process group, start time
    (``started``; ``create_time`` for a person and for directories written before ``id``, its
    start ticks and boot id: what decides whether it is alive), the training's process group
    (``train_pgid``) and its leader's ``train_id``, the run's ``cgroup`` (null where none could be
    made: a watcher's too); a watcher's ``watched_pid``."""

    ALWAYS: ClassVar[tuple[str, ...]] = ("pid", "pgid", "started", "create_time", "id", "cgroup")
    READ: ClassVar[dict[str, Any]] = {
        "pid": _pid,
        "pgid": _pid,
        "started": _time,
        "create_time": _time,
        "id": _map,
        "train_pgid": _pid,
        "train_id": _map,
        "cgroup": _str,
        "watched_pid": _pid,
    }
    pid: int | None = None
    pgid: int | None = None
    started: float | None = None
    create_time: float | None = None
    id: dict[str, Any] | None = None
    train_pgid: int | None = None
    train_id: dict[str, Any] | None = None
    cgroup: str | None = None
    watched_pid: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, kw_only=True)
class ExitFile(_File):
    """``exit.json``, the log writer's: the training command's ``returncode`` (negative: killed by
    that signal), when (``t``), its ``pid``, and the ``error`` that kept it from starting or that
    the log writer hit (a full disk)."""

    ALWAYS: ClassVar[tuple[str, ...]] = ("returncode", "t", "pid")
    READ: ClassVar[dict[str, Any]] = {"returncode": _int, "t": _time, "pid": _pid, "error": _str}
    returncode: int | None = None
    t: float | None = None
    pid: int | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
