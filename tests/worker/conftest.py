"""Helpers for the worker tests: a complete resolved profile for a tiny random Llama."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fttui.core.run.launching.launch import free_port

REPO = Path(__file__).resolve().parents[2]

TINY_ARCH = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 512,
    "max_position_embeddings": 512,
}

_DEFAULT = {
    "name": "tiny",
    "source": "tests/worker/tiny.toml",
    "description": "",
    "method": "lora",
    "model": {
        "name_or_path": "tiny-llama",
        "init": "random",
        "arch": "llama",
        "config": None,
        "arch_config": TINY_ARCH,
        "trust_remote_code": False,
        "tokenizer": "byte",
        "attn_implementation": "sdpa",
    },
    "data": {"source": "synthetic", "name": "synthetic", "format": "auto", "max_seq_len": 32,
             "num_samples": 16, "pad_to_max": False},
    "train": {"batch_size": 2, "grad_accum": 1, "epochs": 1.0, "max_steps": -1, "lr": 2e-4,
              "precision": "fp32", "gradient_checkpointing": False, "optimizer": "adamw_torch",
              "lr_scheduler": "linear", "warmup_ratio": 0.0, "weight_decay": 0.0, "seed": 42,
              "warmup_exclude_steps": 1},
    "lora": {"r": 8, "alpha": 16, "dropout": 0.05, "target_modules": ["q_proj", "v_proj"]},
    "quant": {"type": "nf4", "double_quant": True},
    "zero3": {"offload_optimizer": True, "offload_params": True, "pin_memory": True},
    "devices": {"gpus": 0, "nodes": 1, "node_rank": 0, "main_addr": "127.0.0.1", "main_port": 29500,
                "launcher": "auto"},
    "limits": {"gpu_memory": "", "host_memory": ""},
}


def make_profile(**overrides) -> dict:
    """Complete resolved profile; ``overrides`` use dotted keys (``train.batch_size=4``) or
    top-level keys (``method="full"``)."""
    p = copy.deepcopy(_DEFAULT)
    for key, val in overrides.items():
        key = key.replace("__", ".")
        if "." in key:
            sec, k = key.split(".", 1)
            p[sec][k] = val
        else:
            p[key] = val
    return p


def write_run_dir(tmp_path: Path, profile: dict, name: str = "run") -> Path:
    d = tmp_path / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "profile.json").write_text(json.dumps(profile.to_dict() if hasattr(profile, "to_dict") else profile))
    return d


def worker_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("MALLOC_ARENA_MAX", "1")
    return env


def run_worker(run_dir: Path, *, timeout: float = 120, torchrun_nproc: int = 0) -> subprocess.CompletedProcess:
    if torchrun_nproc:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(torchrun_nproc),
               "--master_port", str(free_port()), "-m", "fttui.worker.train",
               "--run-dir", str(run_dir)]
    else:
        cmd = [sys.executable, "-m", "fttui.worker.train", "--run-dir", str(run_dir)]
    return subprocess.run(cmd, cwd=str(REPO), env=worker_env(), capture_output=True, text=True, timeout=timeout)


def read_events(run_dir: Path) -> list[dict]:
    """The worker's events, startup ``phase`` events left out (tests/unit/test_phases.py and
    tests/e2e/phase_checks.py check those)."""
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in events if e.get("event") != "phase"]


@pytest.fixture
def tiny_profile():
    return make_profile


def pytest_configure(config):
    config.addinivalue_line("markers", "multiprocess: launches several worker processes (torchrun)")
