"""The run directory is a typed contract (issue 37): events are typed records parsed once, in one
module; nothing else reads an event's kind off a dict, writes an event as a raw dict or reads
the events file's lines itself; so are the resource samples of ``samples.jsonl`` (their record
is :class:`fttui.core.run.files.sample_records.Sample`); folds take records, not dicts; a row is
folded from complete inputs (nothing patches it afterwards). Counted over fttui/ with the AST, so
that it cannot come back (docs/architecture.md, "Run directory", "Events")."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from fttui.core.base import event_records
from fttui.core.run.files import events
from fttui.monitor import GpuInfo, HostSnapshot

ROOT = Path(__file__).resolve().parents[2]
#: the one module that turns event lines into records (and records into lines)
PARSER = "fttui/core/run/files/events.py"
#: the records themselves: their one serialisation (``to_dict``) and tolerant reading (``from_dict``)
RECORDS = "fttui/core/base/event_records.py"
#: the JSON-lines primitives the parsers read with
LINES = "fttui/core/run/files/jsonl.py"
#: the one module that turns sample lines into records and records into lines (samples.jsonl)
SAMPLES = "fttui/core/run/files/sample_records.py"
#: a sample's parts, the GPU and host snapshots: their one serialisation and tolerant reading
SNAPSHOTS = "fttui/monitor/snapshots.py"
#: where the run directory's paths are named
RUNDIR = "fttui/core/run/files/rundir.py"
#: the fold that also takes a parsed object (a test's or a script's hand-made event) and has it
#: read by the parser first
FOLD = "fttui/core/run/fold/state.py"


def _sources():
    for p in sorted((ROOT / "fttui").rglob("*.py")):
        yield p.relative_to(ROOT).as_posix(), ast.parse(p.read_text(encoding="utf-8"))


def _event_key_reads(tree: ast.AST) -> list[int]:
    """``x["event"]`` and ``x.get("event")``: reading an event's kind off a dict."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "event":
            out.append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == "event"
        ):
            out.append(node.lineno)
    return out


def test_at_most_one_module_reads_an_events_kind_off_a_dict():
    found = {rel: lines for rel, tree in _sources() if (lines := _event_key_reads(tree))}
    assert set(found) <= {PARSER}, found  # 13 modules and 24 reads before issue 37


def test_no_event_is_written_as_a_raw_dict():
    """An event line is built from its record (``{"event": ...}`` only in the records' ``to_dict``)."""
    found = [
        f"{rel}:{node.lineno}"
        for rel, tree in _sources()
        if rel != RECORDS
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "event" for k in node.keys)
    ]
    assert found == []


def _calls(tree: ast.AST, names: set[str]):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in names:
                yield name, node


def test_one_module_parses_event_lines():
    """Outside the parser, no JSON-lines primitive is pointed at an events file and no event
    object is turned into its record: readers get records from :mod:`fttui.core.run.files.events`."""
    primitives = {"read_jsonl", "JsonlTail", "parse_line", "read_head_tail"}
    lines = [
        f"{rel}:{node.lineno}: {name}"
        for rel, tree in _sources()
        if rel not in (PARSER, LINES)
        for name, node in _calls(tree, primitives)
        if "event" in ast.unparse(node).lower()
    ]
    assert lines == []
    to_record = {"parse_event", "from_dict"}
    record_classes = {c.__name__ for c in event_records.RECORDS.values()} | {"Event", "UnknownEvent"}
    parsers = {
        rel
        for rel, tree in _sources()
        for name, node in _calls(tree, to_record)
        if name == "parse_event"
        or (isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value).split(".")[-1] in record_classes)
    }
    assert parsers <= {PARSER, RECORDS, FOLD}, parsers


def test_every_kind_fttui_writes_has_a_record():
    kinds = {
        "phase", "start", "step", "end", "eval", "save", "tracker", "forecast", "error", "exit", "attempt",
        "retry", "memory_warning", "launch", "cancel", "stalled", "resumed", "straggler", "fault",
        "probe_start", "trial_start", "trial", "probe_cap", "probe_guess", "probe_end",
    }  # fmt: skip
    assert set(events.RECORDS) == kinds
    unknown = events.parse_event({"event": "from_a_newer_fttui", "t": 1.0, "x": [1]})
    assert isinstance(unknown, events.UnknownEvent) and unknown.event == "from_a_newer_fttui"
    assert unknown.to_dict() == {"event": "from_a_newer_fttui", "t": 1.0, "rank": 0, "source": None, "x": [1]}


def test_folds_take_records_not_dicts():
    """No parameter that holds an event (``ev``, ``event``, ``start``, ``end``, ``events``) is
    annotated as a dict or ``Any`` in the run, experiments and results layers, the worker and the
    integrations; the fold's entry (``RunState.apply``) takes a record or a parsed object."""
    holders = {"ev", "event", "start", "end", "events"}
    where = (
        "fttui/core/run/",
        "fttui/core/experiments/",
        "fttui/core/results/",
        "fttui/worker/",
        "fttui/integrations/",
    )
    found = []
    for rel, tree in _sources():
        if not rel.startswith(where):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for arg in node.args.args + node.args.kwonlyargs:
                text = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                if (
                    arg.arg in holders
                    and ("dict" in text or "Any" in text)
                    and "Event" not in text
                    and not text.startswith("Callable")
                ):
                    found.append(f"{rel}:{node.lineno}: {node.name}({arg.arg}: {text})")
    assert found == []


