"""The static per-card terms: weights, gradients, optimizer states, LoRA and quantisation buffers.

Owns what a card holds for the whole run, whatever the batch: the weights by storage dtype
(fp32 / fp16 / bf16, int8, NF4/FP4), the gradients and optimizer states of trainable full-model
parameters, the LoRA parameters with their gradients and states, the bitsandbytes constants
and one dequantised matrix, and Baichuan2's NormHead copy. :func:`trainable_states` fills the per-card breakdown of an
unsharded run (sharded runs: :mod:`fttui.core.memory.sharding`, which reuses the terms here);
the sources of each figure are in docs/estimate.md.
"""

from __future__ import annotations

from fttui.core.memory.inputs import DTYPE_BYTES, Setup
from fttui.core.memory.linears import _native_linears
from fttui.core.models.prequant import CheckpointQuant
from fttui.core.profiles.typed import QuantSettings

__all__ = ["norm_head", "trainable_states"]


def _optimizer_bytes_per_param(optimizer: str, param_bytes: int) -> tuple[float, str]:
    """Optimizer state bytes per trainable parameter (PyTorch/bitsandbytes storage sizes)."""
    o = (optimizer or "adamw_torch").lower()
    if "8bit" in o:
        return 2.0, "two 8-bit states (bitsandbytes blockwise, + ~1/2048 B of absmax)"
    if o.startswith("sgd"):
        return 0.0, "SGD without momentum keeps no state"
    if o.startswith("adafactor"):
        return 0.0, "Adafactor keeps factored row/column states (negligible)"
    if "32bit" in o or o.startswith("paged"):
        return 8.0, "two fp32 states (bitsandbytes 32-bit)"
    return 2.0 * param_bytes, "two states in the parameter dtype (torch AdamW)"


def _quant_bytes(n: int, bits: int, quant: QuantSettings) -> tuple[float, float]:
    """(weight bytes, constant bytes) of ``n`` parameters quantised to ``bits`` bits
    (bitsandbytes storage)."""
    if bits == 8:
        return float(n), 0.0  # row scales are added per output row by the caller
    # 4-bit: two values per byte; one fp32 absmax per block of 64; double quantisation stores
    # the absmax as 8-bit with one fp32 scale per 256 blocks (QLoRA paper: 0.127 bit/param).
    consts = n / 64 * 1 + n / (64 * 256) * 4 if quant.double_quant else n / 64 * 4
    return n / 2, consts


def _full(c: Setup, bd: dict[str, float], notes: list[str]) -> None:
    """Full fine-tuning: weights, gradients and optimizer states of every parameter."""
    P, wb, opt = c.a.params, c.wb, c.optimizer
    bd["weights"] = P * wb
    if wb == 4 and c.half:
        # autocast keeps half copies of the matmul weights from forward to backward
        bd["weights"] += c.lin_total * 2 + c.head * 2
        notes.append(
            "fp16/bf16 AMP on fp32 weights: autocast's half copies of the matmul weights counted under weights"
        )
    bd["gradients"] = P * wb
    per, why = _optimizer_bytes_per_param(opt, wb)
    bd["optimizer_states"] = P * per
    notes.append(f"optimizer {opt}: {why}")


