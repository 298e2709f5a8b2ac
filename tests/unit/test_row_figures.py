"""The summary row's own figures (issue 14): the run's cards in CUDA order, the run's GPU memory
(NVML per process, else reserved + context), the host figure as the ranks' own peaks, build
steps apart, stated vs observed settings, and schema 4 of the store (with its migration)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from fttui.core.base.constants import CUDA_CONTEXT_BYTES
from fttui.core.base.errors import ProfileError
from fttui.core.memory.breakdown import CONSTANTS
from fttui.core.profiles import load_profile
from fttui.core.results import store as store_mod
from fttui.core.results.store import Store
from fttui.core.results.tables import reference_table
from fttui.core.run.files import rundir
from fttui.core.run.launching.preflight import _check_batch
from fttui.core.run.files.events import parse_event
from fttui.core.run.row.row_figures import samples_per_step
from fttui.core.run.files.sample_records import Sample, read_samples
from fttui.core.run.fold.state import RunState
from fttui.core.run.files.statusfile import FinalStatus
from fttui.core.run.row.summary import build_row
from fttui.monitor import HostSampler, HostSnapshot
from fttui.monitor.host import is_build_process

DATA = Path(__file__).resolve().parent.parent / "data"
CONTEXT_MB = CUDA_CONTEXT_BYTES / 2**20


def _frames(name: str) -> list[list[dict]]:
    return json.loads((DATA / name).read_text())["frames"]


def _run_dir(tmp: Path, overrides=(), events=(), samples=()) -> rundir.RunDir:
    prof = load_profile("tiny-lora", list(overrides))
    path = tmp / "run"
    path.mkdir()
    (path / "profile.json").write_text(json.dumps(prof.to_dict()))
    (path / "command.json").write_text(json.dumps({"argv": ["x"], "env": {}, "kind": "run", "group": None}))
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (path / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    return rundir.RunDir(path)


def _start(**kw) -> dict:
    ev = {"event": "start", "t": 1.0, "rank": 0, "world_size": 1, "micro_batch": 8, "grad_accum": 1,
          "max_seq_len": 128, "num_samples": 1024, "total_steps": 3, "config": {}, "env": {}}
    ev.update(kw)
    return ev


def _step(n: int, samples: float, rank: int = 0, rss: float | None = None, reserved: float | None = None) -> dict:
    return {"event": "step", "t": 1.0 + n, "rank": rank, "step": n, "samples": samples, "tokens": samples * 100,
            "tokens_padded": samples * 128, "train_time": float(n), "step_time": 1.0, "loss": 1.0,
            "peak_rss_mb": rss, "torch_peak_reserved_mb": reserved}


def _gpu_sample(frame: list[dict], t: float = 2.0, host: dict | None = None) -> dict:
    return {"t": t, "gpu": {"available": True, "driver": "550", "cuda": "12.4", "gpus": frame}, "host": host or {}}


def _row(rd: rundir.RunDir, cuda_visible: str | None = None, status: str = "completed") -> dict:
    st = RunState()
    for e in _read(rd.events_path):
        st.apply(e)
    for s in read_samples(rd.samples_path):
        st.apply_sample(s)
    return build_row(rd, st.snapshot(), FinalStatus(status, 0, None), t_launch=1.0, t_end=10.0,
                     cuda_visible=cuda_visible)


def _read(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


# ------------------------------------------------------------------ host memory
def test_host_figure_is_the_ranks_own_peaks(tmp_path):
    # the ZeRO-3 first-run shape: two compilers of ~1.5 GB each in the tree, ranks of ~0.4 GB
    host = {"tree_rss_mb": 4949.0, "tree_nprocs": 5, "build_rss_mb": 3100.0, "build_nprocs": 2}
    rd = _run_dir(tmp_path, ["gpus=0", "devices.cpu_processes=2", "batch_size=4"],
                  events=[_start(world_size=2, micro_batch=4), _step(1, 4, 0, rss=400.0), _step(1, 4, 1, rss=450.0),
                          _step(2, 8, 0, rss=462.0), _step(2, 8, 1, rss=455.5)],
                  samples=[{"t": 2.0, "host": host}, {"t": 3.0, "host": {**host, "tree_rss_mb": 1200.0, "build_rss_mb": 0.0}}])
    row = _row(rd)
    assert row["peak_host_rss_mb"] == 917.5  # 462 + 455.5: the last (highest) VmHWM of each rank
    assert row["host_measure"] == "ranks"
    assert row["peak_tree_rss_mb"] == 4949.0
    assert row["peak_build_rss_mb"] == 3100.0
    assert row["peak_rank_rss_mb"] == [462.0, 455.5]
    assert row["gpu"] == "cpu" and row["num_gpus"] == 0 and row["gpu_mem_source"] is None


def test_host_figure_falls_back_to_the_tree_before_the_first_step(tmp_path):
    rd = _run_dir(tmp_path, events=[_start()], samples=[{"t": 2.0, "host": {"tree_rss_mb": 812.25, "build_rss_mb": 0.0}}])
    row = _row(rd, status="failed")
    assert row["peak_host_rss_mb"] == 812.2 or row["peak_host_rss_mb"] == 812.3
    assert row["host_measure"] == "tree"
    assert row["peak_tree_rss_mb"] == row["peak_host_rss_mb"]
    assert row["peak_build_rss_mb"] == 0.0


def test_state_folds_the_build_peak():
    st = RunState()
    for v in (10.0, 2500.0, 0.0):
        st.apply_sample(Sample(t=1.0, host=HostSnapshot(tree_rss_mb=3000.0, build_rss_mb=v)))
    assert st.snapshot().host_peak_build_rss_mb == 2500.0


@pytest.mark.parametrize("name,build", [
    ("cc1plus", True), ("c++", True), ("g++", True), ("gcc", True), ("nvcc", True), ("ninja", True), ("ld", True),
    ("g++-12", True), ("x86_64-linux-gnu-g++", True), ("ptxas", True), ("ld.gold", True),
    ("python", False), ("python3.11", False), ("torchrun", False), ("deepspeed", False), ("pt_main_thread", False),
    ("", False), (None, False), (3, False), ("ldconfig", False),
])
def test_build_process_names(name, build):
    assert is_build_process(name) is build


def test_host_sampler_counts_build_tools_apart(tmp_path):
    # a child named like a compiler (a copy of sleep) under a python root
    sleep = shutil.which("sleep")
    if sleep is None:
        pytest.skip("no sleep binary")
    fake = tmp_path / "cc1plus"
    shutil.copy(sleep, fake)
    code = f"import subprocess, time; p = subprocess.Popen([{str(fake)!r}, '30']); time.sleep(30)"
    root = subprocess.Popen([sys.executable, "-c", code])
    try:
        sampler = HostSampler(root.pid)
        deadline = time.monotonic() + 10
        snap = sampler.sample()
        while (snap.build_nprocs or 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
            snap = sampler.sample()
        assert snap.build_nprocs == 1
        assert 0 < snap.build_rss_mb < snap.tree_rss_mb
        assert snap.tree_nprocs == 2
        assert HostSampler(None).sample().build_rss_mb is None
    finally:
        for p in psutil.Process(root.pid).children(recursive=True):
            p.kill()
        root.kill()
        root.wait()


# ------------------------------------------------------------------ stated vs observed
def test_samples_per_step_takes_the_fullest_step():
    def per_step(events):
        return samples_per_step(map(parse_event, events))

    evs = [_step(1, 16), _step(2, 32), _step(3, 40), _step(3, 40), {"event": "end", "samples": 40}]
    assert per_step(evs) == 16  # the last, short step is not the batch
    assert per_step([_step(1, 16, 0), _step(1, 8, 1)]) == 16
    assert per_step([_step(3, 48)]) == 16  # earlier lines lost: averaged over the gap
    assert per_step([_start()]) is None


def test_mismatch_empty_when_the_run_did_what_was_stated(tmp_path):
    rd = _run_dir(tmp_path, ["gpus=0"], events=[_start(), _step(1, 8), _step(2, 16), _step(3, 20)])
    row = _row(rd)
    assert row["mismatch"] == {}
    assert reference_table([row])[1][0][5] == "8"


def test_mismatch_batch_larger_than_the_data(tmp_path):
    # what issue 14 found: the row said batch 10^12 (now 4e9, under the profile bound 2^32-1), the one step used the whole data set (1,024)
    rd = _run_dir(tmp_path, ["gpus=0", "batch_size=4000000000"],
                  events=[_start(micro_batch=4_000_000_000, total_steps=1), _step(1, 1024)])
    row = _row(rd)
    assert row["mismatch"] == {"batch_size": {"stated": 4_000_000_000, "observed": 1024},
                               "effective_batch": {"stated": 4_000_000_000, "observed": 1024}}
    assert reference_table([row])[1][0][5] == "4000000000 (ran 1024)"


def test_mismatch_with_accumulation_sequence_length_and_world_size(tmp_path):
    rd = _run_dir(tmp_path, ["gpus=0", "batch_size=16", "grad_accum=2", "max_seq_len=256"],
                  events=[_start(micro_batch=16, grad_accum=2, max_seq_len=128, world_size=2),
                          _step(1, 24, 0), _step(1, 24, 1)])
    row = _row(rd)
    assert row["mismatch"] == {"grad_accum": {"stated": 2, "observed": 1.5},
                               "effective_batch": {"stated": 32, "observed": 48},
                               "max_seq_len": {"stated": 256, "observed": 128},
                               "world_size": {"stated": 1, "observed": 2}}
    assert reference_table([row])[1][0][6] == "2 (ran 1.5)"


@pytest.mark.parametrize("micro,accum,per_step,expect", [
    # the data ran out inside one micro batch: the micro batch was short, one micro batch per step
    (16, 4, 10, {"batch_size": {"stated": 16, "observed": 10}, "grad_accum": {"stated": 4, "observed": 1},
                 "effective_batch": {"stated": 64, "observed": 10}}),
    # 1,024 samples, batch 8, accumulation 200: 128 micro batches made the one step
    (8, 200, 1024, {"grad_accum": {"stated": 200, "observed": 128},
                    "effective_batch": {"stated": 1600, "observed": 1024}}),
    (16, 4, 50, {"grad_accum": {"stated": 4, "observed": 3.12}, "effective_batch": {"stated": 64, "observed": 50}}),
    (8, 2, 32, {"batch_size": {"stated": 8, "observed": 16}, "effective_batch": {"stated": 16, "observed": 32}}),
    (8, 2, 16, {}),
])
def test_mismatch_names_what_was_short(tmp_path, micro, accum, per_step, expect):
    rd = _run_dir(tmp_path, ["gpus=0", f"batch_size={micro}", f"grad_accum={accum}"],
                  events=[_start(micro_batch=micro, grad_accum=accum), _step(1, per_step)])
    assert _row(rd)["mismatch"] == expect


def test_no_mismatch_without_steps_or_start(tmp_path):
    rd = _run_dir(tmp_path, ["gpus=0"], events=[])
    assert _row(rd, status="failed")["mismatch"] == {}


# ------------------------------------------------------------------ the run's cards
def test_row_has_the_visible_cards_in_cuda_order(tmp_path):
    frames = _frames("fake_gpus8.json")
    rd = _run_dir(tmp_path, ["gpus=2", "batch_size=8"],
                  events=[_start(world_size=2), _step(1, 8, 0, reserved=30000.0), _step(1, 8, 1, reserved=31000.0)],
                  samples=[_gpu_sample(f, t=2.0 + i) for i, f in enumerate(frames)])
    row = _row(rd, cuda_visible="2,3")
    peak = {i: max(f[i]["mem_used_mb"] for f in frames) for i in range(8)}
    proc = {i: max(f[i]["proc_mem_mb"] for f in frames) for i in range(8)}
    assert row["num_gpus"] == 2 and row["gpu_names"] == [frames[0][2]["name"], frames[0][3]["name"]]
    assert row["peak_gpu_mem_mb"] == [round(peak[2], 1), round(peak[3], 1)]
    assert row["peak_gpu_proc_mb"] == [round(proc[2], 1), round(proc[3], 1)]
    assert row["peak_gpu_mem_mb"] != [round(peak[0], 1), round(peak[1], 1)]
    assert row["gpu_mem_total_mb"] == [81559.0, 81559.0]
    assert row["gpu_mem_source"] == "nvml-process"
    # CUDA order, not NVML order
    assert _row(rd, cuda_visible="3,2")["peak_gpu_mem_mb"] == [round(peak[3], 1), round(peak[2], 1)]
    # nothing set: the first cards NVML shows
    assert _row(rd, cuda_visible="0,1,2,3,4,5,6,7")["peak_gpu_mem_mb"] == [round(peak[0], 1), round(peak[1], 1)]


def _sampled(sampler, n: int, pids=(12345,)) -> list[dict]:
    """Sample lines as the supervisor writes them (the GPU sample records what is visible)."""
    return [{"t": 2.0 + i, "gpu": sampler.sample(pids).to_dict(), "host": {}} for i in range(n)]


def test_row_cards_as_the_supervisor_saw_them(tmp_path, monkeypatch):
    # the supervisor's CUDA_VISIBLE_DEVICES (inherited by the training) is in its GPU samples
    from fttui.monitor import make_gpu_sampler

    monkeypatch.setenv("FTTUI_FAKE_GPUS", str(DATA / "fake_gpus8.json"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    samples = _sampled(make_gpu_sampler(), 6)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")  # whoever builds the row later: the samples say
    frames = _frames("fake_gpus8.json")
    rd = _run_dir(tmp_path, ["gpus=2"], events=[_start(world_size=2)], samples=samples)
    row = _row(rd)
    assert row["peak_gpu_mem_mb"] == [round(max(f[i]["mem_used_mb"] for f in frames), 1) for i in (2, 3)]
    assert row["gpu_names"] == [frames[0][2]["name"]] * 2 and row["num_gpus"] == 2


def test_another_users_memory_is_not_the_runs(tmp_path, monkeypatch):
    from fttui.monitor import make_gpu_sampler

    monkeypatch.setenv("FTTUI_FAKE_GPUS", str(DATA / "fake_gpus_shared.json"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    samples = _sampled(make_gpu_sampler(), 3)
    raw = json.loads((DATA / "fake_gpus_shared.json").read_text())["frames"]
    rd = _run_dir(tmp_path, ["gpus=2"], events=[_start(world_size=2)], samples=samples)
    row = _row(rd)
    run_own = [max(sum(p["used_mb"] for p in f[i]["processes"] if p.get("run")) for f in raw) for i in (2, 3)]
    assert row["peak_gpu_proc_mb"] == run_own and row["gpu_mem_source"] == "nvml-process"
    assert all(d > r for d, r in zip(row["peak_gpu_mem_mb"], row["peak_gpu_proc_mb"]))  # alice is in "used"
    assert row["gpu_mem_total_mb"] == [40960.0, 40960.0]


def test_gpu_run_figure_falls_back_to_reserved_plus_context(tmp_path):
    assert CONSTANTS["cuda_context_bytes"] == CUDA_CONTEXT_BYTES  # one number, two readers
    frame = [{**g, "proc_mem_mb": v} for g, v in zip(_frames("fake_gpus.json")[0], (0.0, None))]
    rd = _run_dir(tmp_path, ["gpus=2"],
                  events=[_start(world_size=2), _step(1, 8, 0, reserved=4000.0), _step(1, 8, 1, reserved=4200.5)],
                  samples=[_gpu_sample(frame)])
    row = _row(rd, cuda_visible=None)
    assert row["peak_gpu_proc_mb"] == [round(4000.0 + CONTEXT_MB, 1), round(4200.5 + CONTEXT_MB, 1)]
    assert row["gpu_mem_source"] == "torch-reserved+context"
    assert row["peak_gpu_mem_mb"] == [5798.3, 5970.5]  # device used stays what NVML said


def test_gpu_run_figure_is_never_a_silent_zero(tmp_path):
    frame = [{**g, "proc_mem_mb": 0.0} for g in _frames("fake_gpus.json")[0]]
    rd = _run_dir(tmp_path, ["gpus=1"], events=[_start()], samples=[_gpu_sample(frame)])
    row = _row(rd, cuda_visible="1")
    assert row["peak_gpu_proc_mb"] == [None] and row["gpu_mem_source"] is None
    assert row["peak_gpu_mem_mb"] == [5970.5] and row["gpu_mem_total_mb"] == [24564.0]


def test_cpu_run_on_a_gpu_machine_has_no_cards(tmp_path):
    rd = _run_dir(tmp_path, ["gpus=0"], events=[_start(), _step(1, 8, rss=300.0)],
                  samples=[_gpu_sample(_frames("fake_gpus.json")[0])])
    row = _row(rd)
    assert row["gpu"] == "cpu" and row["num_gpus"] == 0 and row["gpu_names"] == []
    assert row["peak_gpu_mem_mb"] == [] and row["gpu_mem_total_mb"] == [] and row["gpu_mem_source"] is None


# ------------------------------------------------------------------ the store
def test_schema_4_row_round_trip(tmp_path, fttui_home):
    rd = _run_dir(tmp_path, ["gpus=0", "batch_size=4000000000"],
                  events=[_start(micro_batch=4_000_000_000), _step(1, 1024, rss=333.0)],
                  samples=[{"t": 2.0, "host": {"tree_rss_mb": 900.0, "build_rss_mb": 0.0}}])
    row = _row(rd)
    with Store(tmp_path / "s.sqlite") as s:
        s.put(row)
        got = s.get(row["run_id"])
    for key in ("mismatch", "peak_tree_rss_mb", "peak_build_rss_mb", "host_measure", "gpu_mem_total_mb",
                "gpu_mem_source", "peak_host_rss_mb"):
        assert got[key] == row[key], key
    assert got["mismatch"]["batch_size"]["observed"] == 1024 and got["host_measure"] == "ranks"
    assert {"mismatch", "peak_tree_rss_mb", "host_measure"} <= set(store_mod._ADDED[4])


def test_schema_3_store_migrates_and_keeps_every_row(tmp_path):
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    # the schema-3 DDL: the first three migrations, exactly as fttui wrote them
    for ddl in store_mod.MIGRATIONS[:3]:
        for stmt in ddl.split(";"):
            if stmt.strip():
                conn.execute(stmt)
    conn.execute("PRAGMA user_version = 3")
    cols3 = [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    assert "host_measure" not in cols3 and "interconnect" in cols3
    old = [
        {"run_id": "r1", "kind": "run", "started_at": "2026-01-01T00:00:00", "status": "completed",
         "peak_host_rss_mb": 4949.0, "peak_gpu_mem_mb": "[18052.2]", "batch_size": 8, "interconnect": "",
         "samples_per_s": 12.5},
        {"run_id": "r2", "kind": "sweep", "group_id": "s1", "started_at": "2026-01-02T00:00:00",
         "status": "oom", "peak_host_rss_mb": None, "fresh": None},
        {"run_id": "p1", "kind": "probe", "group_id": "p", "started_at": "2026-01-03T00:00:00",
         "status": "fit", "peak_host_rss_mb": 461.9, "fresh": 1, "param": "batch_size"},
    ]
    for r in old:
        conn.execute(f"INSERT INTO runs ({', '.join(r)}) VALUES ({', '.join('?' for _ in r)})", list(r.values()))
    before = {r[0]: r for r in conn.execute("SELECT * FROM runs")}
    names3 = [d[0] for d in conn.execute("SELECT * FROM runs").description]
    conn.close()

    with Store(path) as s:
        assert s.conn.execute("PRAGMA user_version").fetchone()[0] == store_mod.SCHEMA_VERSION
        rows = {r["run_id"]: r for r in s.rows()}
    assert set(rows) == {"r1", "r2", "p1"}
    for rid, raw in before.items():
        for name, value in zip(names3, raw):
            got = rows[rid][name]
            if name == "peak_gpu_mem_mb" and value is not None:
                got = json.dumps(got)
            assert got == value, (rid, name)
    assert rows["r1"]["host_measure"] == store_mod.HOST_MEASURE_BEFORE_4 == "tree (before schema 4)"
    assert rows["r1"]["peak_tree_rss_mb"] == 4949.0  # what the old figure measured, named
    assert rows["r2"]["host_measure"] == "tree (before schema 4)"
    assert rows["p1"]["host_measure"] == "ranks"  # a probe trial measured its own process
    for r in rows.values():
        assert r["mismatch"] is None and r["gpu_mem_source"] is None and r["peak_build_rss_mb"] is None
    with Store(path) as s:  # opening again changes nothing
        assert len(s.rows()) == 3 and s.get("r1")["host_measure"] == "tree (before schema 4)"


# ------------------------------------------------------------------ preflight
def _resolved(**over):
    return load_profile("tiny-lora", [f"{k}={v}" for k, v in over.items()])


@pytest.mark.parametrize("over,ok", [
    ({"batch_size": 1024}, True), ({"batch_size": 1025}, False),
    ({"gpus": 0, "devices.cpu_processes": 4, "batch_size": 256}, True),
    ({"gpus": 0, "devices.cpu_processes": 4, "batch_size": 257}, False),
    ({"num_samples": 4, "batch_size": 5}, False),
])
def test_batch_against_the_data(over, ok):
    r = _resolved(**over)
    if ok:
        _check_batch(r, "p.toml", None)
        return
    with pytest.raises(ProfileError) as e:
        _check_batch(r, "p.toml", None)
    msg = str(e.value)
    assert msg.startswith("--set: train.batch_size: ") and "\n" not in msg
    assert "samples per step but the data has" in msg and "data.num_samples" in msg


def test_batch_against_a_data_file():
    r = _resolved(batch_size=30).with_settings({"data.source": "x.jsonl", "data.num_samples": 0})
    with pytest.raises(ProfileError, match="the data has 20 samples .use batch_size at most 20, or a larger data file"):
        _check_batch(r, "p.toml", 20)
    r = r.with_settings({"data.num_samples": 10})
    with pytest.raises(ProfileError, match="at most 10, or more data.num_samples, up to the file's 20"):
        _check_batch(r, "p.toml", 20)
    _check_batch(_resolved(batch_size=20), "p.toml", 20)


# ------------------------------------------------------------------ sharding (schema 5)
def test_row_records_the_sharding_read_back_from_the_engine(tmp_path):
    ran = {"asked": "zero2", "ran": "zero2-offload", "kind": "deepspeed", "zero_stage": 2,
           "offload_optimizer": "cpu", "offload_param": "none"}
    rd = _run_dir(tmp_path, ["sharding=zero2", "devices.launcher=torchrun"],
                  events=[_start(rank=1, sharding={"asked": "zero2", "ran": "zero3"}), _start(sharding=ran),
                          _step(1, 8)])
    row = _row(rd)
    assert (row["method"], row["sharding"]) == ("lora", "zero2-offload")  # rank 0's read-back, not the profile
    assert row["mismatch"]["sharding"] == {"stated": "zero2", "observed": "zero2-offload"}
    assert row["env"]["sharding"]["zero_stage"] == 2


def test_row_of_a_run_that_ended_before_its_start_event_keeps_the_sharding_asked(tmp_path):
    rd = _run_dir(tmp_path, ["sharding=zero3", "devices.launcher=torchrun"])
    row = _row(rd, status="failed")
    assert row["sharding"] == "zero3" and "sharding" not in row["mismatch"] and "sharding" not in row["env"]


def test_row_of_a_profile_json_written_before_the_sharding_axis(tmp_path):
    rd = _run_dir(tmp_path)
    prof = json.loads((rd.path / "profile.json").read_text())
    prof["method"] = "full-zero3-offload"
    prof.pop("sharding", None)
    (rd.path / "profile.json").write_text(json.dumps(prof))
    row = _row(rd, status="failed")
    assert (row["method"], row["sharding"]) == ("full", "zero3-offload")
