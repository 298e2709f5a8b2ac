"""What autograd keeps of one decoder layer, per token: the activation model of the estimator.

Pure Python (no torch). :func:`layer_act_per_token` counts the tensors HF's Llama-style decoder
layer (transformers 5) saves for the backward under the dtypes of :class:`LayerDtypes`;
:func:`attn_elem_bytes` the bytes per element of eager attention's matrix. Checked tensor by
tensor on CPU (``fttui/worker/memtrace.py``, ``bench/estimate_tensors.py``); the phases that
combine them into a peak are in :mod:`fttui.core.memory.estimate`; the derivation is in
docs/estimate.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from fttui.core.models.numbers import ArchNumbers

__all__ = ["LayerDtypes", "attn_elem_bytes", "eager_attention", "layer_act_per_token"]


_GROUPS = {  # which input a linear layer reads, by name (native and original namings)
    "q_proj": "attn_in", "k_proj": "attn_in", "v_proj": "attn_in", "W_pack": "attn_in",
    "query_key_value": "attn_in", "c_attn": "attn_in",
    "o_proj": "attn_out", "dense": "attn_out",
    "gate_proj": "mlp_in", "up_proj": "mlp_in", "dense_h_to_4h": "mlp_in", "w1": "mlp_in",
    "w2": "mlp_in",
    "down_proj": "mlp_mid", "dense_4h_to_h": "mlp_mid",
}


def _group(name: str, fin: int, a: ArchNumbers) -> str:
    if name == "c_proj":  # Qwen v1: attention and MLP output layers share the name
        return "attn_out" if fin == a.q_dim else "mlp_mid"
    return _GROUPS.get(name, "attn_in")


@dataclass(frozen=True)
class LayerDtypes:
    """Byte sizes that decide what one decoder layer keeps for the backward.

    ``ab``: compute dtype (2 under fp16/bf16 autocast or half weights); ``wb``: dtype of the
    non-quantised weights (norms: 4 when fp32 masters, fp32 runs or after
    ``prepare_model_for_kbit_training``); ``lin_out``: dtype of a base linear layer's output
    (bitsandbytes layers return their input's dtype); ``mask``: bytes per element of a dropout
    mask (CUDA's fused dropout keeps a bool mask; the CPU kernel a mask in the input dtype,
    fp32 after peft's cast to the adapter dtype); ``full``: the base linear layers and norms
    train."""
    ab: int
    wb: int
    lin_out: int
    mask: int
    full: bool

    @property
    def autocast(self) -> bool:
        return self.ab < self.wb


def layer_act_per_token(a: ArchNumbers, dt: LayerDtypes, lora: list[tuple[str, int, int]],
                         r: int, dropout: float, eager: bool,
                         linears: list[tuple[str, int, int]]) -> float:
    """Bytes autograd keeps per token for one decoder layer (eager attention matrix excluded).

    A count of the tensors HF's Llama-style decoder layer saves for the backward (transformers
    5, PyTorch 2.x autograd), checked tensor by tensor on CPU against a live-storage tracker
    (docs/estimate.md): RMSNorm keeps its fp32 input (the residual itself when it is fp32, else
    the upcast copy) and ``rsqrt``, plus the normalised tensor when its weight trains; a linear
    layer keeps its input only when its weight trains (a frozen one needs only the weight for
    the input gradient), under autocast as a half copy per layer (autocast caches only weight
    casts); SDPA keeps q, k, v, its output and the log-sum-exp; eager attention q, k and v
    repeated to all heads, the output, and the matrix (counted apart); SwiGLU keeps gate, up and
    act(gate) (+ the product when ``down_proj`` trains); LoRA keeps per adapted layer the
    dropout mask and the adapter's input (the half copy under autocast, the fp32 dropout output
    without; with dropout 0 and no autocast the input itself, shared) and ``lora_A``'s output.
    """
    h, q, kv, i = a.hidden, a.q_dim, a.kv_dim, a.inter
    ab = dt.ab
    if a.model_type == "bloom":
        # Korthikanti et al. 2022, eq. (1) without the 5as/h term, scaled to the dtype
        base = 34 * h * ab / 2
        extra = 0.0
        for _name, fin, _fout in lora:
            extra += fin * (dt.mask + ab) if dropout > 0 else 0
            extra += r * ab
        return base + extra
    # the dtypes of the four inputs of the layer's linear layers
    norm_out = dt.wb  # weight * x.to(input dtype): the weights' dtype
    attn_o = ab
    mlp_mid = dt.lin_out
    in_bytes = {"attn_in": norm_out, "attn_out": attn_o, "mlp_in": norm_out, "mlp_mid": mlp_mid}
    dims = {"attn_in": h, "attn_out": q, "mlp_in": h, "mlp_mid": i}
    total = 0.0
    # two RMSNorms: fp32 input + rsqrt; the normalised tensor (weights' dtype) when they train
    total += 2 * (4 * h + 4)
    if dt.full:
        total += 2 * dt.wb * h
    # inputs kept by the linear layers that read them
    shared: set[str] = set()
    if dt.full:
        for name, fin, _fout in linears:
            g = _group(name, fin, a)
            if dt.autocast and in_bytes[g] > ab:
                total += ab * fin  # each layer casts its own half copy
            else:
                shared.add(g)
    for name, fin, _fout in lora:
        g = _group(name, fin, a)
        if dropout > 0:
            total += fin * (dt.mask + ab)  # mask + the adapter's input
        elif ab < 4:
            total += ab * fin  # the fp32 cast peft makes, cast back by autocast: one per layer
        else:
            shared.add(g)
        total += r * ab  # lora_A output, kept by lora_B
    # attention core
    if eager:
        total += 3 * q * ab  # q, and k and v repeated to all heads
    else:
        total += ab * (2 * q + 2 * kv) + 4 * a.heads  # q, k, v, output; fp32 log-sum-exp
        shared.discard("attn_out")  # o_proj reads SDPA's output, already kept
    total += sum(in_bytes[g] * dims[g] for g in shared)
    # SwiGLU: gate and up outputs, act(gate)
    total += 3 * dt.lin_out * i
    return total


def attn_elem_bytes(ab: int) -> int:
    """Bytes per attention-matrix element kept by eager attention (softmax in fp32 + the cast
    copy kept for the matmul with V; fp32: one tensor)."""
    return 4 if ab == 4 else 4 + ab


def eager_attention(a: ArchNumbers, attn: str) -> bool:
    return a.model_type == "bloom" or attn == "eager"  # transformers' BLOOM has eager only
