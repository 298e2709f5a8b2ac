"""fttui.core.run.control.brief: step, total, ETA, start time and liveness of synthetic run directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from fttui.core.base import paths
from fttui.core.run.control import brief
from fttui.core.run.control.brief import live_briefs, run_brief
from fttui.core.run.files.events import read_jsonl
from fttui.core.run.files.jsonl import read_head_tail
from fttui.core.run.files.rundir import RunDir, list_runs
from fttui.core.run.fold.state import RunState

T0 = 1_700_000_000.0


def head_tail_events(path, head_bytes=brief.HEAD_BYTES, tail_bytes=brief.TAIL_BYTES):
    return read_head_tail(path, head_bytes, tail_bytes)


def make_run(run_id: str, *, steps: int = 12, total: int = 20, ranks: int = 1, status: str | None = None,
             pid: int | None = None, step_s: float = 0.8, events: bool = True, pad: int = 0) -> RunDir:
    """A run directory as the supervisor leaves it: launch, start and step events (``train_time``
    grows by ``step_s`` a step, the first step takes twice that), ``status.json`` when
    ``status`` is given, ``supervisor.json`` with ``pid``. ``pad`` adds a filler field to each
    step event to make the file long."""
    path = paths.ensure_dir(paths.runs_dir()) / run_id
    path.mkdir()
    (path / "profile.json").write_text(json.dumps({"name": "demo-lora", "train": {"warmup_exclude_steps": 1}}))
    (path / "command.json").write_text(json.dumps({"argv": ["x"], "created": T0 - 3, "kind": "run"}))
    if pid is not None:
        try:  # a supervisor records who it is (its start ticks and boot): a bare pid is not trusted
            from fttui.core.run.processes.guard import identity

            ident = identity(pid).to_dict()
        except Exception:  # a pid that is gone
            ident = None
        (path / "supervisor.json").write_text(json.dumps({"pid": pid, "pgid": 0, "started": T0, "id": ident}))
    if events:
        lines = [{"event": "launch", "t": T0, "rank": -1}]
        lines += [{"event": "start", "t": T0 + 5, "rank": r, "total_steps": total} for r in range(ranks)]
        for s in range(1, steps + 1):
            tt = 2 * step_s + (s - 1) * step_s
            for r in range(ranks):
                ev = {"event": "step", "t": T0 + 5 + tt, "rank": r, "step": s, "total_steps": total,
                      "samples": 8 * s, "train_time": tt, "step_time": step_s}
                if pad:
                    ev["pad"] = "x" * pad
                lines.append(ev)
        (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    if status is not None:
        (path / "status.json").write_text(json.dumps({"status": status, "returncode": 0}))
    return RunDir(path)


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_live_run_step_total_eta_and_start():
    rd = make_run("20260101-000000-demo-lora-0001", steps=12, total=20, pid=os.getpid())
    b = run_brief(rd)
    assert (b.run_id, b.profile, b.kind, b.state) == (rd.run_id, "demo-lora", "run", "running")
    assert b.live
    assert (b.step, b.total_steps) == (12, 20)
    assert b.eta_s == pytest.approx(8 * 0.8)  # 8 steps left at the steady 0.8 s a step
    assert b.step_text() == "12/20"
    assert b.eta_text() == "00:06"
    assert b.started == T0  # the supervisor's launch event
    assert b.started_text() == time.strftime("%Y-%m-%d %H:%M", time.localtime(T0))


def test_long_events_file_reads_only_both_ends_and_agrees_with_the_full_fold(monkeypatch):
    monkeypatch.setattr(brief, "HEAD_BYTES", 4096)
    monkeypatch.setattr(brief, "TAIL_BYTES", 4096)
    rd = make_run("20260101-000000-demo-lora-0002", steps=400, total=1000, ranks=2, pid=os.getpid(),
                  step_s=1.5, pad=40)
    assert rd.events_path.stat().st_size > 16 * 8192  # the middle is never read
    part = head_tail_events(rd.events_path, 4096, 4096)
    full = read_jsonl(rd.events_path)
    assert len(part) < len(full) / 10
    assert part[0] == full[0] and part[-1] == full[-1]
    whole = RunState(warmup_exclude_steps=1)
    whole.apply_all(full)
    want = whole.snapshot()
    b = run_brief(rd)
    assert (b.step, b.total_steps) == (want.step, want.total_steps) == (400, 1000)
    assert b.eta_s == pytest.approx(want.eta_s) == pytest.approx(600 * 1.5)
    assert b.started == want.started_t == T0


def test_head_tail_window_drops_cut_lines_and_junk(tmp_path):
    f = tmp_path / "e.jsonl"
    lines = [json.dumps({"i": i, "pad": "y" * 30}) for i in range(100)]
    lines.insert(50, "not json")
    f.write_text("\n".join(lines) + "\n" + '{"i": "partial')
    got = head_tail_events(f, 500, 500)
    ids = [o["i"] for o in got]
    assert ids[0] == 0 and ids[-1] == 99
    assert ids == sorted(ids) and len(ids) < 40  # only whole lines of both windows
    assert head_tail_events(tmp_path / "missing.jsonl") == []
    small = tmp_path / "s.jsonl"
    small.write_text('{"a": 1}\n[1]\n{"a": 2}\n')
    assert head_tail_events(small) == [{"a": 1}, {"a": 2}]


def test_finished_run_has_no_eta_and_its_final_state():
    rd = make_run("20260101-000000-demo-lora-0003", steps=20, total=20, status="completed", pid=dead_pid())
    b = run_brief(rd)
    assert b.state == "completed" and not b.live
    assert b.step_text() == "20/20"
    assert b.eta_text() == "-"


def test_run_without_events_starts_at_its_creation():
    rd = make_run("20260101-000000-demo-lora-0004", events=False, pid=os.getpid())
    b = run_brief(rd)
    assert b.live and b.step is None and b.total_steps is None
    assert b.step_text() == "-" and b.eta_text() == "-"
    assert b.started == T0 - 3  # command.json's created


def test_live_briefs_lists_only_live_runs_newest_first():
    make_run("20260101-000001-demo-lora-aaaa", status="completed", pid=dead_pid())
    make_run("20260101-000002-demo-lora-bbbb", pid=os.getpid())
    make_run("20260101-000003-demo-lora-cccc", pid=dead_pid())  # lost: no status, nobody at work
    make_run("20260101-000004-demo-lora-dddd", pid=os.getpid(), steps=3)
    got = live_briefs()
    assert [b.run_id for b in got] == ["20260101-000004-demo-lora-dddd", "20260101-000002-demo-lora-bbbb"]
    assert [b.step for b in got] == [3, 12]
    assert live_briefs(list_runs()[:2]) == [got[1]]
    assert run_brief(RunDir(paths.runs_dir() / "20260101-000003-demo-lora-cccc")).state == "lost"


def test_fttui_ls_shows_step_eta_and_start(capsys):
    from fttui.cli.main import main

    make_run("20260101-000001-demo-lora-aaaa", steps=20, total=20, status="completed", pid=dead_pid())
    make_run("20260101-000002-demo-lora-bbbb", steps=12, total=20, pid=os.getpid())
    assert main(["ls"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split()[:6] == ["run", "status", "step", "ETA", "started", "directory"]
    done = next(ln for ln in lines if "aaaa" in ln).split()
    live = next(ln for ln in lines if "bbbb" in ln).split()
    started = time.strftime("%Y-%m-%d %H:%M", time.localtime(T0)).split()
    assert done[1:4] == ["completed", "20/20", "-"] and done[4:6] == started
    assert live[0] == "*" and live[2:5] == ["running", "12/20", "00:06"] and live[5:7] == started
