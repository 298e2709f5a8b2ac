"""Hostile input and broken stores (issue 28, items 5, 7, 10): one line each, nothing lost."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys

import pytest

from fttui.core.base import paths
from fttui.core.base.errors import FttuiError, StoreError
from fttui.core.results import store as store_mod
from fttui.core.results.store import Store
from tests.conftest import ROOT, fttui_env, run_fttui


def test_reads_never_wait_for_a_writer(fttui_home, monkeypatch):
    """A writer holds the store's write lock: opening and reading it still works at once (the
    busy timeout set to 0, so any wait for the lock would fail)."""
    with Store() as s:
        s.put({"run_id": "a", "status": "completed"})
    writer = sqlite3.connect(paths.store_path(), isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE runs SET error = 'x'")
    try:
        monkeypatch.setattr(store_mod, "BUSY_TIMEOUT_S", 0.0)
        with Store() as s:
            assert [r["run_id"] for r in s.rows()] == ["a"]
    finally:
        writer.execute("ROLLBACK")
        writer.close()


@pytest.mark.parametrize("how, says", [
    ("corrupt", "not a readable results store"),
    ("truncated", "results.sqlite: "),
    ("folder", "is a folder, not a results store"),
])
def test_a_broken_store_is_one_line(fttui_home, how, says):
    path = paths.store_path()
    if how == "folder":
        path.mkdir(parents=True)
    else:
        with Store() as s:
            s.put({"run_id": "a", "status": "completed"})
        for extra in ("-wal", "-shm"):
            path.with_name(path.name + extra).unlink(missing_ok=True)
        path.write_bytes(b"this is not sqlite" * 100 if how == "corrupt" else path.read_bytes()[:1000])
    proc = run_fttui("results", env=fttui_env())
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and says in proc.stderr, proc.stderr
    if how in ("corrupt", "folder"):  # the exact command that moves it aside (issue 40 item 4)
        assert f"mv {path} {path}.damaged" in proc.stderr, proc.stderr


def test_runs_as_a_file_is_one_line(fttui_home):
    fttui_home.mkdir(parents=True, exist_ok=True)
    (fttui_home / "runs").write_text("not a folder")
    with pytest.raises(FttuiError, match="is a file where fttui keeps a folder"):
        paths.ensure_dir(fttui_home / "runs")


def test_a_finished_row_is_never_overwritten_from_a_partial_run_dir(fttui_home):
    """A finished run's status.json deleted: `fttui ls` puts it back from the stored row instead
    of storing a new row with an unknown status."""
    from fttui.core.run.supervising.recover import recover

    run = fttui_home / "runs" / "20260101-000000-x-abcd"
    run.mkdir(parents=True)
    (run / "profile.json").write_text("{}")
    (run / "supervisor.json").write_text(json.dumps({"pid": 999999999, "create_time": 1.0}))
    with Store() as s:
        s.put({"run_id": run.name, "status": "completed", "steps": 40, "samples_per_s": 12.5})
    assert recover(__import__("fttui.core.run.files.rundir", fromlist=["RunDir"]).RunDir(run)) is None
    with Store() as s:
        row = s.get(run.name)
    assert row["status"] == "completed" and row["steps"] == 40 and row["samples_per_s"] == 12.5
    assert json.loads((run / "status.json").read_text())["status"] == "completed"


def test_export_refuses_special_files_and_writes_0600_through_a_new_file(fttui_home, tmp_path):
    with Store() as s:
        s.put({"run_id": "a", "status": "completed"})
    target = tmp_path / "rows.jsonl"
    planted = tmp_path / "victim"
    planted.write_text("keep me")
    os.symlink(planted, tmp_path / ".rows.jsonl.tmp")  # the old predictable temporary name
    run_fttui("results", "export", "--out", str(target), check=True)
    assert planted.read_text() == "keep me"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600 and target.read_text().count("\n") == 2
    for bad in (tmp_path, "/dev/null"):
        proc = run_fttui("results", "export", "--out", str(bad))
        assert proc.returncode == 2 and "not a regular file" in proc.stderr, proc.stderr
    link = tmp_path / "link.jsonl"
    os.symlink(planted, link)
    assert run_fttui("results", "export", "--out", str(link)).returncode == 2
    assert planted.read_text() == "keep me" and not list(tmp_path.glob(".rows.jsonl.*.tmp"))


def test_relative_fttui_home_is_resolved_once_at_start(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FTTUI_HOME", "rel-home")
    from fttui.core.base.paths import resolve_home

    resolve_home()
    assert os.environ["FTTUI_HOME"] == str(tmp_path / "rel-home")
    monkeypatch.chdir(ROOT)
    assert paths.home() == tmp_path / "rel-home"


# item 9: resource bombs, refused in one line ----------------------------------------------------

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi")
) + "model_name_or_path: x\nstage: sft\nfinetuning_type: lora\n"


@pytest.mark.parametrize("args, says", [
    (["profiles", "--from", "{bomb}"], "alias bomb"),
    (["profiles", "--from", "{inf}"], "inf is not a finite number"),
    (["run", "--profile", "/dev/zero", "--headless"], "not a regular file"),
    (["results", "import", "/dev/zero"], "not a regular file"),
    (["results", "--limit", str(10**30)], "out of range"),
])
def test_bombs_are_refused_in_one_line(fttui_home, tmp_path, args, says):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    inf = tmp_path / "inf.yaml"
    inf.write_text("model_name_or_path: x\nstage: sft\nfinetuning_type: lora\nlearning_rate: .inf\n")
    args = [a.format(bomb=bomb, inf=inf) for a in args]
    proc = run_fttui(*args, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    if args[0] == "results" and "--limit" in args:  # argparse's own: usage, then the one error line
        lines = [ln for ln in lines if ": error: " in ln]
    assert len(lines) == 1, proc.stderr


# item 8: imports checked against the declared figures; delete ---------------------------------

def _export_file(tmp_path, rows, name="rows.jsonl"):
    from fttui.core.results.store import SCHEMA_VERSION

    path = tmp_path / name
    head = {"fttui_export": 1, "schema": SCHEMA_VERSION, "machine": "m", "exported_at": "2026", "rows": len(rows)}
    path.write_text("\n".join(json.dumps(x) for x in [head, *rows]) + "\n")
    return path


@pytest.mark.parametrize("field, value, says", [
    ("samples_per_s", "Infinity", "not a finite number"),
    ("samples_per_s", "NaN", "not a finite number"),
    ("max_seq_len", '"two thousand"', "expected an integer"),
    ("steps", str(10**30), "out of range"),
    ("error", '{"a": 1}', "expected text"),
])
def test_import_refuses_a_bad_value_naming_row_and_field(fttui_home, tmp_path, field, value, says):
    path = tmp_path / "bad.jsonl"
    good = _export_file(tmp_path, [{"run_id": "ok", "status": "completed"}])
    path.write_text(good.read_text() + f'{{"run_id": "bad1", "{field}": {value}}}\n')
    proc = run_fttui("results", "import", str(path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == proc.stderr.strip().splitlines()[0]
    assert f"row bad1: {field}: " in proc.stderr and says in proc.stderr, proc.stderr
    with Store() as s:
        assert s.rows() == []  # nothing imported
    assert run_fttui("results", "--json", check=True).stdout.strip() == "[]"


def test_same_file_twice_is_a_no_op_and_a_row_can_be_deleted(fttui_home, tmp_path):
    path = _export_file(tmp_path, [{"run_id": "r1", "status": "completed", "gradient_checkpointing": True,
                                    "samples_per_s": 3, "steps": 4.0}])
    first = run_fttui("results", "import", str(path), check=True)
    second = run_fttui("results", "import", str(path))
    assert "imported 1 row(s)" in first.stdout
    assert second.returncode == 0 and "imported 0 row(s); 1 already there; 0 conflict(s)" in second.stdout
    with Store() as s:
        row = s.get("r1")
    assert row["gradient_checkpointing"] == 1 and row["samples_per_s"] == 3.0 and row["steps"] == 4
    assert "deleted the row of r1" in run_fttui("results", "delete", "r1", check=True).stdout
    proc = run_fttui("results", "delete", "r1")
    assert proc.returncode == 2 and "no stored row has run id 'r1'" in proc.stderr


def test_a_received_row_with_a_mistyped_value_is_stored_not_lost(fttui_home):
    with Store() as s:
        s.put({"run_id": "x", "status": "failed", "error": {"message": "boom"}, "samples_per_s": float("inf"),
               "steps": "12"})
        row = s.get("x")
    assert row["status"] == "failed" and json.loads(row["error"]) == {"message": "boom"}
    assert row["samples_per_s"] is None and row["steps"] is None


# issue 36: one giant sample, a named pipe as the data file ---------------------------------------

LONG = "lorem ipsum " * 350_000  # 4.2 MB of text on one line


def _giant_file(path, small=1):
    recs = [{"instruction": "a", "output": "b"}] * small + [{"instruction": "Summarise.", "output": LONG}]
    text = "".join(json.dumps(r) + "\n" for r in recs) if path.suffix == ".jsonl" else json.dumps(recs, indent=1)
    path.write_text(text)
    return text[:text.rindex("{", 0, text.index("Summarise"))].count("\n") + 1  # the giant sample's line


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_giant_sample_is_refused_having_read_only_the_bound(tmp_path, suffix):
    import tracemalloc

    from fttui.core.base.errors import DataError
    from fttui.core.data.records import load_records

    path = tmp_path / f"d{suffix}"
    line = _giant_file(path)
    tracemalloc.start()
    try:
        with pytest.raises(DataError) as e:
            load_records(path, "auto", max_sample_bytes=64 << 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(e.value)
    assert msg.startswith(f"{path}:{line}: one sample is larger than 64 KiB") and "\n" not in msg, msg
    assert "data.max_seq_len" in msg and "cut it to its head" in msg
    assert peak < 3 << 20, peak  # the bound and a chunk of the file (1 MiB), never the 4.2 MB sample
    assert [r["line"] for r in load_records(path, "auto", max_sample_bytes=8 << 20)][-1] == line


def test_a_json_list_read_a_few_bytes_at_a_time_is_the_same(tmp_path, monkeypatch):
    from fttui.core.base.errors import DataError
    from fttui.core.data import records

    recs = [{"instruction": 'q"uo\\te [x] {y}, ', "input": "é😀\n", "output": "]},"},
            {"instruction": "\\", "output": "[{\\\"", "input": "\\\\"}]
    path = tmp_path / "d.json"
    path.write_text("\ufeff" + json.dumps(recs, indent=2, ensure_ascii=False) + "\n")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(recs, indent=1).replace('"output"', '"output" 1', 1))
    whole = records.load_records(path)
    assert [r["line"] for r in whole] == [2, 7]
    said = str(pytest.raises(DataError, records.load_records, bad).value)
    for chunk in (1, 2, 3, 7):
        monkeypatch.setattr(records, "CHUNK", chunk)
        assert records.load_records(path) == whole
        assert str(pytest.raises(DataError, records.load_records, bad).value) == said
    assert said.startswith(f"{bad}:5: malformed JSON")


def test_a_long_sample_is_tokenised_by_its_head_only():
    import tracemalloc

    from fttui.worker.data import tokenize_record
    from fttui.worker.tokenizer import ByteTokenizer

    tok = ByteTokenizer()
    for rec in ({"format": "instruction", "instruction": "Summarise.", "input": "", "output": LONG},
                {"format": "instruction", "instruction": LONG, "input": "", "output": "ok"},
                {"format": "chat", "messages": [{"role": "user", "content": LONG},
                                                {"role": "assistant", "content": "ok"}]},
                {"format": "chat", "messages": [{"role": "user", "content": "q"},
                                                {"role": "assistant", "content": LONG}]}):
        whole = tokenize_record(rec, tok, 1 << 31)  # what `fttui data` measures
        tracemalloc.start()
        try:
            head = tokenize_record(rec, tok, 128)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert head == {key: ids[:128] for key, ids in whole.items()}
        assert peak < len(LONG) * 2, peak  # a list of 4 million ids would be 34 MB


def test_fttui_refuses_a_giant_sample_or_a_named_pipe_in_one_line(fttui_home, tmp_path):
    giant = tmp_path / "giant.jsonl"
    giant.write_text(json.dumps({"instruction": "Summarise.", "output": "x" * (5 << 20)}) + "\n")
    pipe = tmp_path / "pipe.jsonl"
    os.mkfifo(pipe)
    for source, says in ((giant, f"{giant}:1: one sample is larger than 4 MiB"),
                         (pipe, f"{pipe}: not a regular file (a named pipe")):
        for args in (["run", "--headless", "--set", "train.batch_size=1"], ["data"]):
            proc = run_fttui(args[0], "--profile", "tiny-lora", "--set", f"data.source={source}", *args[1:],
                             timeout=60)
            assert proc.returncode == 2, proc.stdout + proc.stderr
            assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (fttui_home / "runs").exists() or not any((fttui_home / "runs").iterdir())


@pytest.mark.parametrize("name, value", [("FTTUI_STALL_TIMEOUT", "abc"), ("FTTUI_STALL_FLOOR", "nan"),
                                         ("FTTUI_KILL_GRACE", "-1"), ("FTTUI_SAMPLE_INTERVAL", "inf"),
                                         ("FTTUI_STALL_TIMEOUT", "1e400")])
def test_a_bad_number_in_the_environment_is_one_line_before_anything_is_written(fttui_home, name, value):
    """Issue 36: FTTUI_STALL_TIMEOUT=abc crashed the supervisor 30 s into the run (the run lost)."""
    out = run_fttui("run", "--profile", "tiny-lora", "--headless", env=fttui_env(**{name: value}))
    assert out.returncode == 2, out.stdout + out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and name in out.stderr and "give a number" in out.stderr
    assert not (fttui_home / "runs").exists() or not any((fttui_home / "runs").iterdir())
    from fttui.core.base.envnumbers import env_float

    assert env_float(name, 7.0, {}) == 7.0 and env_float(name, 7.0, {name: " "}) == 7.0
    assert env_float("FTTUI_KILL_GRACE", 7.0, {"FTTUI_KILL_GRACE": "2.5"}) == 2.5


DEEP = 5000


def _deep_inputs(tmp_path):
    """Each input fttui parses, nested far beyond Python's recursion limit (issue 36)."""
    prof = tmp_path / "profiles"
    prof.mkdir()
    (prof / "deep.toml").write_text('extends = "tiny-lora"\n[train]\nbatch_size = ' + "[" * DEEP + "]" * DEEP + "\n")
    for i in range(40):  # a 40-long extends chain
        (prof / f"c{i}.toml").write_text(f'extends = "c{i + 1}"\n' if i < 39 else 'extends = "tiny-lora"\n')
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama", "x": ' + "[" * DEEP + "]" * DEEP + "}")
    (prof / "cfg.toml").write_text(f'extends = "tiny-lora"\n[model]\nname_or_path = "{model}"\ninit = "random"\n')
    (tmp_path / "ds.json").write_text("[" * DEEP + "]" * DEEP)
    (tmp_path / "ds-list.json").write_text("[1]")
    for name, ds in (("lf.yaml", "ds.json"), ("lf-list.yaml", "ds-list.json")):
        (tmp_path / name).write_text(f"model_name_or_path: org/m\nstage: sft\nfinetuning_type: full\ndeepspeed: {ds}\n")
    (tmp_path / "deep.yaml").write_text("model_name_or_path: " + "[" * DEEP + "]" * DEEP + "\n")
    from fttui.core.results.store import SCHEMA_VERSION

    head = json.dumps({"fttui_export": 1, "schema": SCHEMA_VERSION, "machine": "m", "exported_at": "2026", "rows": 1})
    (tmp_path / "deep.jsonl").write_text(head + '\n{"run_id": "x", "env": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    (tmp_path / "env.jsonl").write_text(head + '\n{"run_id": "x", "env": "a string"}\n')
    return tmp_path


@pytest.mark.parametrize("args, says", [
    (["run", "--profile", "deep", "--headless"], "nested too deeply"),
    (["run", "--profile", "tiny-lora", "--set", "train.batch_size=" + "[" * DEEP + "]" * DEEP, "--headless"], "batch_size"),
    (["run", "--profile", "c0", "--headless"], "a chain of more than"),
    (["estimate", "--profile", "cfg"], "nested too deeply"),
    (["profiles", "--from", "lf.yaml"], "nested too deeply"),
    (["profiles", "--from", "lf-list.yaml"], "not a JSON object"),
    (["profiles", "--from", "deep.yaml"], "nested too deeply"),
    (["results", "import", "deep.jsonl"], "nested too deeply"),
    (["results", "import", "env.jsonl"], "env: expected a JSON object"),
])
def test_deeply_nested_input_is_one_line(fttui_home, tmp_path, args, says):
    work = _deep_inputs(tmp_path)
    out = run_fttui(*args, cwd=work, timeout=120)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    err = out.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and says in err, err[-2000:]
    assert not (fttui_home / "runs").exists() or not any((fttui_home / "runs").iterdir())
    assert run_fttui("results", "--json", cwd=work, check=True).stdout.strip() == "[]"


def test_two_imports_of_one_file_at_once_both_end_cleanly(fttui_home, tmp_path):
    """Issue 36: the second of two simultaneous imports died on UNIQUE(run_id); it now reads the
    store again and finds the rows there."""
    rows = [{"run_id": f"r{i}", "status": "completed", "samples_per_s": float(i)} for i in range(4000)]
    path = _export_file(tmp_path, rows)
    procs = [subprocess.Popen([sys.executable, "-m", "fttui", "results", "import", str(path)], cwd=ROOT,
                              env=fttui_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "Traceback" not in err, out + err
    assert sum(int(out.split("imported ")[1].split()[0]) for out, _ in outs) == 4000
    with Store() as s:
        assert len(s.rows(kind=None)) == 4000


@pytest.mark.parametrize("args, says", [
    (["estimate", "--profile", "tiny-lora", "--set", "model.arch_config.hidden_size=nan"], "whole non-negative"),
    (["estimate", "--profile", "tiny-lora", "--set", "model.arch_config.hidden_size=1e400"], "whole non-negative"),
    (["estimate", "--profile", "tiny-lora", "--set", "model.arch_config.hidden_size=1e300"], "beyond any model"),
    (["estimate", "--profile", "tiny-lora", "--set", "model.arch_config.num_attention_heads=4.5"], "whole"),
    (["estimate", "--profile", "tiny-lora", "--set", "model.arch_config.num_key_value_heads=3"], "must divide"),
    (["run", "--profile", "tiny-lora", "--headless", "--set", "data.max_seq_len=99999999999999999999"], "at most"),
    (["run", "--profile", "tiny-lora", "--headless", "--set", "limits.host_memory=99999999999999999999TiB"],
     "more than 1 EiB"),
    (["run", "--profile", "tiny-lora", "--headless", "--set", "data.source={sur}"], "lone surrogate"),
])
def test_values_the_worker_could_not_take_are_refused_before_the_launch(fttui_home, tmp_path, args, says):
    """Issue 36: each of these passed the checks, launched a run, and failed in the worker (a
    failed row, exit 1) or ended in a traceback."""
    sur = tmp_path / "sur.jsonl"
    sur.write_text('{"instruction": "hi \\ud800", "output": "x"}\n')
    out = run_fttui(*[a.format(sur=sur) for a in args], timeout=120)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    err = out.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and says in err, err[-2000:]
    assert not (fttui_home / "runs").exists() or not any((fttui_home / "runs").iterdir())


@pytest.mark.parametrize("home", ["   ", "/proc/self", "{long}"])
@pytest.mark.parametrize("args", [["results"], ["run", "--profile", "tiny-lora", "--headless"], ["ls"]])
def test_an_unusable_fttui_home_is_one_line(tmp_path, home, args):
    """Issue 36: a home fttui cannot write (here /proc, a 300-character name, spaces only, which
    used to read as unset and write to the default folder) is one line, never a traceback."""
    home = home.format(long=str(tmp_path / ("x" * 300)))
    out = run_fttui(*args, env=fttui_env(FTTUI_HOME=home), timeout=120)
    err = out.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) <= 1, err
    assert out.returncode in (1, 2) or (args == ["ls"] and "no runs yet" in out.stdout), out.stdout + err


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_a_signal_to_fttui_data_leaves_no_scratch_folder(fttui_home, tmp_path, sig):
    """Issue 36: SIGTERM or SIGHUP while `fttui data` tokenised left `cache/data/tmp*` behind."""
    import signal
    import time

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"instruction": f"q{i} " * 40, "output": "a " * 40}) + "\n"
                            for i in range(20000)))
    proc = subprocess.Popen([sys.executable, "-m", "fttui", "data", "--profile", "tiny-lora", "--set",
                             f"data.source={data}"], cwd=ROOT, env=fttui_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    cache = fttui_home / "cache"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(cache.rglob("tmp*")) and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the measurement ended before the signal: make the data larger"
    proc.send_signal(getattr(signal, sig))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert not list(cache.rglob("tmp*")), list(cache.rglob("*"))