def _prequant(c: Setup, q: CheckpointQuant, bd: dict[str, float], notes: list[str]) -> None:
    """A GPTQ / AWQ checkpoint trained as stored (GPT-QModel's torch kernels): the linears'
    packed ints with one fp16 scale and one packed zero per group of input rows per output
    (GPTQ: an int32 group index per input row), the rest in the compute dtype, never upcast.
    The kernel dequantises a linear's weight to the activation dtype for each matmul and
    autograd keeps that copy for the backward: every layer's without gradient checkpointing,
    one layer's (the one recomputed) with it; plus the int32 codes of one linear in flight."""
    a, wb = c.a, c.wb
    bits = q.bits or 4
    per_layer = [(fi, fo) for _n, fi, fo in _native_linears(a)]
    head = [(a.hidden, a.vocab)] if q.lm_head and c.head else []  # a quantised output layer
    head_params = c.head if head else 0

    def consts(fi: int, fo: int) -> float:
        groups = -(-fi // q.group_size) if q.group_size > 0 else 1
        return groups * fo * (2 + bits / 8) + (fi * 4 if q.method == "gptq" else 0)

    qc = a.layers * sum(consts(fi, fo) for fi, fo in per_layer) + sum(consts(fi, fo) for fi, fo in head)
    bd["weights"] = (c.lin_total + head_params) * bits / 8 + qc + (c.other - head_params) * wb
    layer_lin = sum(fi * fo for fi, fo in per_layer)
    kept = layer_lin if c.p.train.gradient_checkpointing else c.lin_total
    largest = max(fi * fo for fi, fo in (*per_layer, *head))
    bd["quantisation"] = kept * wb + largest * (4 + wb)
    notes.append(
        f"{q.method.upper()} {bits}-bit checkpoint (group size {q.group_size}), read from its "
        f"config.json: packed weights, scales and zeros under weights; the dequantised copies the "
        "torch kernel keeps for the backward "
        f"({'one layer, recomputed' if c.p.train.gradient_checkpointing else 'every layer'})"
        " under quantisation"
    )


def _adapters(c: Setup, bd: dict[str, float], notes: list[str]) -> None:
    """LoRA methods: frozen (possibly quantised) weights, the adapters and their states, and the
    trainable embedding copies of ``lora-emb``."""
    a, method, wb, ab = c.a, c.method, c.wb, c.ab
    opt = c.optimizer
    if c.prequant is not None:
        _prequant(c, c.prequant, bd, notes)
    elif method.bits is not None:
        qw, qc = _quant_bytes(c.lin_total, method.bits, c.p.quant)
        if method.bits == 8:
            qc = a.layers * sum(fo for _n, _fi, fo in _native_linears(a)) * 4  # fp32 row scales
        bd["weights"] = qw + c.other * wb
        # constants + one dequantised matrix in the compute dtype (bnb matmul) in flight
        largest_lin = max(fi * fo for _n, fi, fo in _native_linears(a))
        bd["quantisation"] = qc + 2 * largest_lin * ab
        if ab == 2 and wb == 4:
            # prepare_model_for_kbit_training leaves the output layer in fp32: autocast
            # casts it to the half dtype for the matmul and the matmul keeps that copy for
            # its backward (measured on an H100: Qwen-1.8B QLoRA, V*h*2 = 593 MiB)
            bd["weights"] += (c.embed if a.tied else c.head) * 2
            notes.append(
                "k-bit under fp16/bf16 autocast: the half copy of the fp32 output "
                "layer kept for its backward counted under weights"
            )
        if method.bits == 4 and wb == 4:
            # measured tensor by tensor (tests/worker/test_estimate_slope.py): the layer inputs
            # that gradient checkpointing keeps are fp32, twice those of an fp16 model
            notes.append(
                "qlora: bitsandbytes 4-bit after peft's prepare_model_for_kbit_training: "
                "embeddings, norms and output layer in fp32, so an fp32 residual stream "
                "(checkpoints 4 B per element); a GPTQ checkpoint (as in Qwen's Q-LoRA "
                "rows) is not cast and keeps them in fp16: method lora on the GPTQ "
                "checkpoint itself estimates that"
            )
    else:
        bd["weights"] = a.params * wb
    if method.embeddings:
        # modules_to_save: trainable copies of the input embedding and the output layer
        emb_train = c.embed + c.head
        bd["weights"] += emb_train * wb
        bd["gradients"] += emb_train * wb
        per, _why = _optimizer_bytes_per_param(opt, wb)
        bd["optimizer_states"] += emb_train * per
    # peft creates the adapters in fp32 (autocast_adapter_dtype); grads fp32; optimizer
    per, why = _optimizer_bytes_per_param(opt, 4)
    bd["lora"] = c.lora_params * (4 + 4 + per)
    notes.append(f"optimizer {opt}: {why}")


def norm_head(c: Setup, bd: dict[str, float], notes: list[str]) -> float:
    """Baichuan2's NormHead copy: counted under weights, or (ZeRO-3) returned as working set."""
    extra_head = 0.0
    if c.a.arch_name == "baichuan2-7b" and c.p.model.init == "pretrained":
        # NormHead (remote code) normalises the output matrix every training step: one copy in
        # the head's dtype, plus its autocast half copy, kept for the backward
        if c.zero3:
            extra_head = c.embed * DTYPE_BYTES[c.precision]
        else:
            bd["weights"] += c.embed * (c.wb + (2 if (c.half and c.wb == 4) else 0))
        notes.append("Baichuan2 NormHead: a normalised copy of the output matrix per step counted under weights")
    return extra_head


def trainable_states(c: Setup, bd: dict[str, float], notes: list[str]) -> None:
    """Fill the static terms of ``bd`` of an unsharded run (``sharding = "none"``; sharded runs:
    :func:`fttui.core.memory.sharding.sharded_states`)."""
    if c.method.full:
        _full(c, bd, notes)
    else:
        _adapters(c, bd, notes)
