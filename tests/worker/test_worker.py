"""Tests of the training worker (fttui.worker). Subprocess runs use tiny random Llama models on CPU."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fttui.core.run.launching.launch import free_port
from tests.helpers import profile_of

from .conftest import REPO, TINY_ARCH, make_profile, read_events, run_worker, worker_env, write_run_dir

from fttui.worker.errors import ConfigError, DataError, classify, one_line
from fttui.core.data.records import load_records
from fttui.worker.limits import parse_size

# ---------------------------------------------------------------- helpers


def _write_instruction(path: Path, n: int) -> Path:
    with open(path, "w") as f:
        for i in range(n):
            rec = {"instruction": f"Add {i} and {i + 1}.", "input": f"numbers {i}" if i % 2 else "",
                   "output": f"The sum is {2 * i + 1}."}
            f.write(json.dumps(rec) + "\n")
    return path


def _check_stream(events, *, batch, steps, world=1, micro=None, floor=True):
    """``batch``: samples per optimizer step on this rank; ``micro``: micro batch (default ``batch``);
    ``floor``: the run measures its pass floor (one process, no DeepSpeed: fttui.worker.passfloor)."""
    assert [e["event"] for e in events][0] == "start"
    assert events[-1]["event"] == "end"
    for e in events:
        assert e["source"] == "worker" and isinstance(e["t"], float) and e["rank"] == 0
    start = events[0]
    assert start["params_total"] > 0 and 0 < start["params_trainable"] <= start["params_total"]
    assert start["total_steps"] == steps and start["world_size"] == world and start["micro_batch"] == (micro or batch)
    assert {"python", "torch", "transformers", "peft", "cpu", "ram_total_mb", "hostname"} <= set(start["env"])
    assert start["config"]["name"] == "tiny"
    stepev = [e for e in events if e["event"] == "step"]
    assert [e["step"] for e in stepev] == list(range(1, steps + 1))
    prev_t = 0.0
    for e in stepev:
        assert e["samples"] == e["step"] * batch
        assert 0 < e["tokens"] <= e["tokens_padded"]
        assert e["total_steps"] == steps
        assert math.isfinite(e["loss"]) and e["lr"] is not None
        assert e["step_time"] > 0 and e["train_time"] >= prev_t
        assert e["torch_peak_alloc_mb"] is None  # CPU
        prev_t = e["train_time"]
    # the forecast's step parts (fttui.core.results.stepparts): passes, their time and their lengths
    per_step = batch // (micro or batch)
    tp = xl = 0
    for e in stepev:
        assert e["passes"] == e["step"] * per_step and 0 < e["pass_time"] <= e["step_time"]
        if per_step == 1:  # one micro-batch per step: its length is its padded tokens over its samples
            assert e["tokens_padded_x_len"] - xl == (e["tokens_padded"] - tp) ** 2 // batch
        tp, xl = e["tokens_padded"], e["tokens_padded_x_len"]
    end = events[-1]
    if floor:
        assert end["pass_floor_s"] > 0 and end["pass_floor_tokens"] == min(16, start["max_seq_len"])
    else:
        assert "pass_floor_s" not in end
    assert end["step"] == steps and end["samples"] == stepev[-1]["samples"]
    assert end["tokens"] == stepev[-1]["tokens"] and end["tokens_padded"] == stepev[-1]["tokens_padded"]
    return start, stepev


def _lora_expected(arch, r, targets):
    hidden, heads, kv = arch["hidden_size"], arch["num_attention_heads"], arch["num_key_value_heads"]
    hd = hidden // heads
    shapes = {"q_proj": (hidden, heads * hd), "k_proj": (hidden, kv * hd), "v_proj": (hidden, kv * hd),
              "o_proj": (heads * hd, hidden), "gate_proj": (hidden, arch["intermediate_size"]),
              "up_proj": (hidden, arch["intermediate_size"]), "down_proj": (arch["intermediate_size"], hidden)}
    return arch["num_hidden_layers"] * sum(r * (shapes[t][0] + shapes[t][1]) for t in targets)


# ---------------------------------------------------------------- torch-free units


def test_parse_size():
    assert parse_size("2GiB") == 2 * 2**30
    assert parse_size("512MiB") == 512 * 2**20
    assert parse_size("2GB") == 2 * 10**9
    assert parse_size("1.5KiB") == 1536
    assert parse_size("100") == 100 and parse_size("10B") == 10
    assert parse_size("") is None and parse_size(None) is None
    for bad in ("2 parsecs", "-1GiB", "GiB", "0"):
        with pytest.raises(ConfigError):
            parse_size(bad)


def test_classify():
    assert classify(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB")) == ("oom", "cuda")
    assert classify(RuntimeError("CUDA error: out of memory")) == ("oom", "cuda")
    assert classify(RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate "
                                 "memory: you tried to allocate 8 bytes")) == ("oom", "cpu")
    assert classify(MemoryError()) == ("oom", "cpu")
    assert classify(RuntimeError("NCCL error: unhandled cuda error, NCCL version 2.x: out of memory")) == ("oom", "nccl")
    assert classify(RuntimeError("bitsandbytes: not enough memory for paged optimizer")) == ("oom", "bnb")
    assert classify(ValueError("shape mismatch")) == ("error", None)
    assert classify(DataError("x.jsonl:3: bad")) == ("error", None)
    wrapped = RuntimeError("while training")
    wrapped.__cause__ = MemoryError()
    assert classify(wrapped) == ("oom", "cpu")
    assert one_line(RuntimeError("first\nsecond")) == "RuntimeError: first"
    assert len(one_line(RuntimeError("x" * 2000))) == 500


def test_records_detect_and_validate(tmp_path):
    inst = _write_instruction(tmp_path / "i.jsonl", 3)
    recs = load_records(inst, "auto")
    assert [r["format"] for r in recs] == ["instruction"] * 3 and recs[1]["input"] == "numbers 1"
    chat = tmp_path / "c.json"
    chat.write_text(json.dumps([{"messages": [{"role": "user", "content": "hi"},
                                              {"role": "assistant", "content": "yo"}]}] * 2, indent=1))
    recs = load_records(chat, "auto")
    assert [r["format"] for r in recs] == ["chat", "chat"] and recs[1]["line"] > recs[0]["line"] > 1

    def err(text, name="d.jsonl", fmt="auto"):
        p = tmp_path / name
        p.write_text(text)
        with pytest.raises(DataError) as ei:
            load_records(p, fmt)
        msg = str(ei.value)
        assert "\n" not in msg and str(p) in msg
        return msg

    assert "empty" in err("")
    assert ":2: malformed JSON" in err('{"instruction": "a", "output": "b"}\n{"instruction": \n')
    assert ":3:" in err('{"instruction": "a", "output": "b"}\n\n{"instruction": "a"}\n') and "'output'" in \
        err('{"instruction": "a", "output": "b"}\n\n{"instruction": "a"}\n')
    assert ":1: cannot detect" in err('{"text": "a"}\n')
    assert "messages[0]" in err('{"messages": [{"role": "assistant"}]}\n')
    assert ":3:" in err('[\n {"instruction": "a", "output": "b"},\n {"instruction": 5, "output": "b"}\n]', "d.json")
    assert "not found" in str(pytest.raises(DataError, load_records, tmp_path / "nope.jsonl", "auto").value)
    assert "unsupported" in err("x", "d.csv")


# ---------------------------------------------------------------- in-process (torch)


def test_tokenize_and_collate():
    import torch

    from fttui.worker.data import Collator, tokenize_record
    from fttui.worker.tokenizer import ByteTokenizer

    tok = ByteTokenizer()
    assert tok.decode(tok.encode("héllo")) == "héllo" and min(tok.encode("\x00")) == 4
    item = tokenize_record({"format": "instruction", "instruction": "Say hi", "input": "", "output": "hi"}, tok, 512)
    ids, labels = item["input_ids"], item["labels"]
    prompt = "### Instruction:\nSay hi\n\n### Response:\n"
    assert ids[0] == tok.bos_token_id and tok.decode(ids[1:1 + len(prompt.encode())]) == prompt
    trained = [i for i, lab in zip(ids, labels) if lab != -100]
    assert trained == tok.encode("hi") + [tok.eos_token_id]
    chat = tokenize_record({"format": "chat", "messages": [{"role": "user", "content": "q"},
                                                           {"role": "assistant", "content": "a"}]}, tok, 512)
    assert [i for i, lab in zip(chat["input_ids"], chat["labels"]) if lab != -100] == tok.encode("a") + [2]
    assert len(tokenize_record({"format": "instruction", "instruction": "x" * 100, "input": "", "output": "y"},
                               tok, 16)["input_ids"]) == 16
    batch = Collator(0, 64)([{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}, {"input_ids": [5], "labels": [5]}])
    assert batch["input_ids"].tolist() == [[5, 6, 7], [5, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 6, 7], [5, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert Collator(0, 8, pad_to_max=True)([{"input_ids": [5], "labels": [5]}])["input_ids"].shape == torch.Size([1, 8])


def test_lora_emb_trains_embeddings():
    from fttui.worker.model import build_model

    model, info = build_model(profile_of(make_profile(method="lora-emb")))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any("embed_tokens" in n for n in trainable) and any("lm_head" in n for n in trainable)
    v, h = TINY_ARCH["vocab_size"], TINY_ARCH["hidden_size"]
    assert info["params_trainable"] == _lora_expected(TINY_ARCH, 8, ["q_proj", "v_proj"]) + 2 * v * h


def test_lora_all_linear_count():
    from fttui.worker.model import build_model

    _, info = build_model(profile_of(make_profile(**{"lora.target_modules": "all-linear", "lora.r": 4})))
    every = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert info["params_trainable"] == _lora_expected(TINY_ARCH, 4, every)  # lm_head excluded by peft


def test_quantized_bases():
    import bitsandbytes as bnb

    from fttui.worker.model import build_model

    full_total = build_model(profile_of(make_profile(method="full")))[1]["params_total"]
    lora_n = _lora_expected(TINY_ARCH, 8, ["q_proj", "v_proj"])
    model, info = build_model(profile_of(make_profile(method="qlora")))
    attn = model.base_model.model.model.layers[0].self_attn
    assert isinstance(attn.q_proj.base_layer, bnb.nn.Linear4bit) and isinstance(attn.k_proj, bnb.nn.Linear4bit)
    assert info["params_total"] == full_total + lora_n and info["params_trainable"] == lora_n  # real, unpacked count
    model, info = build_model(profile_of(make_profile(method="lora-int8")))
    attn = model.base_model.model.model.layers[0].self_attn
    assert isinstance(attn.v_proj.base_layer, bnb.nn.Linear8bitLt)
    assert info["params_total"] == full_total + lora_n and info["params_trainable"] == lora_n


def test_kbit_prepare_peft_or_none():
    """quant.prepare: "peft" casts the weights that are not quantised to fp32 (peft's
    prepare_model_for_kbit_training); "none" leaves them in the compute dtype."""
    import torch

    from fttui.worker.model import build_model

    for prepare, want in (("peft", torch.float32), ("none", torch.bfloat16)):
        prof = make_profile(method="qlora", **{"train.precision": "bf16"})
        prof["quant"] = {**(prof.get("quant") or {}), "prepare": prepare}
        model, _info = build_model(profile_of(prof))
        base = model.base_model.model
        assert base.get_input_embeddings().weight.dtype == want, prepare
        assert base.model.norm.weight.dtype == want, prepare
        assert base.lm_head.weight.dtype == want, prepare


def test_pretrained_local_dir(tmp_path):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from fttui.worker.model import build_model

    torch.manual_seed(0)
    ref = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **TINY_ARCH))
    ref.save_pretrained(tmp_path / "m")
    prof = make_profile(method="full")
    prof["model"].update(init="pretrained", name_or_path=str(tmp_path / "m"), arch=None, arch_config={})
    model, info = build_model(profile_of(prof))
    assert info["params_total"] == info["params_trainable"] == sum(p.numel() for p in ref.parameters())
    assert torch.equal(model.model.embed_tokens.weight, ref.model.embed_tokens.weight)


def test_deepspeed_config():
    from fttui.worker.model import deepspeed_config

    cfg = deepspeed_config(profile_of(make_profile(**{"method": "full-zero3-offload", "train.batch_size": 2,
                                                      "train.grad_accum": 3, "train.precision": "bf16"})), 4)
    assert cfg["train_batch_size"] == 24 and cfg["train_micro_batch_size_per_gpu"] == 2
    assert cfg["gradient_accumulation_steps"] == 3 and cfg["bf16"]["enabled"] and not cfg["fp16"]["enabled"]
    z = cfg["zero_optimization"]
    assert z["stage"] == 3 and z["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert z["offload_param"]["device"] == "cpu"


# ---------------------------------------------------------------- subprocess runs


def test_full_instruction_run(tmp_path):
    data = _write_instruction(tmp_path / "inst.jsonl", 16)
    prof = make_profile(**{"method": "full", "data.source": str(data), "data.name": "inst", "data.num_samples": 0,
                           "data.max_seq_len": 128, "train.batch_size": 4})
    rd = write_run_dir(tmp_path, prof)
    res = run_worker(rd)
    assert res.returncode == 0, res.stderr[-3000:]
    start, steps = _check_stream(read_events(rd), batch=4, steps=4)
    assert start["params_total"] == start["params_trainable"]
    assert start["num_samples"] == 16 and start["max_seq_len"] == 128
    assert any(e["tokens"] < e["tokens_padded"] for e in steps)  # variable lengths are padded
    assert "model built" in res.stdout and "dataset: inst, 16 samples" in res.stdout


def test_lora_synthetic_run(tmp_path):
    """Also the start event's precision: the one that runs (bf16 here, the profile's fp32 default
    would say nothing)."""
    prof = make_profile(**{"method": "lora", "data.num_samples": 16, "data.max_seq_len": 32,
                           "train.batch_size": 2, "train.grad_accum": 2, "train.precision": "bf16",
                           "lora.target_modules": ["q_proj", "v_proj", "down_proj"]})
    rd = write_run_dir(tmp_path, prof)
    res = run_worker(rd)
    assert res.returncode == 0, res.stderr[-3000:]
    start, steps = _check_stream(read_events(rd), batch=4, steps=4, micro=2)
    assert start["params_trainable"] == _lora_expected(TINY_ARCH, 8, ["q_proj", "v_proj", "down_proj"])
    assert all(e["tokens"] == e["tokens_padded"] == e["samples"] * 32 for e in steps)
    assert all(e["tokens_padded_x_len"] == e["tokens_padded"] * 32 for e in steps)
    assert start["grad_accum"] == 2
    assert start["precision"] == "bf16"


def test_host_memory_limit_oom(tmp_path):
    big = dict(TINY_ARCH, hidden_size=512, intermediate_size=1376, num_hidden_layers=8, num_attention_heads=8,
               num_key_value_heads=8, vocab_size=32000)
    prof = make_profile(**{"method": "full", "model.arch_config": big, "limits.host_memory": "64MiB"})
    rd = write_run_dir(tmp_path, prof)
    res = run_worker(rd)
    assert res.returncode == 3, res.stderr[-3000:]
    err = [e for e in read_events(rd) if e["event"] == "error"]
    assert len(err) == 1 and err[0]["kind"] == "oom" and err[0]["oom_kind"] == "cpu"
    assert err[0]["step"] == 0 and "\n" not in err[0]["message"] and 0 < len(err[0]["traceback"]) <= 20
    # before training: the phase is the worker's last startup phase (issue 44)
    assert (err[0]["phase"], err[0]["phase_step"]) == ("loading-model", None)


def test_malformed_data_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instruction": "a", "output": "b"}\n{"instruction": "a", "output": "b"}\n{"instruction": oops}\n')
    rd = write_run_dir(tmp_path, make_profile(**{"data.source": str(bad)}))
    res = run_worker(rd)
    assert res.returncode == 2
    (err,) = read_events(rd)
    assert err["event"] == "error" and err["kind"] == "error" and err["oom_kind"] is None
    assert err["phase"] is None  # no phase announced before the data was read
    assert err["message"].startswith(f"{bad}:3: malformed JSON")
    assert res.stderr.strip().splitlines()[-1] == f"error: {err['message']}"


def test_fp16_on_cpu_is_a_clear_error(tmp_path):
    rd = write_run_dir(tmp_path, make_profile(**{"train.precision": "fp16"}))
    res = run_worker(rd)
    assert res.returncode == 2
    (err,) = read_events(rd)
    assert err["message"] == "train.precision: fp16 needs a CUDA GPU; use bf16 or fp32 on CPU"


@pytest.mark.multiprocess
def test_zero3_without_deepspeed_launcher_is_a_clear_error(tmp_path):
    rd = write_run_dir(tmp_path, make_profile(method="full-zero3-offload"))
    res = run_worker(rd)
    assert res.returncode == 2
    (err,) = read_events(rd)
    assert "deepspeed launcher" in err["message"]


@pytest.mark.multiprocess
@pytest.mark.skipif(not os.environ.get("FTTUI_TEST_DEEPSPEED"),
                    reason="set FTTUI_TEST_DEEPSPEED=1 (first run JIT-builds DeepSpeed CPU ops, ~90 s)")
def test_zero3_offload_under_deepspeed_launcher(tmp_path):
    rd = write_run_dir(tmp_path, make_profile(**{"method": "full-zero3-offload", "train.max_steps": 2}))
    cmd = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "1",
           "--master_port", str(free_port()), "--module", "fttui.worker.train", "--run-dir", str(rd)]
    res = subprocess.run(cmd, cwd=str(REPO), env=worker_env(), capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    start, _ = _check_stream(read_events(rd), batch=2, steps=2, floor=False)
    assert start["params_total"] == start["params_trainable"] > 0  # ZeRO-3 partitions: counted via ds_numel
