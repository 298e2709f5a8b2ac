"""fttui.core.run.files.events: incremental JSON-lines reader and atomic appender."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat

from fttui.core.run.files.events import EV_STEP, JsonlTail, append_jsonl, read_jsonl


def _write(path, data: bytes, mode: str = "ab") -> None:
    with open(path, mode) as f:
        f.write(data)


def test_missing_file_gives_empty(tmp_path):
    tail = JsonlTail(tmp_path / "nope.jsonl")
    assert tail.read_new() == []
    assert tail.read_new() == []
    assert read_jsonl(tmp_path / "nope.jsonl") == []
    assert tail.corrupt == 0


def test_reads_only_new_lines(tmp_path):
    p = tmp_path / "e.jsonl"
    append_jsonl(p, {"event": "start", "t": 1.0})
    tail = JsonlTail(p)
    assert tail.read_new() == [{"event": "start", "t": 1.0}]
    assert tail.read_new() == []
    append_jsonl(p, {"event": EV_STEP, "step": 1})
    append_jsonl(p, {"event": EV_STEP, "step": 2})
    assert [e["step"] for e in tail.read_new()] == [1, 2]
    assert tail.read_new() == []


def test_partial_line_is_buffered_until_complete(tmp_path):
    p = tmp_path / "e.jsonl"
    line = json.dumps({"event": "step", "step": 7, "loss": 1.5}).encode()
    _write(p, b'{"event":"start"}\n' + line[:10])
    tail = JsonlTail(p)
    assert tail.read_new() == [{"event": "start"}]
    assert tail.pending == line[:10]
    assert tail.read_new() == []
    _write(p, line[10:20])
    assert tail.read_new() == []
    _write(p, line[20:] + b"\n")
    assert tail.read_new() == [{"event": "step", "step": 7, "loss": 1.5}]
    assert tail.corrupt == 0
    assert tail.pending == b""


def test_partial_multibyte_utf8_split(tmp_path):
    p = tmp_path / "e.jsonl"
    data = json.dumps({"msg": "héllo ✓"}, ensure_ascii=False).encode() + b"\n"
    cut = data.index("✓".encode()) + 1  # in the middle of a 3-byte character
    _write(p, data[:cut])
    tail = JsonlTail(p)
    assert tail.read_new() == []
    _write(p, data[cut:])
    assert tail.read_new() == [{"msg": "héllo ✓"}]
    assert tail.corrupt == 0


def test_corrupt_lines_and_invalid_utf8_are_skipped_and_counted(tmp_path):
    p = tmp_path / "e.jsonl"
    _write(
        p,
        b'{"a":1}\n'
        b"not json\n"
        b'{"b":\n'
        b"[1,2,3]\n"  # valid JSON, but not an object
        b'"just a string"\n'
        b'{"c":"\xff\xfe"}\n'  # invalid UTF-8
        b"\n"  # blank lines are not corrupt
        b'{"d":4}\n',
    )
    tail = JsonlTail(p)
    assert tail.read_new() == [{"a": 1}, {"d": 4}]
    assert tail.corrupt == 5
    assert read_jsonl(p) == [{"a": 1}, {"d": 4}]


def test_truncation_restarts_from_zero(tmp_path):
    p = tmp_path / "e.jsonl"
    for i in range(5):
        append_jsonl(p, {"i": i})
    tail = JsonlTail(p)
    assert len(tail.read_new()) == 5
    with open(p, "r+b") as f:
        f.truncate(0)
    append_jsonl(p, {"i": "new"})
    assert tail.read_new() == [{"i": "new"}]
    assert tail.restarts == 1


def test_replacement_restarts_from_zero(tmp_path):
    p = tmp_path / "e.jsonl"
    for i in range(3):
        append_jsonl(p, {"i": i})
    tail = JsonlTail(p)
    assert len(tail.read_new()) == 3
    # replaced by a different (even bigger) file: new inode
    tmp = tmp_path / "e.jsonl.tmp"
    for i in range(10):
        append_jsonl(tmp, {"j": i})
    keep = open(p, "rb")  # keep the old inode alive so it cannot be reused
    try:
        os.replace(tmp, p)
        got = tail.read_new()
    finally:
        keep.close()
    assert [e["j"] for e in got] == list(range(10))


def test_deleted_then_recreated(tmp_path):
    p = tmp_path / "e.jsonl"
    append_jsonl(p, {"i": 0})
    append_jsonl(p, {"i": 1})
    tail = JsonlTail(p)
    assert len(tail.read_new()) == 2
    os.unlink(p)
    assert tail.read_new() == []
    append_jsonl(p, {"i": "again"})
    assert tail.read_new() == [{"i": "again"}]


def test_read_jsonl_includes_final_line_without_newline(tmp_path):
    p = tmp_path / "e.jsonl"
    _write(p, b'{"a":1}\n{"b":2}')
    assert read_jsonl(p) == [{"a": 1}, {"b": 2}]
    assert read_jsonl(p, include_partial=False) == [{"a": 1}]


def test_append_format_and_mode(tmp_path):
    p = tmp_path / "e.jsonl"
    append_jsonl(p, {"event": "step", "loss": 0.5, "name": "ü"})
    raw = p.read_bytes()
    assert raw == b'{"event":"step","loss":0.5,"name":"\\u00fc"}\n'
    assert stat.S_IMODE(os.stat(p).st_mode) & 0o077 == 0


def _writer(path: str, wid: int, n: int) -> None:
    pad = "x" * (200 + 37 * wid)  # lines of different lengths, several hundred bytes
    for i in range(n):
        append_jsonl(path, {"w": wid, "i": i, "pad": pad})


def test_concurrent_appends_never_interleave(tmp_path):
    p = str(tmp_path / "e.jsonl")
    ctx = multiprocessing.get_context("spawn" if os.name != "posix" else "fork")
    procs = [ctx.Process(target=_writer, args=(p, w, 200)) for w in range(4)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join(60)
        assert pr.exitcode == 0
    tail = JsonlTail(p)
    objs = tail.read_new()
    assert tail.corrupt == 0
    assert len(objs) == 800
    for w in range(4):
        assert [o["i"] for o in objs if o["w"] == w] == list(range(200))


def test_a_record_of_a_kind_with_a_kind_field(tmp_path):
    """``record`` and the worker's Emitter take the event's kind positionally: an error's or a
    save's own ``kind`` field is a field (a worker that could not write its error was silent)."""
    from fttui.core.run.files.events import ErrorEvent, SaveEvent, read_events, record
    from fttui.worker.startup import Emitter

    assert record("error", kind="oom", message="x").kind == "oom"
    emit = Emitter(str(tmp_path / "events.jsonl"), 1)
    emit("error", kind="error", oom_kind=None, message="bad data", step=0)
    emit("save", kind="model", path="/o", step=3)
    err, save = read_events(tmp_path / "events.jsonl")
    assert isinstance(err, ErrorEvent) and (err.kind, err.message, err.rank, err.source) == ("error", "bad data", 1, "worker")
    assert isinstance(save, SaveEvent) and (save.kind, save.path) == ("model", "/o")
