"""Event lines (``events.jsonl``): the one module that turns a line into its typed record and a
record into its line, and the writer of every JSON-lines file of a run directory.

Each event kind is one frozen record (:mod:`fttui.core.base.event_records`, re-exported here:
:class:`StepEvent`, :class:`StartEvent`, :class:`LaunchEvent`, ...; a kind this fttui does not
know is an :class:`UnknownEvent`, kept). Writers build the record and :func:`write_event` writes
``record.to_dict()`` as one line; readers get records, parsed once here: :func:`read_events` (a
whole file), :class:`EventTail` (what another process appended since), :func:`read_events_window`
(the head and tail of a long file), :func:`parse_event` (one parsed object), all tolerant of old
lines (a missing key reads as ``None``, a key this fttui does not know is kept in ``extra``).
Every line appended goes through fttui's one secret mask (:func:`fttui.core.base.redact.mask`).

Stdlib only, and of fttui only the records, the mask and the line reader (:mod:`.jsonl`), all
stdlib: fttui's Trainer callback (:mod:`fttui.integrations.hf`) loads this file, and they with
it, by path into a command's own Python. See docs/architecture.md, sections "Events" and "Monitor
core".
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any


def _by_path(name: str, *parts: str) -> Any:
    """A stdlib-only module of fttui loaded from its file (this file loaded by path)."""
    import importlib.util
    import sys

    if name in sys.modules:
        return sys.modules[name]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), *parts)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"fttui: cannot load {path}", name=name, path=path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


try:
    from fttui.core.base.event_records import (
        RECORDS,
        AttemptEvent,
        CancelEvent,
        EndEvent,
        ErrorEvent,
        EvalEvent,
        Event,
        ExitEvent,
        FaultEvent,
        ForecastEvent,
        LaunchEvent,
        MemoryWarningEvent,
        PhaseEvent,
        ResumedEvent,
        RetryEvent,
        SaveEvent,
        StalledEvent,
        StartEvent,
        StepEvent,
        StragglerEvent,
        TrackerEvent,
        UnknownEvent,
    )
    from fttui.core.base.probe_records import (
        ProbeCapEvent,
        ProbeEndEvent,
        ProbeGuessEvent,
        ProbeStartEvent,
        TrialEvent,
        TrialStartEvent,
    )
    from fttui.core.base.redact import mask
    from fttui.core.run.files.jsonl import JsonlTail, RecordTail, parse_line, read_head_tail, read_jsonl
except ImportError:  # loaded by path (fttui's Trainer callback in a command's Python): its stdlib siblings too
    _kinds = _by_path("_fttui_event_records", os.pardir, os.pardir, "base", "event_records.py")
    globals().update({n: getattr(_kinds, n) for n in _kinds.__all__})
    mask = _by_path("_fttui_redact", os.pardir, os.pardir, "base", "redact.py").mask
    _jsonl = _by_path("_fttui_jsonl", "jsonl.py")
    globals().update({n: getattr(_jsonl, n) for n in _jsonl.__all__})

__all__ = [
    "EV_START",
    "EV_STEP",
    "EV_END",
    "EV_ERROR",
    "EV_EXIT",
    "EVENT_NAMES",
    "SOURCE_WORKER",
    "SOURCE_SUPERVISOR",
    "Event",
    "UnknownEvent",
    "OtherEvent",
    "PhaseEvent",
    "StartEvent",
    "StepEvent",
    "EndEvent",
    "EvalEvent",
    "SaveEvent",
    "TrackerEvent",
    "ErrorEvent",
    "ExitEvent",
    "ForecastEvent",
    "AttemptEvent",
    "RetryEvent",
    "MemoryWarningEvent",
    "LaunchEvent",
    "CancelEvent",
    "StalledEvent",
    "ResumedEvent",
    "StragglerEvent",
    "FaultEvent",
    "ProbeStartEvent",
    "TrialStartEvent",
    "TrialEvent",
    "ProbeCapEvent",
    "ProbeGuessEvent",
    "ProbeEndEvent",
    "RECORDS",
    "parse_event",
    "record",
    "write_event",
    "read_events",
    "read_events_window",
    "EventTail",
    "JsonlTail",
    "read_jsonl",
    "append_jsonl",
    "encode_line",
    "parse_line",
]

EV_START = "start"
EV_STEP = "step"
EV_END = "end"
EV_ERROR = "error"
EV_EXIT = "exit"

SOURCE_WORKER = "worker"
SOURCE_SUPERVISOR = "supervisor"

#: the record of a kind fttui has no record for (its older name)
OtherEvent = UnknownEvent
EVENT_NAMES = tuple(RECORDS)


def parse_event(obj: Any) -> Event | None:
    """The record of one event line (a parsed JSON object); ``None`` when it is no event (no
    ``event`` name). A kind without a record is an :class:`UnknownEvent`, every key kept."""
    if not isinstance(obj, dict):
        return None
    kind = obj.get("event")
    if not isinstance(kind, str):
        return None
    return _of_kind(kind, obj)


def _of_kind(kind: str, obj: dict[str, Any]) -> Event:
    rec = RECORDS.get(kind, UnknownEvent).from_dict(obj)
    return dataclasses.replace(rec, name=kind) if isinstance(rec, UnknownEvent) else rec


def record(kind: str, /, **fields: Any) -> Event:
    """The record of kind ``kind`` with ``fields`` (the common keys among them), for a writer that
    names the kind (the worker's :class:`~fttui.worker.startup.Emitter`)."""
    return _of_kind(kind, fields)


def _records(objs: list[dict[str, Any]]) -> list[Event]:
    return [rec for rec in map(parse_event, objs) if rec is not None]


def read_events(path: str | os.PathLike[str]) -> list[Event]:
    """Every event record of an events file, in file order (corrupt lines and lines that are no
    event skipped; a missing file gives ``[]``)."""
    return _records(read_jsonl(path))


def read_events_window(path: str | os.PathLike[str], head_bytes: int, tail_bytes: int) -> list[Event]:
    """The event records of the first ``head_bytes`` and the last ``tail_bytes`` of an events file
    (the whole file when it is that small), in file order: a long run's start and its latest steps
    without reading it all (:mod:`fttui.core.run.control.brief`)."""
    return _records(read_head_tail(path, head_bytes, tail_bytes))


class EventTail(RecordTail[Event]):
    """The event records another process appended to an events file since the last
    :meth:`read_new` (:class:`~fttui.core.run.files.jsonl.RecordTail`)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, _records)


def write_event(path: str | os.PathLike[str], rec: Event, *, sparse: bool = False) -> dict[str, Any]:
    """Append ``rec`` to an events file (stamped with the time when it has none); the line as
    written. ``sparse``: leave the ``None`` fields out (a producer that knows only a few of them,
    the printed log's :mod:`fttui.core.run.supervising.logparse`). Values JSON cannot hold are written as their
    ``str``."""
    if rec.t is None:
        rec = dataclasses.replace(rec, t=time.time())
    obj = mask(rec.to_dict(sparse))  # the one secret mask, at the write
    _append(path, (json.dumps(obj, separators=(",", ":"), default=str) + "\n").encode("utf-8"))
    return obj


def encode_line(obj: dict[str, Any]) -> bytes:
    """One compact JSON line (with trailing newline) as UTF-8 bytes."""
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode("utf-8")


def append_jsonl(path: str | os.PathLike[str], obj: dict[str, Any]) -> None:
    """Append ``obj`` as one line with a single ``os.write`` on an O_APPEND descriptor (a resource
    sample of ``samples.jsonl``, through its record's
    :func:`fttui.core.run.files.sample_records.append_sample`; an event goes through its record,
    :func:`write_event`).

    Lines written this way by several processes never interleave (the write is one syscall on an
    append-mode descriptor). The file is created with mode 0o600 if missing.
    """
    _append(path, encode_line(mask(obj)))  # the one secret mask, at the write


def _append(path: str | os.PathLike[str], data: bytes) -> None:
    fd = os.open(os.fspath(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        written = os.write(fd, data)
        # A short write on a regular file only happens on a full disk or similar; finish it so the
        # line is at least complete (it may then interleave, which the reader tolerates).
        while written < len(data):
            n = os.write(fd, data[written:])
            if n <= 0:
                break
            written += n
    finally:
        os.close(fd)
