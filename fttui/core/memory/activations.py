"""What autograd keeps per token, and the peak of a training step's activations.

Pure Python (no torch). :func:`layer_act_per_token` counts the tensors HF's Llama-style decoder
layer (transformers 5) saves for the backward under the dtypes of :class:`LayerDtypes`;
:func:`attn_elem_bytes` the bytes per element of eager attention's matrix. Checked tensor by
tensor on CPU (``fttui/worker/memtrace.py``, ``bench/estimate_tensors.py``).
:func:`activation_peak` combines them with the loss and the backward's transient gradients into
the phases of a step (with and without gradient checkpointing) and picks the largest; the
derivation is in docs/estimate.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from fttui.core.memory.inputs import Setup
from fttui.core.memory.linears import _native_linears, _real_linears
from fttui.core.models.numbers import ArchNumbers

__all__ = ["LayerDtypes", "activation_peak", "attn_elem_bytes", "eager_attention", "layer_act_per_token"]


_GROUPS = {  # which input a linear layer reads, by name (native and original namings)
    "q_proj": "attn_in",
    "k_proj": "attn_in",
    "v_proj": "attn_in",
    "W_pack": "attn_in",
    "query_key_value": "attn_in",
    "c_attn": "attn_in",
    "o_proj": "attn_out",
    "dense": "attn_out",
    "gate_proj": "mlp_in",
    "up_proj": "mlp_in",
    "dense_h_to_4h": "mlp_in",
    "w1": "mlp_in",
    "w2": "mlp_in",
    "down_proj": "mlp_mid",
    "dense_4h_to_h": "mlp_mid",
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


def layer_act_per_token(
    a: ArchNumbers,
    dt: LayerDtypes,
    lora: list[tuple[str, int, int]],
    r: int,
    dropout: float,
    eager: bool,
    linears: list[tuple[str, int, int]],
) -> float:
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


def activation_peak(c: Setup, loss_extra: float = 0.0, layer_extra: float = 0.0) -> tuple[float, float, float]:
    """(bytes per token, attention-matrix bytes, extra bytes) of the largest phase of a step.

    The phases: with gradient checkpointing, the loss and its backward (all checkpoints and the
    logits), the backward through one recomputed layer, and that layer's attention backward;
    without it, every layer's saved tensors plus the loss's backward, or plus the last layer's
    MLP gradients, and the last layer's attention backward. ``loss_extra`` / ``layer_extra``:
    what else is live in the loss's phase / in a decoder layer's backward (FSDP's gathered
    units), taken into the choice of the largest phase and returned as its third figure."""
    a, p, method, ab, wb, rb = c.a, c.p, c.method, c.ab, c.wb, c.rb
    V, h, L = a.vocab, a.hidden, a.layers
    b, seq = p.train.batch_size, p.data.max_seq_len
    r, drop = p.lora.r, float(p.lora.dropout)
    eager = eager_attention(a, p.model.attn_implementation)
    dt = LayerDtypes(
        ab=ab,
        wb=wb,
        lin_out=4 if method.quantised and ab == 2 and wb == 4 else ab,
        # the CPU kernel's mask has the adapter's dtype: fp32 (peft), or the half
        # dtype when DeepSpeed cast the whole module
        mask=1 if c.on_gpu else (ab if c.deepspeed else 4),
        full=method.full,
    )
    pretrained = p.model.init == "pretrained"
    linears = (_real_linears(a) if pretrained else None) or _native_linears(a)
    layer_tok = layer_act_per_token(a, dt, c.lora_mods, r, drop, eager, linears)
    # the loss (transformers' ForCausalLMLoss): logits in the compute dtype, an fp32 copy and
    # the fp32 log-softmax in the forward; the backward starts with the log-softmax output, the
    # dense NLL gradient and the log-softmax gradient (fp32 each): 12 bytes per vocabulary
    # entry, the larger of the two phases (the logits themselves are dropped with the outputs
    # before the backward). Plus the final norm (fp32 input) and the output layer's input.
    head_in = (dt.wb + (ab if dt.autocast else 0)) * h if method.trains_embeddings else 0
    logits_peak = 12 * V + 4 * h + head_in
    att_elem = attn_elem_bytes(ab) if eager else 0
    # the backward through a layer's MLP holds three gradients of the intermediate size (of
    # the product, of act(gate) and of up) next to gate, up and act(gate); the product, kept
    # when down_proj trains, is freed by then
    mlp_grads = (2 if dt.full else 3) * dt.lin_out * a.inter if a.model_type != "bloom" else 0
    # eager attention: each layer keeps its matrix (att_elem bytes per element); the backward
    # through it adds the gradient of the probabilities and the softmax gradient (fp32 + half
    # copy, or two fp32) while the layer's MLP tensors are already freed
    elems = b * a.heads * seq * seq if eager else 0
    att_grad = (8 if ab == 4 else 6) if eager else 0
    mlp_saved = (3 + (1 if dt.full else 0)) * dt.lin_out * a.inter if a.model_type != "bloom" else 0
    if p.train.gradient_checkpointing:
        ckpt = L * rb * h
        # phase 1: loss and its backward (all checkpoints + logits); phase 2: backward through
        # one recomputed layer (checkpoints + one layer + its transient gradients; with an fp32
        # residual stream the first norm's input is the checkpoint itself); phase 3: that
        # layer's attention backward
        p2 = ckpt + layer_tok - (4 * h if rb == 4 else 0)
        phases = [
            (ckpt + logits_peak, 0.0, loss_extra),
            (p2 + mlp_grads, elems * att_elem, layer_extra),
            (p2 - mlp_saved, elems * (att_elem + att_grad), layer_extra),
        ]
    else:
        # every layer's saved tensors, plus the loss's backward or the last layer's MLP
        # gradients; or the last layer's attention backward
        phases = [
            (L * layer_tok + logits_peak, L * elems * att_elem, loss_extra),
            (L * layer_tok + mlp_grads, L * elems * att_elem, layer_extra),
            (L * layer_tok - mlp_saved, elems * (L * att_elem + att_grad), layer_extra),
        ]
    tokens = c.tokens
    # ties go to the first phase, as before the extras existed
    return max(phases, key=lambda ph: ph[0] * tokens + ph[1] + ph[2])
