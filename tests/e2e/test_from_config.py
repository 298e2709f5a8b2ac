"""`fttui run --from FILE.yaml`: a LLaMA-Factory config runs end to end on a tiny CPU model, and
the row says what ran: the method and settings the YAML asked for (LoRA with trained embeddings,
micro batch, accumulation, sequence length), with the YAML named as the profile's source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fttui.core.run.files.events import read_jsonl
from tests.conftest import run_fttui
from tests.helpers import processes_mentioning

pytestmark = pytest.mark.e2e

LF_YAML = """\
model_name_or_path: tiny-from-yaml
stage: sft
finetuning_type: lora
lora_rank: 4
lora_target: q_proj,v_proj
additional_target: embed_tokens,lm_head
dataset: alpaca_en_demo
template: default
cutoff_len: 64
per_device_train_batch_size: 2
gradient_accumulation_steps: 2
learning_rate: 1.0e-3
max_steps: 3
disable_gradient_checkpointing: true
"""


def test_llamafactory_config_runs_and_its_row_says_what_ran(tmp_path, fttui_home):
    cfg = tmp_path / "tiny_lora_sft.yaml"
    cfg.write_text(LF_YAML)
    proc = run_fttui("run", "--headless", "--from", str(cfg), "--set", "model.init=random",
                     "--set", "model.arch=tiny-llama", "--set", "model.tokenizer=byte", "--set", "gpus=0",
                     "--set", "train.save=none", timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "not mapped: dataset, template" in proc.stderr
    rows = json.loads(run_fttui("results", "--format", "json", check=True).stdout)
    assert len(rows) == 1
    row = rows[0]
    assert (row["status"], row["profile"], row["method"], row["sharding"]) == ("completed", "tiny_lora_sft", "lora-emb", "none")
    assert (row["batch_size"], row["grad_accum"], row["max_seq_len"], row["steps"]) == (2, 2, 64, 3)
    run_dir = Path(row["run_dir"])
    prof = json.loads((run_dir / "profile.json").read_text())
    assert prof["source"] == str(cfg) and prof["origin"] == "yaml" and prof["lora"]["r"] == 4
    start = next(e for e in read_jsonl(run_dir / "events.jsonl") if e.get("event") == "start")
    assert start["micro_batch"] == 2 and start["grad_accum"] == 2 and start["max_seq_len"] == 64
    assert not processes_mentioning(str(run_dir))