def test_no_row_is_patched_after_its_fold():
    """A row is what :func:`fttui.core.results.columns.fold_row` makes of its complete inputs:
    nothing outside the row builder assigns to a row's status or environment afterwards."""
    found = []
    for rel, tree in _sources():
        if not rel.startswith(("fttui/core/run/", "fttui/core/experiments/", "fttui/worker/")):
            continue  # a stored row imported from another machine is the results layer's (exchange)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "amend_row":
                found.append(f"{rel}:{node.lineno}: def amend_row")
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                if (
                    None in node.keys
                    and {"status", "env"} & keys
                    and any(
                        isinstance(v, ast.Name) and v.id == "row" for k, v in zip(node.keys, node.values) if k is None
                    )
                ):
                    found.append(f"{rel}:{node.lineno}: {{**row, ...}}")
    assert found == []


# ------------------------------------------------------------------ samples.jsonl
#: the JSON-lines primitives (reading and writing), none of which may be pointed at a samples file
#: outside :data:`SAMPLES`
_LINE_PRIMITIVES = {"read_jsonl", "JsonlTail", "parse_line", "read_head_tail", "append_jsonl", "encode_line"}
#: what takes a samples file's path: the record module's reader, tail and writer, and the samplers'
#: ``take_sample`` (which writes through the writer)
_SAMPLE_IO = {"read_samples", "SampleTail", "append_sample", "take_sample"}


def test_one_module_reads_and_writes_sample_lines():
    """Outside :data:`SAMPLES`, no JSON-lines primitive is pointed at a samples file, a run
    directory's ``samples_path`` goes to the samples reader, tail or writer only (no
    ``open(rd.samples_path)``, no ``read_text``), and no sample object is turned into its record:
    readers get :class:`~fttui.core.run.files.sample_records.Sample` records, each line parsed once."""
    primitives = [
        f"{rel}:{node.lineno}: {name}"
        for rel, tree in _sources()
        if rel not in (SAMPLES, LINES)
        for name, node in _calls(tree, _LINE_PRIMITIVES)
        if "sample" in ast.unparse(node).lower()
    ]
    assert primitives == []  # watch (JsonlTail) and the replay (read_jsonl) before issue 37
    elsewhere = []
    for rel, tree in _sources():
        if rel in (SAMPLES, RUNDIR):
            continue
        handed = {
            id(arg)
            for name, call in _calls(tree, _SAMPLE_IO)
            for arg in [*call.args, *(k.value for k in call.keywords)]
        }
        elsewhere += [
            f"{rel}:{node.lineno}: {ast.unparse(node)}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "samples_path" and id(node) not in handed
        ]
    assert elsewhere == []
    parsers = {
        rel
        for rel, tree in _sources()
        for name, node in _calls(tree, {"from_dict"})
        if isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value).split(".")[-1] == "Sample"
    }
    assert parsers <= {SAMPLES}, parsers


def _key_reads(tree: ast.AST, keys: set[str]) -> list[str]:
    """``x["key"]`` and ``x.get("key")`` for a key in ``keys``: a value read off a dict."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in keys:
            out.append(f"{node.lineno}: [{node.slice.value!r}]")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in keys
        ):
            out.append(f"{node.lineno}: .get({node.args[0].value!r})")
    return out


def test_no_fold_reads_a_sample_off_a_dict():
    """A sample's figures are read off its record, never off the line's object: outside the
    snapshots' ``from_dict`` (:data:`SNAPSHOTS`) no module reads a figure only a sample holds
    (``tree_rss_mb``, ``build_nprocs``, ``mem_used_mb``, ``sm_clock_mhz``, ``throttle``...) off a
    dict, and outside :data:`SAMPLES` no module of the run layer or the views reads a sample's
    ``gpu`` or ``host`` part off one (the results layer's rows have a ``gpu`` column of their own)."""
    generic = {"index", "name", "uuid", "mem_total_mb"}  # a start event's card list has these too
    figures = {f.name for c in (GpuInfo, HostSnapshot) for f in dataclasses.fields(c)} - generic
    found = {rel: lines for rel, tree in _sources() if rel != SNAPSHOTS and (lines := _key_reads(tree, figures))}
    assert found == {}  # whyslow and phases before issue 37
    where = ("fttui/core/run/", "fttui/tui/", "fttui/monitor/")
    parts = {
        rel: lines
        for rel, tree in _sources()
        if rel.startswith(where) and rel != SAMPLES and (lines := _key_reads(tree, {"gpu", "host"}))
    }
    assert parts == {}  # fold_memory, whyslow and state before issue 37


def test_folds_take_sample_records_not_dicts():
    """No parameter that holds a sample (``sample``, ``samples``) is annotated as a dict or ``Any``;
    the fold's entry (``RunState.apply_sample``) and its parts' (``on_sample``) take records."""
    found = []
    entries = []
    for rel, tree in _sources():
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for arg in node.args.args + node.args.kwonlyargs:
                text = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                if arg.arg in ("sample", "samples") and ("dict" in text or "Any" in text or "Mapping" in text):
                    found.append(f"{rel}:{node.lineno}: {node.name}({arg.arg}: {text})")
            if node.name in ("apply_sample", "on_sample") and rel.startswith("fttui/core/run/"):
                first = node.args.args[1]
                entries.append((f"{rel}:{node.name}", ast.unparse(first.annotation) if first.annotation else ""))
    assert found == []
    assert len(entries) >= 4, entries  # RunState, MemoryFold, SpeedFold, PhaseFold
    assert all(text in ("Sample", "HostSnapshot") for _, text in entries), entries
