"""A GPTQ or AWQ checkpoint made by hand from a random Llama (issue 22): round-to-nearest 4-bit
codes packed in GPTQ's own layout (format ``gptq``, symmetric, no act order) or AWQ's GEMM one
(asymmetric, a zero point per group), what a calibrated GPTQ / AWQ run writes without the
calibration (AWQ's activation-aware scaling is folded into the weights it writes, so the layout is
the same). Used by tests/worker/test_prequant.py (a tiny model on the
CPU) and bench/gptq_gpu.py (a 1B model drawn on the card). Imports torch: worker-side tests and
bench scripts only."""

from __future__ import annotations

import json
from pathlib import Path

LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def _pack(codes, dim: int):
    """Eight 4-bit codes per int32 along ``dim`` (0: rows, 1: columns), the lowest first."""
    import torch

    c = codes.to(torch.int64)
    c = c.reshape(c.shape[0] // 8, 8, -1) if dim == 0 else c.reshape(c.shape[0], -1, 8).transpose(1, 2)
    shifts = (torch.arange(8, dtype=torch.int64, device=c.device) * 4).reshape(1, 8, 1)
    packed = (c << shifts).sum(dim=1)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


def gptq_linear(w, group: int):
    """GPTQ tensors of an ``nn.Linear`` weight ``w`` (out x in), and the weight they dequantise to."""
    import torch

    out_f, in_f = w.shape
    groups = w.t().float().reshape(in_f // group, group, out_f)  # GPTQ packs along the input
    scales = (groups.abs().amax(dim=1) / 7).clamp(min=1e-6)  # groups x out
    codes = (torch.round(groups / scales[:, None, :]) + 8).clamp(0, 15)
    deq = ((codes - 8) * scales[:, None, :]).reshape(in_f, out_f).t()
    zeros = torch.full((in_f // group, out_f), 8 - 1, device=w.device)  # format gptq (v1): zero - 1
    return {"qweight": _pack(codes.reshape(in_f, out_f), 0), "qzeros": _pack(zeros, 1),
            "scales": scales.to(torch.float16),
            "g_idx": torch.arange(in_f, dtype=torch.int32, device=w.device) // group}, deq


#: AWQ's GEMM packing puts the eight 4-bit codes of a word in this order of output columns
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def awq_linear(w, group: int):
    """AWQ GEMM tensors of an ``nn.Linear`` weight ``w`` (out x in): ``qweight`` (in x out/8) and
    ``qzeros`` (in/group x out/8) packed along the output in :data:`AWQ_ORDER`, ``scales``
    (in/group x out, fp16); the weight is ``(code - zero) x scale``. Returns them and that weight."""
    import torch

    out_f, in_f = w.shape
    groups = w.t().float().reshape(in_f // group, group, out_f)
    lo, hi = groups.amin(dim=1), groups.amax(dim=1)  # groups x out
    scales = ((hi - lo) / 15).clamp(min=1e-6).to(torch.float16).float()
    zeros = torch.round(-lo / scales).clamp(0, 15)
    codes = (torch.round(groups / scales[:, None, :]) + zeros[:, None, :]).clamp(0, 15)
    deq = ((codes - zeros[:, None, :]) * scales[:, None, :]).reshape(in_f, out_f).t()
    order = torch.tensor(AWQ_ORDER, device=w.device)

    def pack(c):  # rows x out -> rows x out/8, AWQ's column order within each word
        c = c.to(torch.int64).reshape(c.shape[0], -1, 8)[..., order]
        packed = (c << (torch.arange(8, dtype=torch.int64, device=c.device) * 4)).sum(dim=-1)
        return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)

    return {"qweight": pack(codes.reshape(in_f, out_f)), "qzeros": pack(zeros),
            "scales": scales.to(torch.float16)}, deq


def save_gptq_checkpoint(folder: Path, arch: dict, *, group: int = 32, device: str = "cpu", seed: int = 0,
                         keep: bool = False, fmt: str = "gptq") -> dict:
    """A random fp16 Llama of ``arch`` (``LlamaConfig`` keys) saved to ``folder`` as a 4-bit GPTQ
    (``fmt="gptq"``) or AWQ GEMM (``fmt="awq"``) checkpoint; drawn tensor by tensor on ``device``.
    Returns the dequantised weight of each packed linear (module name -> out x in) when ``keep``,
    else {}."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("llama", **arch)
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in AutoModelForCausalLM.from_config(config).state_dict().items()}
    gen = torch.Generator(device=device).manual_seed(seed)
    tensors, deq = {}, {}
    for name, shape in shapes.items():
        if "norm" in name:
            t = torch.ones(shape, dtype=torch.float16, device=device)
        else:
            t = (torch.randn(shape, generator=gen, device=device) * 0.02).to(torch.float16)
        if name.endswith(".weight") and any(f".{lin}." in name for lin in LINEARS):
            packed, d = (awq_linear if fmt == "awq" else gptq_linear)(t, group)
            if keep:
                deq[name[:-len(".weight")]] = d.cpu()
            tensors |= {name[:-len("weight")] + k: v.contiguous().cpu() for k, v in packed.items()}
        else:
            tensors[name] = t.contiguous().cpu()
    folder.mkdir(parents=True, exist_ok=True)
    if config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    quant = ({"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True, "version": "gemm"}
             if fmt == "awq" else
             {"quant_method": "gptq", "bits": 4, "group_size": group, "desc_act": False, "sym": True,
              "checkpoint_format": "gptq", "lm_head": False})
    cfg = config.to_dict() | {"torch_dtype": "float16", "quantization_config": quant}
    (folder / "config.json").write_text(json.dumps(cfg))
    return deq
