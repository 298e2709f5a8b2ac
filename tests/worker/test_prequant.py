"""GPTQ and AWQ (GEMM) checkpoints trained as stored (issue 22): LoRA beside the frozen int4
weights, through transformers' GPTQ / AWQ loaders and GPT-QModel's torch kernels on the CPU.

The checkpoints are made here, by hand, from a random tiny Llama (:mod:`.gptq_pack`:
round-to-nearest 4-bit codes packed in GPTQ's or AWQ's own layout, what a calibrated run writes
without the calibration), so the test needs no quantiser run. Its loaded layers are checked against the weights they were packed
from (the layout read back by the kernel package), then the worker trains it; the estimate's
weight bytes are compared with what the worker's model holds. Skipped, saying so, when
fttui[gptq] (gptqmodel, optimum) is not installed: it is not in [dev] (pyproject.toml says why).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.helpers import profile_of

from .conftest import TINY_ARCH, make_profile, read_events, run_worker, write_run_dir
from .gptq_pack import save_gptq_checkpoint

_MISSING = [p for p in ("gptqmodel", "optimum") if importlib.util.find_spec(p) is None]
pytestmark = pytest.mark.skipif(bool(_MISSING), reason=(
    f"fttui[gptq] not installed ({', '.join(_MISSING)} missing): a GPTQ checkpoint's LoRA run is NOT "
    "tested here (pip install 'fttui[gptq]' to run it)"))

GROUP = 32


#: per stored format: the estimate's quant inputs and the peft layer class that wraps its linears
FORMATS = {"gptq": ({"type": "gptq", "bits": 4, "group_size": GROUP, "format": "gptq"}, "lora.GPTQLoraLinear"),
           "awq": ({"type": "awq", "bits": 4, "group_size": GROUP, "format": "gemm"}, "lora.AwqLoraLinear")}


@pytest.fixture(scope="module", params=sorted(FORMATS))
def gptq_checkpoint(request, tmp_path_factory) -> tuple[Path, dict, str]:
    """A tiny random Llama saved as a 4-bit GPTQ or AWQ checkpoint; with the dequantised weights."""
    folder = tmp_path_factory.mktemp(request.param) / f"tiny-{request.param}"
    return folder, save_gptq_checkpoint(folder, TINY_ARCH, group=GROUP, keep=True, fmt=request.param), request.param


def test_the_packed_checkpoint_reads_back_as_the_weights_it_was_made_from(gptq_checkpoint):
    import torch
    from transformers import AutoModelForCausalLM

    folder, deq, _fmt = gptq_checkpoint
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.bfloat16, device_map="cpu")
    x = torch.randn(3, TINY_ARCH["intermediate_size"], dtype=torch.bfloat16)
    for name, w in deq.items():
        mod = model.get_submodule(name)
        assert type(mod).__module__.startswith("gptqmodel."), type(mod)
        xi = x[:, :w.shape[1]].contiguous()  # the int4 CPU kernel takes contiguous inputs only
        got = mod(xi).float()
        want = xi.float() @ w.float().t()
        assert torch.allclose(got, want, atol=0.05 * want.abs().max().item()), name


def test_lora_trains_a_prequantized_checkpoint_and_the_estimate_counts_its_int4_weights(gptq_checkpoint, tmp_path):
    import torch
    from safetensors.torch import load_file

    from fttui.core.memory import estimate
    
    folder, _deq, fmt = gptq_checkpoint
    quant_inputs, lora_class = FORMATS[fmt]
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
    assert start["structure"]["modules"][lora_class] == 3 * TINY_ARCH["num_hidden_layers"]
    est = estimate(profile_of(prof).with_settings({"devices.gpus": 1}))
    assert est.to_dict()["inputs"]["quant"] == quant_inputs
    # the estimate's weights: the packed linears + scales / zeros / g_idx + the bf16 rest, against
    # the bytes of the worker's model (its few small kernel buffers and the rotary table aside)
    held = q["packed_bytes"] + q["other_bytes"]
    assert abs(est.breakdown["weights"] - held) <= 0.02 * held, (est.breakdown["weights"], q)
    assert start["params_total"] == est.to_dict()["inputs"]["params"] + est.to_dict()["inputs"]["lora_params"]
    assert start["params_trainable"] == est.to_dict()["inputs"]["lora_params"]
    adapters = load_file(str(rd / "output" / "adapter_model.safetensors"))
    lora_b = [v for k, v in adapters.items() if "lora_B" in k]
    assert lora_b and any(torch.count_nonzero(v) for v in lora_b)  # B starts at zero: it trained
