"""A GPTQ checkpoint trained as stored (issue 22): LoRA beside the frozen int4 weights, through
transformers' GPTQ loader and GPT-QModel's torch kernel on the CPU.

The checkpoint is made here, by hand, from a random tiny Llama: round-to-nearest 4-bit codes
packed in GPTQ's own layout (what a calibrated GPTQ run writes, without the calibration), so the
test needs no quantiser run. Its loaded layers are checked against the weights they were packed
from (the layout read back by the kernel package), then the worker trains it; the estimate's
weight bytes are compared with what the worker's model holds. Skipped, saying so, when
fttui[gptq] (gptqmodel, optimum) is not installed: it is not in [dev] (pyproject.toml says why).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from .conftest import TINY_ARCH, make_profile, read_events, run_worker, write_run_dir

_MISSING = [p for p in ("gptqmodel", "optimum") if importlib.util.find_spec(p) is None]
pytestmark = pytest.mark.skipif(bool(_MISSING), reason=(
    f"fttui[gptq] not installed ({', '.join(_MISSING)} missing): a GPTQ checkpoint's LoRA run is NOT "
    "tested here (pip install 'fttui[gptq]' to run it)"))

GROUP = 32
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def _pack(codes, dim: int):
    """Eight 4-bit codes per int32 along ``dim`` (0: rows, 1: columns), the lowest first."""
    import torch

    c = codes.to(torch.int64)
    c = c.reshape(c.shape[0] // 8, 8, -1) if dim == 0 else c.reshape(c.shape[0], -1, 8).transpose(1, 2)
    shifts = (torch.arange(8, dtype=torch.int64) * 4).reshape(1, 8, 1)
    packed = (c << shifts).sum(dim=1)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


def _gptq_linear(w):
    """GPTQ (format ``gptq``, symmetric) tensors of an ``nn.Linear`` weight ``w`` (out x in), and
    the weight they dequantise to."""
    import torch

    out_f, in_f = w.shape
    wt = w.t().float()  # in x out: GPTQ packs along the input dimension
    groups = wt.reshape(in_f // GROUP, GROUP, out_f)
    scales = (groups.abs().amax(dim=1) / 7).clamp(min=1e-6)  # groups x out
    codes = (torch.round(groups / scales[:, None, :]) + 8).clamp(0, 15)
    deq = ((codes - 8) * scales[:, None, :]).reshape(in_f, out_f).t()
    zeros = torch.full((in_f // GROUP, out_f), 8 - 1)  # the gptq (v1) format stores zero - 1
    return {"qweight": _pack(codes.reshape(in_f, out_f), 0), "qzeros": _pack(zeros, 1),
            "scales": scales.to(torch.float16), "g_idx": torch.arange(in_f, dtype=torch.int32) // GROUP}, deq


@pytest.fixture(scope="module")
def gptq_checkpoint(tmp_path_factory) -> tuple[Path, dict]:
    """A tiny random Llama saved as a 4-bit GPTQ checkpoint; with the dequantised weights."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = tmp_path_factory.mktemp("gptq") / "tiny-gptq"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **TINY_ARCH), dtype=torch.float16)
    tensors, deq = {}, {}
    for name, t in model.state_dict().items():
        if name.endswith(".weight") and any(f".{lin}." in name for lin in LINEARS):
            packed, deq[name[:-len(".weight")]] = _gptq_linear(t)
            tensors |= {name[:-len("weight")] + k: v.contiguous() for k, v in packed.items()}
        else:
            tensors[name] = t.contiguous()
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict() | {"quantization_config": {
        "quant_method": "gptq", "bits": 4, "group_size": GROUP, "desc_act": False, "sym": True,
        "checkpoint_format": "gptq", "lm_head": False}}
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder, deq


def test_the_packed_checkpoint_reads_back_as_the_weights_it_was_made_from(gptq_checkpoint):
    import torch
    from transformers import AutoModelForCausalLM

    folder, deq = gptq_checkpoint
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.bfloat16, device_map="cpu")
    x = torch.randn(3, TINY_ARCH["intermediate_size"], dtype=torch.bfloat16)
    for name, w in deq.items():
        mod = model.get_submodule(name)
        assert type(mod).__module__.startswith("gptqmodel."), type(mod)
        xi = x[:, :w.shape[1]]
        got = mod(xi).float()
        want = xi.float() @ w.float().t()
        assert torch.allclose(got, want, atol=0.05 * want.abs().max().item()), name


def test_lora_trains_a_gptq_checkpoint_and_the_estimate_counts_its_int4_weights(gptq_checkpoint, tmp_path):
    import torch
    from safetensors.torch import load_file

    from fttui.core.memory import estimate
    from fttui.core.profiles.stored import as_profile

    folder, _deq = gptq_checkpoint
    prof = make_profile(**{"method": "lora", "train.precision": "bf16", "data.num_samples": 8,
                           "train.batch_size": 2, "lora.target_modules": ["q_proj", "v_proj", "down_proj"]})
    # as a profile naming the folder resolves it (model.config: its config.json)
    prof["model"].update(init="pretrained", name_or_path=str(folder), arch=None, arch_config={},
                         config=str(folder / "config.json"))
    prof["train"].update(save="end", output_dir=None)
    rd = write_run_dir(tmp_path, prof)
    res = run_worker(rd, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    events = read_events(rd)
    start = events[0]
    steps = [e for e in events if e["event"] == "step"]
    assert [e["step"] for e in steps] == [1, 2, 3, 4] and all(e["loss"] == e["loss"] for e in steps)
    q = start["structure"]["quant"]
    assert q["bits"] == 4 and q["group_size"] == GROUP and q["packed_linears"] == 7 * TINY_ARCH["num_hidden_layers"]
    assert start["structure"]["modules"]["lora.GPTQLoraLinear"] == 3 * TINY_ARCH["num_hidden_layers"]
    est = estimate(as_profile(prof).with_settings({"devices.gpus": 1}))
    assert est.to_dict()["inputs"]["quant"] == {"type": "gptq", "bits": 4, "group_size": GROUP, "format": "gptq"}
    # the estimate's weights: the packed linears + scales / zeros / g_idx + the bf16 rest, against
    # the bytes of the worker's model (its few small kernel buffers and the rotary table aside)
    held = q["packed_bytes"] + q["other_bytes"]
    assert abs(est.breakdown["weights"] - held) <= 0.02 * held, (est.breakdown["weights"], q)
    assert start["params_total"] == est.to_dict()["inputs"]["params"] + est.to_dict()["inputs"]["lora_params"]
    assert start["params_trainable"] == est.to_dict()["inputs"]["lora_params"]
    adapters = load_file(str(rd / "output" / "adapter_model.safetensors"))
    lora_b = [v for k, v in adapters.items() if "lora_B" in k]
    assert lora_b and any(torch.count_nonzero(v) for v in lora_b)  # B starts at zero: it trained
