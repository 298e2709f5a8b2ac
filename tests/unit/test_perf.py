"""Per-card figures (issue 14): FLOPs per token, the peak table, MFU per card (live and in the row),
headroom and allocator retries (the near-OOM warning), the views' lines, and the schema-4 columns.

Figures are checked against arithmetic written out here, not against the module's own helpers,
and the row's MFU is computed a second way from the row's tokens and duration."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

from fttui.core.models.flops import ModelShape, flops_per_token, matmul_params
from fttui.core.models.peaks import PEAKS, find_peak, peak_tflops
from fttui.core.profiles import load_profile
from fttui.core.results import store as store_mod
from fttui.core.results.store import Store
from fttui.core.run.fold import perf
from fttui.core.run.files import rundir
from fttui.core.run.files.events import StartEvent
from fttui.core.run.files.sample_records import Sample, read_samples
from fttui.core.run.fold.state import RunState
from fttui.core.run.files.statusfile import FinalStatus
from fttui.core.run.fold.status import status_line
from fttui.core.run.row.summary import build_row
from tests.helpers import sample_of

DATA = Path(__file__).resolve().parent.parent / "data"
RTX4090_BF16 = 165.2e12  # NVIDIA's dense BF16 (FP32 accumulate) peak, written out once here

# LoRA (r 8 on q and v) on TinyLlama-1.1B's shape: 22 layers, hidden 2048, 32 heads of 64,
# 4 K/V heads, vocab 32,000, untied
V, H, L, A = 32_000, 2048, 22, 2048
SHAPE = {"vocab": V, "hidden": H, "layers": L, "attn_dim": A, "tied": False}
BASE = 1_100_048_384  # the frozen model's parameters (its embedding V x H included)
ADAPTER = 22 * (8 * (2048 + 2048) + 8 * (2048 + 256))  # q: 2048 -> 2048, v: 2048 -> 256
TOTAL = BASE + ADAPTER


def _frames(name: str) -> list[list[dict]]:
    return json.loads((DATA / name).read_text())["frames"]


def _profile(*over: str) -> dict:
    return load_profile("tiny-lora", ["precision=bf16", *over]).to_dict()  # profile.json, the start event's config


def _run_dir(tmp: Path, prof: dict, events=(), samples=()) -> rundir.RunDir:
    path = tmp / "run"
    path.mkdir()
    (path / "profile.json").write_text(json.dumps(prof))
    (path / "command.json").write_text(json.dumps({"argv": ["x"], "env": {}, "kind": "run", "group": None}))
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (path / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    return rundir.RunDir(path)


def _start(prof: dict, world: int = 2, rank: int = 0, **kw) -> dict:
    ev = {"event": "start", "t": 1.0, "rank": rank, "world_size": world, "micro_batch": 8, "grad_accum": 1,
          "max_seq_len": 128, "num_samples": 1024, "total_steps": 10, "config": prof, "env": {},
          "params_total": TOTAL, "params_trainable": ADAPTER, "model_shape": dict(SHAPE)}
    ev.update(kw)
    return ev


def _step(n: int, rank: int, tokens_per_step: float, *, retries: float | None = 0, ooms: float | None = 0,
          first: float = 2.0, step: float = 0.5) -> dict:
    """Step ``n`` of ``rank``: 8 samples per step, ``tokens_per_step`` tokens; the first step takes
    ``first`` seconds (warm-up), the others ``step``."""
    tt = first + (n - 1) * step
    return {"event": "step", "t": 1.0 + tt, "rank": rank, "step": n, "samples": 8 * n,
            "tokens": tokens_per_step * n, "tokens_padded": 8 * 128 * n, "train_time": tt,
            "step_time": first if n == 1 else step, "loss": 1.0, "torch_alloc_retries": retries, "torch_ooms": ooms,
            "torch_peak_reserved_mb": 9000.0, "peak_rss_mb": 500.0}


def _gpu(frame: list[dict], t: float = 2.0, **extra) -> dict:
    return {"t": t, "gpu": {"available": True, "driver": "550", "cuda": "12.4", "gpus": frame, **extra}, "host": {}}


def _fold(events=(), samples=()) -> RunState:
    st = RunState()
    for e in events:
        st.apply(e)
    for s in samples:
        st.apply_sample(s if isinstance(s, Sample) else sample_of(s))
    return st


def _row(rd: rundir.RunDir, status: str = "completed", **kw) -> dict:
    st = _fold([json.loads(x) for x in rd.events_path.read_text().splitlines()],
               list(read_samples(rd.samples_path)))
    return build_row(rd, st.snapshot(), FinalStatus(status, 0, None), t_launch=1.0, t_end=10.0, **kw)


def _lora_fpt(seq: float) -> float:
    """4 N_base + 6 N_adapter + 12 L a s, written out: N_base leaves out the input embedding."""
    n_base = BASE - V * H
    return 4 * n_base + 6 * ADAPTER + 12 * L * A * seq


# ------------------------------------------------------------------ FLOPs per token
def test_flops_per_token_full_and_adapter_formulas():
    shape = ModelShape(TOTAL, ADAPTER, **SHAPE)
    assert flops_per_token(shape, "lora", 100).total == _lora_fpt(100)
    full = ModelShape(BASE, BASE, **SHAPE)
    n = BASE - V * H
    assert flops_per_token(full, "full", 100).total == 6 * n + 12 * L * A * 100
    assert flops_per_token(full, "full-zero3-offload", 100).total == 6 * n + 12 * L * A * 100
    # QLoRA and int8 count as adapters: the base is frozen whatever its storage
    assert flops_per_token(shape, "qlora", 100).total == flops_per_token(shape, "lora-int8", 100).total == _lora_fpt(100)
    # gradient checkpointing: the decoder layers' forward once more (not the output layer)
    gc = flops_per_token(full, "full", 100, gradient_checkpointing=True)
    assert gc.recompute == 2 * (n - V * H) + 4 * L * A * 100
    assert gc.total == gc.forward + gc.backward + gc.recompute
    # a tied output layer is the embedding: counted once in the total, run as the output multiply
    tied = ModelShape(BASE - V * H, BASE - V * H, **{**SHAPE, "tied": True})
    assert matmul_params(tied, "full").n == n
    # lora-emb: trainable copies of the embedding (a lookup) and of the output layer (a multiply)
    emb = ModelShape(TOTAL + 2 * V * H, ADAPTER + 2 * V * H, **SHAPE)
    p = matmul_params(emb, "lora-emb")
    assert p.n == n + ADAPTER and p.trained == ADAPTER + V * H


def test_model_shape_from_the_start_event_or_the_profiles_architecture():
    prof = load_profile("tiny-lora").to_dict()  # the start event's config
    worker = perf.model_shape(StartEvent(params_total=100_000, params_trainable=4_000, config=prof,
                                         model_shape={"vocab": 512, "hidden": 64, "layers": 2, "attn_dim": 64,
                                                      "tied": False}))
    numbers = perf.model_shape(StartEvent(**{"params_total": 100_000, "params_trainable": 4_000, "config": prof}))
    assert worker == numbers == ModelShape(100_000, 4_000, 512, 64, 2, 64, False)
    # a hub model fttui has no numbers for, and no shape from the worker: no shape, no MFU
    hub = {**prof, "model": {"name_or_path": "someone/unknown-7b", "init": "pretrained"}}
    assert perf.model_shape(StartEvent(**{"params_total": 1, "params_trainable": 1, "config": hub})) is None
    assert perf.model_shape(StartEvent(**{"config": prof})) is None  # no parameter counts


# ------------------------------------------------------------------ peaks
def test_peak_table_by_nvml_name_and_precision():
    assert peak_tflops("NVIDIA GeForce RTX 4090", "bf16") * 1e12 == RTX4090_BF16
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.4
    assert peak_tflops("NVIDIA H100 PCIe", "fp16") == 756.0
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "fp32") == 19.5  # TF32 stays off: the FP32 rate
    assert find_peak("nvidia a100 80gb pcie") is PEAKS["NVIDIA A100 80GB PCIe"]  # case, spaces
    assert find_peak("Tesla V100-SXM2-16GB") is find_peak("V100 SXM2 16GB")
    assert peak_tflops("Tesla T4", "bf16") is None  # no bf16 hardware path: no peak
    assert peak_tflops("Tesla T4", "fp16") == 65.0
    assert peak_tflops("NVIDIA Hypothetical X1", "bf16") is None and peak_tflops(None, "bf16") is None
    assert peak_tflops("NVIDIA L4", "int4") is None
    for p in PEAKS.values():  # every entry names its source; dense tensor rates above FP32
        assert p.source and (p.fp16 is None or p.fp16 > p.fp32)


def test_docs_peak_table_is_the_codes():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "performance.md").read_text()
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] in PEAKS:
            rows[cells[0]] = tuple(None if c == "—" else float(c) for c in cells[1:4])
    assert rows == {name: (p.fp32, p.fp16, p.bf16) for name, p in PEAKS.items()}


# ------------------------------------------------------------------ MFU per card
def _two_rank_run(tmp, prof, tokens=(4000.0, 3000.0), steps=5, retries=None, frame=None):
    frame = frame or _frames("fake_gpus.json")[2]
    retries = retries or {}
    ev = [_start(prof, rank=0), _start(prof, rank=1)]
    for n in range(1, steps + 1):
        for r in (0, 1):
            ev.append(_step(n, r, tokens[r], retries=retries.get((n, r), retries.get(r, 0))))
    return _run_dir(tmp, prof, ev, [_gpu(frame, t=2.0 + i) for i in range(3)]), ev


def test_live_mfu_per_card_from_the_ranks_steady_tokens(tmp_path):
    prof = _profile("gpus=2")
    rd, ev = _two_rank_run(tmp_path, prof)
    snap = _fold(ev, list(read_samples(rd.samples_path))).snapshot()
    seq = (5 * 4000 + 5 * 3000) / (2 * 5 * 8)  # mean non-padding tokens per sample
    assert snap.flops_per_token == pytest.approx(_lora_fpt(seq))
    assert [c.index for c in snap.cards] == [0, 1] and [c.ranks for c in snap.cards] == [(0,), (1,)]
    # steady: 4000 (3000) tokens per 0.5 s step once the warm-up step is left out
    assert snap.cards[0].tokens_per_s == pytest.approx(8000.0)
    assert snap.cards[0].mfu == pytest.approx(8000.0 * _lora_fpt(seq) / RTX4090_BF16)
    assert snap.cards[1].mfu == pytest.approx(6000.0 * _lora_fpt(seq) / RTX4090_BF16)
    assert snap.cards[0].peak_tflops == 165.2
    # the whole-run figure (the row's) includes the slow first step
    assert snap.cards[0].mfu_avg == pytest.approx(5 * 4000 / 4.0 * _lora_fpt(seq) / RTX4090_BF16)
    assert snap.near_oom is False and snap.near_oom_reason is None


def test_row_mfu_two_ways(tmp_path, fttui_home):
    prof = _profile("gpus=2")
    rd, ev = _two_rank_run(tmp_path, prof, tokens=(3500.0, 3500.0))
    row = _row(rd, cuda_visible="0,1")
    fpt = row["flops_per_token"]
    # one: from the raw step events, each rank's tokens over its training time
    last = {e["rank"]: e for e in ev if e["event"] == "step"}
    raw = [last[r]["tokens"] / last[r]["train_time"] * fpt / RTX4090_BF16 for r in (0, 1)]
    assert all(0.05 < x < 1 for x in raw)  # a plausible figure, so that 4 decimals are a fine check
    assert row["mfu"] == [pytest.approx(x, rel=1e-3) for x in raw]
    # two: from the row's own tokens and duration (equal ranks: each card did half)
    from_row = row["tokens"] / row["duration_s"] / row["num_gpus"] * fpt / peak_tflops(row["gpu"], row["precision"]) / 1e12
    assert row["mfu"] == [pytest.approx(from_row, rel=1e-3)] * 2
    assert row["alloc_retries"] == [0, 0] and row["near_oom"] is False
    total = 24564.0
    used = max(f[i]["mem_used_mb"] for f in [_frames("fake_gpus.json")[2]] for i in (0,))
    assert row["min_headroom_mb"][0] == round(total - used, 1)
    assert row["recorded_by"] == "supervisor"
    assert _row(rd, cuda_visible="0,1", recorded_by="recovered")["recorded_by"] == "recovered"


def test_moe_start_event_counts_the_routed_experts_live_and_in_the_row(tmp_path, fttui_home):
    """The same run with 8 experts (top-2, width 512) in every layer on top of its own weights:
    the 6 idle ones multiply nothing, so FLOPs per token, live MFU and the row's MFU are the dense
    run's (an MoE start event's ``experts``, ``top_k``, ``expert_inter``, ``sparse_layers``)."""
    prof = _profile("gpus=2")
    (tmp_path / "dense").mkdir()
    dense_rd, dense_ev = _two_rank_run(tmp_path / "dense", prof)
    experts = L * 8 * 3 * H * 512  # every expert held; the frozen base
    routed = L * 2 * 3 * H * 512  # what a token goes through: counted as extra dense work below
    moe_shape = dict(SHAPE, experts=8, top_k=2, expert_inter=512, sparse_layers=L)
    (tmp_path / "moe").mkdir()
    ev = [dict(e, params_total=TOTAL + experts, model_shape=moe_shape) if e["event"] == "start" else e
          for e in dense_ev]
    moe_rd = _run_dir(tmp_path / "moe", prof, ev, [json.loads(x) for x in dense_rd.samples_path.read_text().splitlines()])
    dense = _fold(dense_ev, list(read_samples(dense_rd.samples_path))).snapshot()
    moe = _fold(ev, list(read_samples(moe_rd.samples_path))).snapshot()
    seq = (5 * 4000 + 5 * 3000) / (2 * 5 * 8)
    assert moe.flops_per_token == pytest.approx(_lora_fpt(seq) + 4 * routed)  # frozen: forward and input gradients
    assert moe.cards[0].mfu == pytest.approx(8000.0 * moe.flops_per_token / RTX4090_BF16)
    assert moe.cards[0].mfu / dense.cards[0].mfu == pytest.approx(moe.flops_per_token / dense.flops_per_token)
    row = _row(moe_rd, cuda_visible="0,1")
    assert row["flops_per_token"] == round(moe.flops_per_token)
    assert row["mfu"] == [pytest.approx(m * moe.flops_per_token / dense.flops_per_token, rel=1e-3)
                          for m in _row(dense_rd, cuda_visible="0,1")["mfu"]]
    # an older start event (no MoE numbers) counts every expert, as before
    old = [dict(e, params_total=TOTAL + experts) if e["event"] == "start" else e for e in dense_ev]
    assert _fold(old).snapshot().flops_per_token == pytest.approx(moe.flops_per_token + 4 * (experts - routed))


def test_unknown_card_or_mig_slice_has_no_mfu(tmp_path):
    prof = _profile("gpus=1")
    frame = [dict(_frames("fake_gpus.json")[0][0], name="NVIDIA Hypothetical X1")]
    ev = [_start(prof, world=1), _step(1, 0, 1000.0), _step(2, 0, 1000.0)]
    snap = _fold(ev, [_gpu(frame)]).snapshot()
    assert snap.cards[0].mfu is None and snap.cards[0].peak_tflops is None
    assert snap.cards[0].headroom_mb == pytest.approx(24564.0 - 5798.3)  # headroom needs no peak
    assert perf.mfu_text(snap.cards[0].mfu) == "—"
    # a MIG instance is a fraction of its card: the card's peak would be a guess
    mig = _fold(ev, [_gpu(_frames("fake_gpus.json")[0][:1], visible=[0], mig=[0])]).snapshot()
    assert mig.cards[0].name == "NVIDIA GeForce RTX 4090" and mig.cards[0].mfu is None


def test_gpu_run_without_a_gpu_sample_takes_the_workers_card_list(tmp_path):
    prof = _profile("gpus=1")
    env = {"gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "mem_total_mb": 81559}]}
    ev = [_start(prof, world=1, env=env), _step(1, 0, 1000.0), _step(2, 0, 1000.0)]
    snap = _fold(ev).snapshot()
    assert snap.cards[0].name == "NVIDIA H100 80GB HBM3" and snap.cards[0].headroom_mb is None
    assert snap.cards[0].mfu == pytest.approx(2000.0 * snap.flops_per_token / 989.4e12)


def test_cpu_run_has_no_card_figures(tmp_path):
    prof = _profile("gpus=0")
    ev = [_start(prof, world=1), _step(1, 0, 1000.0, retries=None, ooms=None),
          _step(2, 0, 1000.0, retries=None, ooms=None)]
    rd = _run_dir(tmp_path, prof, ev, [_gpu(_frames("fake_gpus.json")[0])])  # a CPU run on a GPU machine
    snap = _fold(ev, [_gpu(_frames("fake_gpus.json")[0])]).snapshot()
    assert snap.cards == () and snap.near_oom is None and snap.rank_alloc_retries == {}
    assert snap.flops_per_token == pytest.approx(_lora_fpt(1000.0 / 8))  # a property of the model
    row = _row(rd)
    assert row["mfu"] is None and row["alloc_retries"] is None and row["min_headroom_mb"] is None
    assert row["near_oom"] is None and row["flops_per_token"] == round(_lora_fpt(125.0))


# ------------------------------------------------------------------ near OOM
def test_allocator_retries_warn_live_and_in_the_row(tmp_path, fttui_home):
    prof = _profile("gpus=2")
    rd, ev = _two_rank_run(tmp_path, prof, steps=4, retries={(3, 1): 3, (4, 1): 3})
    samples = list(read_samples(rd.samples_path))
    before = _fold([e for e in ev if e.get("step", 0) <= 2], samples).snapshot()
    assert before.near_oom is False and [c.alloc_retries for c in before.cards] == [0, 0]
    snap = _fold(ev, samples).snapshot()
    assert snap.near_oom is True and snap.near_oom_reason == "GPU 1: 3 allocator retries"
    assert [c.near_oom for c in snap.cards] == [False, True]
    assert status_line(snap).text == "RUNNING, NEAR OOM: GPU 1: 3 allocator retries"
    row = _row(rd, cuda_visible="0,1")
    assert row["alloc_retries"] == [0, 3] and row["near_oom"] is True
    # an OOM the allocator raised (and something caught) warns too
    ooms = [dict(e, torch_ooms=1) if e.get("event") == "step" and e["rank"] == 0 else e for e in ev]
    assert _fold(ooms, samples).snapshot().near_oom_reason == "GPU 0: 1 allocator OOM"  # the first card's
    no_retry = [dict(e, torch_alloc_retries=0, torch_ooms=1) if e.get("event") == "step" and e["rank"] == 0
                else dict(e, torch_alloc_retries=0) if e.get("event") == "step" else e for e in ev]
    assert _fold(no_retry, samples).snapshot().near_oom_reason == "GPU 0: 1 allocator OOM"


@pytest.mark.parametrize("used, near", [(24564.0 - 1000.0, True), (24564.0 - 1229.0, False)])
def test_headroom_under_the_threshold_warns(tmp_path, used, near):
    assert perf.headroom_threshold_mb(24564.0) == pytest.approx(1228.2)  # 5% of a 24 GB card
    assert perf.headroom_threshold_mb(16384.0) == 1024.0  # 1 GiB floor
    assert perf.headroom_threshold_mb(81559.0) == pytest.approx(4077.95)
    prof = _profile("gpus=1")
    frame = _frames("fake_gpus.json")[0][:1]
    peak = [dict(frame[0], mem_used_mb=used)]
    ev = [_start(prof, world=1), _step(1, 0, 1000.0), _step(2, 0, 1000.0)]
    # the peak passes, the latest sample has room again: the lowest headroom decides
    snap = _fold(ev, [_gpu(peak, t=2.0), _gpu(frame, t=3.0)]).snapshot()
    card = snap.cards[0]
    assert card.headroom_mb == pytest.approx(24564.0 - 5798.3) and card.min_headroom_mb == pytest.approx(24564.0 - used)
    assert snap.near_oom is near
    if near:
        assert snap.near_oom_reason == "GPU 0: headroom 1000 MB under 1228 MB"
    rd = _run_dir(tmp_path, prof, ev, [_gpu(peak, t=2.0), _gpu(frame, t=3.0)])
    row = _row(rd, cuda_visible="0")
    assert row["near_oom"] is near and row["min_headroom_mb"] == [round(24564.0 - used, 1)]


def test_other_users_memory_counts_against_headroom(tmp_path, monkeypatch):
    # CUDA_VISIBLE_DEVICES=2,3 on four shared A100 40GB: alice's 12 GB on card 2 is not the run's,
    # but it is not free either
    from fttui.monitor import make_gpu_sampler

    monkeypatch.setenv("FTTUI_FAKE_GPUS", str(DATA / "fake_gpus_shared.json"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    sampler = make_gpu_sampler()
    samples = [{"t": 2.0 + i, "gpu": sampler.sample((12345,)).to_dict(), "host": {}} for i in range(3)]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    prof = _profile("gpus=2")
    ev = [_start(prof, rank=0), _start(prof, rank=1)] + [_step(n, r, 2000.0) for n in (1, 2, 3) for r in (0, 1)]
    snap = _fold(ev, samples).snapshot()
    assert [c.index for c in snap.cards] == [2, 3]
    assert [c.min_headroom_mb for c in snap.cards] == [40960.0 - 21802.0, 40960.0 - 16752.0]
    assert [c.mfu is not None for c in snap.cards] == [True, True]
    assert snap.cards[0].mfu == pytest.approx(4000.0 * snap.flops_per_token / 312e12)


# ------------------------------------------------------------------ the views' lines
def test_headless_and_rich_lines_show_mfu_and_the_warning(tmp_path):
    from rich.console import Console

    from fttui.cli.live import _render, near_oom_line, perf_summary, progress_line

    prof = _profile("gpus=2")
    rd, ev = _two_rank_run(tmp_path, prof, steps=4, retries={(3, 1): 2, (4, 1): 2})
    snap = _fold(ev, list(read_samples(rd.samples_path))).snapshot()
    pcts = [f"{100 * c.mfu:.1f}%" if 100 * c.mfu < 10 else f"{100 * c.mfu:.0f}%" for c in snap.cards]
    assert f"MFU {pcts[0]} {pcts[1]}" in progress_line(snap)
    line = near_oom_line(snap)
    assert line.startswith("NEAR OOM: GPU 1: 2 allocator retries (lowest headroom ") and "threshold 1228 MB" in line
    console = Console(record=True, width=160, color_system=None)
    console.print(_render(snap, SimpleNamespace(rd=SimpleNamespace(run_id="r1"))))
    text = console.export_text()
    assert f"MFU {pcts[1]}" in text and "allocator retries 2  NEAR OOM: 2 allocator retries" in text
    assert "RUNNING, NEAR OOM: GPU 1: 2 allocator retries" in text
    row = {"mfu": [0.4123, None], "flops_per_token": 3.1e9, "min_headroom_mb": [812.0, 20480.0],
           "alloc_retries": [3, 0], "near_oom": 1}
    assert perf_summary(row) == ("  MFU 41% — per card (3.1e+09 FLOPs/token)  lowest headroom 812 MB 20.0 GB"
                                 "  allocator retries 3 0  NEAR OOM")
    assert perf_summary({"mfu": "-", "flops_per_token": "-"}) is None


# ------------------------------------------------------------------ the store
def test_new_columns_round_trip(tmp_path, fttui_home):
    prof = _profile("gpus=2")
    rd, _ev = _two_rank_run(tmp_path, prof, steps=3, retries={(3, 1): 1})
    row = _row(rd, cuda_visible="0,1")
    with Store(tmp_path / "s.sqlite") as s:
        s.put(row)
        got = s.get(row["run_id"])
    for key in ("alloc_retries", "min_headroom_mb", "mfu", "flops_per_token", "recorded_by"):
        assert got[key] == row[key], key
    assert got["near_oom"] == 1 and got["alloc_retries"] == [0, 1]
    assert {"alloc_retries", "min_headroom_mb", "mfu", "flops_per_token", "recorded_by"} <= set(store_mod._ADDED[4])  # issue 14: one migration


def test_schema_3_store_migrates_with_the_new_columns(tmp_path):
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    for ddl in store_mod.MIGRATIONS[:3]:
        for stmt in ddl.split(";"):
            if stmt.strip():
                conn.execute(stmt)
    conn.execute("PRAGMA user_version = 3")
    assert "mfu" not in [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    old = [("r1", "run", 12.5), ("s1", "sweep", None), ("p1", "probe", 3.0)]
    for rid, kind, sps in old:
        conn.execute("INSERT INTO runs (run_id, kind, started_at, status, samples_per_s) VALUES (?, ?, ?, ?, ?)",
                     (rid, kind, "2026-01-01T00:00:00", "completed", sps))
    conn.close()
    with Store(path) as s:
        cols = [r[1] for r in s.conn.execute("PRAGMA table_info(runs)")]
        rows = {r["run_id"]: r for r in s.rows()}
    for c in ("alloc_retries", "min_headroom_mb", "mfu", "flops_per_token", "near_oom", "recorded_by"):
        assert c in cols
    assert {k: r["samples_per_s"] for k, r in rows.items()} == {"r1": 12.5, "s1": None, "p1": 3.0}
    assert rows["r1"]["recorded_by"] == rows["s1"]["recorded_by"] == "supervisor"
    assert rows["p1"]["recorded_by"] == "probe"
    for r in rows.values():  # measured before: unknown, never 0
        assert r["mfu"] is None and r["alloc_retries"] is None and r["near_oom"] is None
