"""Recorded run directories and result rows for the app tests (fixed ids and times, no machine
details), so screens render the same everywhere."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fttui.core.base import paths
from fttui.core.results.store import Store

T0 = 1_700_000_000.0  # fixed clock for recorded events
ROOT = Path(__file__).resolve().parents[2]
FAKE_GPUS = ROOT / "tests" / "data" / "fake_gpus.json"


def _jsonl(path: Path, objs) -> None:
    path.write_text("".join(json.dumps(o, sort_keys=True) + "\n" for o in objs))


def _gpu_frames() -> list[list[dict]]:
    return json.loads(FAKE_GPUS.read_text())["frames"]


PROFILE = {
    "name": "demo-lora",
    "method": "lora",
    "model": {"name_or_path": "Qwen/Qwen2.5-0.5B", "init": "pretrained"},
    "data": {"name": "alpaca-1k", "max_seq_len": 512},
    "train": {"batch_size": 4, "grad_accum": 2, "warmup_exclude_steps": 1, "precision": "bf16"},
    "devices": {"gpus": 2, "nodes": 1},
    "limits": {},
}


def write_run(run_id: str, *, status: str | None = "completed", gpus: int = 2, steps: int = 12,
              total_steps: int = 20, oom: bool = False, live_pid: int | None = None,
              log_lines: int = 30) -> Path:
    """A run directory under FTTUI_HOME/runs as the supervisor leaves it.

    ``status=None`` leaves out status.json (a live run: give ``live_pid`` of a live process)."""
    rd = paths.ensure_dir(paths.runs_dir()) / run_id
    rd.mkdir(mode=0o700)
    prof = dict(PROFILE, devices={"gpus": gpus, "nodes": 1})
    (rd / "profile.json").write_text(json.dumps(prof))
    ident = None
    if live_pid:  # a supervisor records who it is (start ticks and boot): a bare pid is not trusted
        from fttui.core.run.processes.guard import identity

        ident = identity(live_pid).to_dict()
    (rd / "supervisor.json").write_text(json.dumps({"pid": live_pid or 0, "pgid": 0, "started": T0, "id": ident}))
    world = max(1, gpus)
    events = [{"event": "launch", "t": T0, "rank": -1, "source": "supervisor", "pid": 0}]
    for r in range(world):
        events.append({"event": "start", "t": T0 + 5, "rank": r, "source": "worker", "total_steps": total_steps,
                       "world_size": world, "micro_batch": 4, "grad_accum": 2, "max_seq_len": 512,
                       "num_samples": 320, "params_total": 494_032_768, "params_trainable": 2_162_688,
                       "env": {"gpu_names": ["NVIDIA GeForce RTX 4090"] * gpus}})
    losses = [2.31, 2.12, 1.98, 1.91, 1.85, 1.74, 1.70, 1.66, 1.61, 1.58, 1.55, 1.53, 1.51, 1.49]
    for s in range(1, steps + 1):
        for r in range(world):
            tt = 1.6 + (s - 1) * 0.8
            events.append({"event": "step", "t": T0 + 5 + tt, "rank": r, "source": "worker", "step": s,
                           "total_steps": total_steps, "epoch": s / total_steps, "samples": s * 8,
                           "tokens": s * 8 * 400 + (s % 3) * 150, "tokens_padded": s * 8 * 512,
                           "loss": losses[(s - 1) % len(losses)], "lr": 2e-4, "step_time": 0.8 if s > 1 else 1.6,
                           "train_time": tt, "torch_peak_alloc_mb": 9000.0 + 100 * r,
                           "torch_peak_reserved_mb": 10240.0 + 128 * r if gpus else None})
    t_end = T0 + 5 + 1.6 + (steps - 1) * 0.8
    if oom:
        events.append({"event": "error", "t": t_end + 0.2, "rank": 0, "source": "worker", "kind": "oom",
                       "oom_kind": "cpu", "message": "DefaultCPUAllocator: can't allocate memory: you tried "
                                                     "to allocate 4294967296 bytes", "step": steps + 1,
                       "traceback": ["RuntimeError: DefaultCPUAllocator: can't allocate memory"]})
        events.append({"event": "exit", "t": t_end + 0.5, "rank": -1, "source": "supervisor",
                       "returncode": 1, "signal": None})
    elif status == "completed":
        for r in range(world):
            events.append({"event": "end", "t": t_end + 0.1, "rank": r, "source": "worker", "step": steps,
                           "train_time": 1.6 + (steps - 1) * 0.8, "samples": steps * 8,
                           "tokens": steps * 8 * 400, "tokens_padded": steps * 8 * 512})
        events.append({"event": "exit", "t": t_end + 0.5, "rank": -1, "source": "supervisor",
                       "returncode": 0, "signal": None})
    _jsonl(rd / "events.jsonl", events)
    frames = _gpu_frames()
    samples = []
    n_samples = int((t_end - T0) / 0.5) + 1
    for i in range(n_samples):
        gpu = {"available": False, "reason": "NVML library not found: no NVIDIA driver", "driver": None,
               "cuda": None, "gpus": []}
        if gpus:
            gpu = {"available": True, "reason": None, "driver": "550.54.15", "cuda": "12.4",
                   "gpus": frames[min(i, len(frames) - 1)][:gpus]}
        samples.append({"t": T0 + 0.5 * i, "gpu": gpu,
                        "host": {"ram_used_mb": 9000.0 + 50 * min(i, 20), "ram_total_mb": 64216.0,
                                 "swap_used_mb": 0.0, "swap_total_mb": 8192.0,
                                 "tree_rss_mb": 3000.0 + 40 * min(i, 30), "tree_nprocs": 3 if gpus else 1,
                                 "tree_cpu_pct": 100.0}})
    _jsonl(rd / "samples.jsonl", samples)
    log = [f"step {s}/{total_steps} loss {losses[(s - 1) % len(losses)]} step_time 0.800s"
           for s in range(1, min(steps, log_lines) + 1)]
    log = ["model built: Qwen/Qwen2.5-0.5B, method lora, params total 494,032,768"] + log
    if oom:
        log += ["Traceback (most recent call last):",
                "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 4294967296 bytes"]
    (rd / "train.log").write_text("\n".join(log) + "\n")
    if status is not None:
        st = {"status": status, "returncode": 0 if status == "completed" else 1, "signal": None,
              "oom_kind": "cpu" if oom else None, "ended": t_end + 0.5,
              "error": ("DefaultCPUAllocator: can't allocate memory: you tried to allocate 4294967296 bytes"
                        if oom else None), "error_step": steps + 1 if oom else None, "error_rank": 0 if oom else None}
        (rd / "status.json").write_text(json.dumps(st))
        row = make_row(run_id, status=status, gpus=gpus, oom=oom, steps=steps, total_steps=total_steps)
        (rd / "row.json").write_text(json.dumps(row))
    return rd


def make_row(run_id: str, *, status: str = "completed", gpus: int = 1, oom: bool = False,
             model: str = "Qwen/Qwen2.5-0.5B", method: str = "lora", batch: int = 4, samples_per_s: float = 10.0,
             steps: int = 12, total_steps: int = 20, started: str = "2023-11-14T22:13:20") -> dict:
    return {
        "run_id": run_id, "kind": "run", "started_at": started, "ended_at": started, "profile": "demo",
        "model": model, "dataset": "alpaca-1k", "method": method, "precision": "bf16",
        "gpu": "NVIDIA GeForce RTX 4090" if gpus else "cpu", "gpu_names": ["NVIDIA GeForce RTX 4090"] * gpus,
        "num_gpus": gpus, "nodes": 1, "batch_size": batch, "grad_accum": 2, "world_size": max(1, gpus),
        "effective_batch": batch * 2 * max(1, gpus), "max_seq_len": 512, "steps": steps, "total_steps": total_steps,
        "samples": steps * 8, "tokens": steps * 3200, "tokens_padded": steps * 4096,
        "samples_per_s": None if oom else samples_per_s, "tokens_per_s": None if oom else samples_per_s * 400,
        "tokens_padded_per_s": None if oom else samples_per_s * 512,
        "duration_s": 10.4, "wall_s": 16.9,
        "peak_gpu_mem_mb": [16958.8, 16566.5][:gpus], "peak_torch_reserved_mb": [10240.0, 10368.0][:gpus],
        "peak_host_rss_mb": 4200.0, "host_measure": "ranks", "host_ram_total_mb": 64216.0, "host_ram_peak_used_mb": 10000.0,
        "status": status, "oom_kind": "cpu" if oom else None,
        "error": "DefaultCPUAllocator: can't allocate memory" if oom else None,
        "run_dir": f"runs/{run_id}",
    }


def fill_store() -> list[dict]:
    rows = [
        make_row("20231114-221320-demo-lora-0001", gpus=1, batch=4, samples_per_s=12.5),
        make_row("20231114-221420-demo-lora-0002", gpus=2, batch=8, samples_per_s=21.75,
                 started="2023-11-14T22:14:20"),
        make_row("20231114-221520-demo-qlora-0003", gpus=1, batch=16, method="qlora", status="oom", oom=True,
                 started="2023-11-14T22:15:20"),
        make_row("20231114-221620-demo-full-0004", gpus=1, batch=2, method="full", model="TinyLlama/TinyLlama-1.1B",
                 samples_per_s=3.25, started="2023-11-14T22:16:20"),
    ]
    with Store() as st:
        for r in rows:
            st.put(r)
    return rows


PROFILE_LORA = '''# fttui run --profile demo-lora
description = "LoRA on a random tiny Llama with synthetic data"
method = "lora"

[model]
init = "random"
arch = "llama"
tokenizer = "byte"

[model.arch_config]
hidden_size = 64
intermediate_size = 128
num_hidden_layers = 2
num_attention_heads = 4
num_key_value_heads = 4
vocab_size = 512

[data]
source = "synthetic"
max_seq_len = 128
num_samples = 256

[train]
batch_size = 8
grad_accum = 2

[devices]
gpus = 0
'''

PROFILE_QLORA = '''# fttui run --profile demo-qlora
description = "QLoRA of Qwen2.5 0.5B on two GPUs"
method = "qlora"

[model]
name_or_path = "Qwen/Qwen2.5-0.5B"

[data]
source = "synthetic"
max_seq_len = 1024
num_samples = 512

[train]
batch_size = 4
grad_accum = 4
precision = "bf16"
gradient_checkpointing = true

[devices]
gpus = 2
'''


def fixture_profiles(tmp: Path, monkeypatch) -> Path:
    """Make discovery see only two fixed profiles (as bundled ones)."""
    bundled = tmp / "bundled-profiles"
    bundled.mkdir()
    (bundled / "demo-lora.toml").write_text(PROFILE_LORA)
    (bundled / "demo-qlora.toml").write_text(PROFILE_QLORA)
    work = tmp / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(paths, "bundled_profiles_dir", lambda: bundled)
    return bundled


def live_pid() -> int:
    return os.getpid()


def probe_result(param: str = "batch_size"):
    """A recorded probe of demo-lora on CPU with a host memory limit (fixed figures): climb
    1, 2, 4, ..., 64 (OOM), guided bisection, a second clean load at 61 / 62."""
    from fttui.core.experiments.probe import ProbeResult, Trial

    def fit(v, load, clean, rss, st, sps, fresh=False):
        return Trial(value=v, status="fit", load=load, clean=clean, fresh=fresh, steps=2, step_time_s=st,
                     samples_per_s=sps, tokens_per_s=sps * 128, peak_host_rss_mb=rss)

    def oom(v, load, clean, rss):
        return Trial(value=v, status="oom", load=load, clean=clean, oom_kind="cpu",
                     message="DefaultCPUAllocator: can't allocate memory", peak_host_rss_mb=rss)

    trials = [fit(1, 1, True, 436.2, 0.213, 4.7, fresh=True), fit(2, 1, True, 442.0, 0.123, 16.27),
              fit(4, 1, True, 446.4, 0.4, 10.0), fit(8, 1, True, 454.1, 0.559, 14.31),
              fit(16, 1, True, 470.3, 1.718, 9.31), fit(32, 1, True, 501.0, 1.386, 23.09),
              oom(64, 1, True, 548.0), fit(48, 1, False, 533.0, 9.972, 4.81),
              fit(56, 1, False, 548.5, 9.83, 5.7), fit(60, 1, False, 556.0, 9.072, 6.61),
              oom(62, 1, False, 547.0), fit(61, 1, False, 558.0, 5.446, 11.2),
              fit(61, 2, True, 552.0, 6.213, 9.82, fresh=True), oom(62, 2, True, 544.0)]
    return ProbeResult(probe_id="20231114-221320-probe-demo-lora-0001", param=param, lo=1, hi=64,
                       largest_fit=61, smallest_oom=62, exact=True, model_loads=2, trials=trials,
                       wall_s=141.25)
