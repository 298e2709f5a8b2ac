"""End to end: every fine-tuning method through the real `fttui run`, each checked for what it is.

A run that completes proves little about the method: these tests read the summary row and the
worker's `start` event (``structure``: what the model is made of, ``optimizer``: what steps it,
``deepspeed``: what the engine runs with) and compare them with numbers computed here from the
tiny architecture and the bundled profiles (profiles/tiny-*.toml).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from fttui.core.run.files.events import read_jsonl
from fttui.core.profiles import load_profile
from tests.conftest import run_fttui
from tests.e2e.phase_checks import zero3_phases_are_said
from tests.helpers import processes_mentioning

pytestmark = pytest.mark.e2e

STEPS = 2  # enough to take optimizer steps; the figures are not what is tested here
LLAMA_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


# ------------------------------------------------------------------ expected numbers


def linear_shapes(arch: dict) -> dict[str, tuple[int, int]]:
    """(in_features, out_features) of each linear layer of one Llama decoder layer."""
    h, inter = arch["hidden_size"], arch["intermediate_size"]
    heads = arch["num_attention_heads"]
    kv = arch.get("num_key_value_heads") or heads
    hd = arch.get("head_dim") or h // heads
    return {
        "q_proj": (h, heads * hd), "k_proj": (h, kv * hd), "v_proj": (h, kv * hd), "o_proj": (heads * hd, h),
        "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h),
    }


def base_params(arch: dict) -> int:
    """Parameters of a LlamaForCausalLM with untied embeddings and no biases."""
    h, vocab, layers = arch["hidden_size"], arch["vocab_size"], arch["num_hidden_layers"]
    per_layer = sum(i * o for i, o in linear_shapes(arch).values()) + 2 * h  # + two RMSNorms
    return vocab * h + layers * per_layer + h + vocab * h  # embed, layers, final norm, lm_head


def lora_targets(profile) -> list[str]:
    t = profile.lora.target_modules
    return list(LLAMA_LINEARS) if t == "all-linear" else list(t)


def lora_params(profile) -> int:
    """r x (in + out) per adapted linear layer (A is r x in, B is out x r), every decoder layer."""
    arch, r = profile.model.arch_config, int(profile.lora.r)
    shapes = linear_shapes(arch)
    return arch["num_hidden_layers"] * sum(r * (shapes[t][0] + shapes[t][1]) for t in lora_targets(profile))


# ------------------------------------------------------------------ running


def run_method(profile: str, fttui_home: Path, *extra: str, timeout: float = 240,
               out: list | None = None) -> tuple[dict, dict, Path]:
    """Run one profile headless through the CLI; return (row, rank-0 start event, run dir); the
    finished process is appended to ``out`` when given (its headless output)."""
    proc = run_fttui("run", "--profile", profile, "--headless", "--set", f"max_steps={STEPS}", *extra,
                     timeout=timeout)
    if out is not None:
        out.append(proc)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(run_fttui("results", "--format", "json", check=True).stdout)
    assert len(rows) == 1, rows
    row = rows[0]
    assert row["status"] == "completed" and row["profile"] == profile
    assert row["steps"] == row["total_steps"] == STEPS
    run_dir = Path(row["run_dir"])
    starts = [e for e in read_jsonl(run_dir / "events.jsonl") if e.get("event") == "start"]
    assert len(starts) == 1, starts
    start = starts[0]
    assert start.get("runtime_info_error") is None, start.get("runtime_info_error")
    assert start["params_total"] == row["params_total"] and start["params_trainable"] == row["params_trainable"]
    assert not processes_mentioning(str(run_dir))
    return row, start, run_dir


def layer_linears(structure: dict) -> dict[str, str]:
    """Base linear layers inside the decoder layers: pattern -> class."""
    return {k: v for k, v in structure["linear"].items() if k.startswith("model.layers.")}


# ------------------------------------------------------------------ methods


def test_full_trains_every_parameter(fttui_home):
    prof = load_profile("tiny-full")
    row, start, _ = run_method("tiny-full", fttui_home)
    arch = prof.model.arch_config
    assert row["method"] == "full"
    assert row["params_trainable"] == row["params_total"] == base_params(arch)
    st = start["structure"]
    assert st["quant"] is None and not any(k.startswith(("lora.", "bnb.", "peft.")) for k in st["modules"])
    assert sum(st["trainable"].values()) == row["params_total"]
    assert {"model.embed_tokens.weight", "lm_head.weight"} <= set(st["trainable"])
    assert start["optimizer"]["class"] == "AdamW" and start["optimizer"]["chain"][-1] == "torch.optim.adamw.AdamW"
    assert start["deepspeed"] is None


def test_lora_trains_the_adapters_only(fttui_home):
    prof = load_profile("tiny-lora")
    row, start, _ = run_method("tiny-lora", fttui_home)
    arch = prof.model.arch_config
    expected = lora_params(prof)
    assert expected == 2 * 4 * 8 * (64 + 64)  # tiny-lora: 2 layers, q/k/v/o 64 -> 64, r = 8
    assert row["method"] == "lora"
    assert row["params_trainable"] == expected
    assert row["params_total"] == base_params(arch) + expected
    st = start["structure"]
    layers = arch["num_hidden_layers"]
    assert st["modules"]["lora.Linear"] == layers * len(lora_targets(prof))
    assert st["quant"] is None and "bnb.Linear4bit" not in st["modules"]
    # Only LoRA A/B matrices train, on exactly the target modules.
    assert all(".lora_A." in k or ".lora_B." in k for k in st["trainable"])
    assert {k.split(".")[-3] for k in st["trainable"]} == set(lora_targets(prof))


def test_lora_emb_trains_embeddings_and_lm_head(fttui_home):
    prof = load_profile("tiny-lora-emb")
    row, start, _ = run_method("tiny-lora-emb", fttui_home)
    arch = prof.model.arch_config
    emb = arch["vocab_size"] * arch["hidden_size"]
    assert row["method"] == "lora-emb"
    assert row["params_trainable"] == lora_params(prof) + 2 * emb  # adapters + embeddings + lm_head
    st = start["structure"]
    assert st["trainable"]["model.embed_tokens.modules_to_save.weight"] == emb
    assert st["trainable"]["lm_head.modules_to_save.weight"] == emb
    assert st["modules"]["peft.ModulesToSaveWrapper"] == 2


def test_qlora_base_is_4bit_and_optimizer_paged(fttui_home):
    prof = load_profile("tiny-qlora")
    row, start, _ = run_method("tiny-qlora", fttui_home)
    arch = prof.model.arch_config
    layers = arch["num_hidden_layers"]
    assert row["method"] == "qlora"
    assert row["params_trainable"] == lora_params(prof)
    # Real (unpacked) counts: the 4-bit storage holds two weights per byte.
    assert row["params_total"] == base_params(arch) + lora_params(prof)
    st = start["structure"]
    q = st["quant"]
    assert q["bits"] == 4 and q["storage_dtype"] == "uint8" and q["weight_class"] == "Params4bit"
    assert q["quant_type"] == prof.quant.type == "nf4" and q["double_quant"] is True
    assert q["compute_dtype"] == "float32"  # precision fp32 in tiny-qlora
    # Every linear layer of the decoder is 4-bit under a LoRA wrapper; the LM head is not quantised.
    linears = layer_linears(st)
    assert len(linears) == len(LLAMA_LINEARS) and set(linears.values()) == {"bnb.Linear4bit"}
    assert st["modules"]["bnb.Linear4bit"] == st["modules"]["lora.Linear4bit"] == layers * len(LLAMA_LINEARS)
    assert st["linear"]["lm_head"] == "nn.Linear"
    opt = start["optimizer"]
    assert prof.train.optimizer == opt["name"] == "paged_adamw_32bit"
    assert opt["chain"][-1].startswith("bitsandbytes.optim.") and opt["paged"] is True and opt["optim_bits"] == 32


def test_lora_int8_base_is_8bit(fttui_home):
    prof = load_profile("tiny-lora-int8")
    row, start, _ = run_method("tiny-lora-int8", fttui_home)
    arch = prof.model.arch_config
    assert row["method"] == "lora-int8"
    assert row["params_trainable"] == lora_params(prof)
    assert row["params_total"] == base_params(arch) + lora_params(prof)
    st = start["structure"]
    q = st["quant"]
    assert q["bits"] == 8 and q["storage_dtype"] == "int8" and q["weight_class"] == "Int8Params"
    linears = layer_linears(st)
    assert len(linears) == len(LLAMA_LINEARS) and set(linears.values()) == {"bnb.Linear8bitLt"}
    assert st["modules"]["bnb.Linear8bitLt"] == arch["num_hidden_layers"] * len(LLAMA_LINEARS)
    assert "bnb.Linear4bit" not in st["modules"]


# ------------------------------------------------------------------ ZeRO-3 offload


def test_zero3_config_generated_from_profile():
    from fttui.worker.model import deepspeed_config  # imports no torch

    prof = load_profile("tiny-full-zero3", ["grad_accum=3"])
    for world in (1, 2, 8):
        cfg = deepspeed_config(prof, world)
        micro = prof.train.batch_size
        assert cfg["train_micro_batch_size_per_gpu"] == micro and cfg["gradient_accumulation_steps"] == 3
        assert cfg["train_batch_size"] == micro * 3 * world
    z = cfg["zero_optimization"]
    pin = prof.deepspeed.pin_memory
    assert z["stage"] == 3
    assert z["offload_optimizer"] == {"device": "cpu", "pin_memory": pin}
    assert z["offload_param"] == {"device": "cpu", "pin_memory": pin}
    no_param = deepspeed_config(load_profile("tiny-full-zero3", ["zero3.offload_params=false"]), 1)
    assert "offload_param" not in no_param["zero_optimization"]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed")
def test_zero3_offload_runs_on_the_deepspeed_engine(fttui_home):
    """First use JIT-builds DeepSpeed's cpu_adam (about 90 s on 2 cores) into torch's extension
    cache (TORCH_EXTENSIONS_DIR, default ~/.cache/torch_extensions); later runs reuse it."""
    prof = load_profile("tiny-full-zero3")
    procs: list = []
    row, start, run_dir = run_method("tiny-full-zero3", fttui_home, timeout=280, out=procs)
    zero3_phases_are_said(run_dir, procs[0].stdout)  # the same run (one ZeRO-3 run for both)
    argv = json.loads((run_dir / "command.json").read_text())["argv"]
    assert argv[1:3] == ["-m", "deepspeed.launcher.runner"] and "--num_gpus=1" in argv
    # DeepSpeed's CPU collectives gave the rank a 66 MB workspace in /dev/shm that DeepSpeed never
    # unlinks; the supervisor removed it once the run's processes were gone (processes.shmleft)
    port = next(a.split("=", 1)[1] for a in argv if a.startswith("--master_port="))
    assert not list(Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*_{port}_*"))
    assert (row["method"], row["sharding"]) == ("full", "zero3-offload")  # read back from the engine
    assert row["params_trainable"] == row["params_total"] == base_params(prof.model.arch_config)
    ds = start["deepspeed"]
    assert ds is not None and ds["engine"] == "deepspeed.runtime.engine.DeepSpeedEngine"
    assert start["wrapper"] == ds["engine"]
    assert ds["zero_stage"] == 3
    pin = prof.deepspeed.pin_memory
    assert ds["offload_optimizer"] == {"device": "cpu", "pin_memory": pin}
    assert ds["offload_param"] == {"device": "cpu", "pin_memory": pin}
    micro, accum = prof.train.batch_size, prof.train.grad_accum
    assert (ds["micro_batch"], ds["grad_accum"], ds["train_batch_size"]) == (micro, accum, micro * accum * 1)
    # ZeRO-3: every parameter is partitioned, its shard in host memory.
    assert ds["params"] > 0 and ds["params_partitioned"] == ds["params"] and ds["partition_devices"] == ["cpu"]
    # The optimizer that steps is DeepSpeed's CPU Adam under the ZeRO-3 optimizer: its state is in host RAM.
    opt = start["optimizer"]
    assert opt["class"] == "DeepSpeedCPUAdam"
    assert any(c.endswith(".DeepSpeedZeroOptimizer_Stage3") for c in opt["chain"])
    assert row["peak_host_rss_mb"] > 0 and len(row["peak_rank_rss_mb"]) == 1
