"""Predict peak GPU memory per card and host memory of a run before launching it (pure Python).

``estimate(resolved) -> Estimate`` reads a resolved profile (``fttui.core.profiles.profile``) and the
architecture numbers (``fttui.core.models.archs``) and adds up, per card:

* weights (by storage dtype: fp32 / fp16 / bf16, int8, NF4/FP4),
* gradients and optimizer states of trainable full-model parameters,
* LoRA parameters with their gradients and optimizer states,
* quantisation buffers (bitsandbytes constants, one dequantised matrix),
* activations (a model of what autograd keeps, with and without gradient checkpointing, the
  output layer's logits and the attention matrix of eager attention),
* framework overhead: the CUDA context and the caching allocator's reserved-but-unused memory.

No torch, no weights. The formulas, their sources and where they depart from them are in
docs/estimate.md; the global constants are :data:`CONSTANTS` (fitted to the reference tables
``../shared/reference/*.csv``, see docs/estimate.md for the fit and its leave-one-table-out
check).

Calibration: :func:`calibrate` fits the per-token activation coefficient through measured rows
(``peak_gpu_mem_mb``, or ``peak_host_rss_mb`` on CPU) after subtracting the static terms;
:func:`calibration_from_store` picks the rows of the results store that match a profile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from fttui.core.base.errors import EstimateError
from fttui.core.base.units import GIB, MIB, fmt_bytes
from fttui.core.models.numbers import ArchNumbers, arch_numbers
from fttui.core.memory.activations import LayerDtypes, attn_elem_bytes, eager_attention, layer_act_per_token
from fttui.core.models.archs import ARCHS, resolve_config

__all__ = [
    "CONSTANTS",
    "Calibration",
    "Estimate",
    "EstimateError",
    "GIB",
    "MIB",
    "fmt_bytes",
    "arch_numbers",
    "calibrate",
    "calibration_from_store",
    "estimate",
    "lora_modules",
    "solve_max",
]


#: Global constants (the only fitted numbers; see docs/estimate.md).
CONSTANTS: dict[str, float] = {
    # CUDA context + cuBLAS/cuDNN workspaces + NCCL, per card, counted by NVML "used" but not by
    # torch.cuda.memory_reserved(). Typical published values 300-600 MB; fitted: see the doc.
    "cuda_context_bytes": 800 * MIB,
    # extra reserved memory of the caching allocator (block rounding, fragmentation, cached
    # blocks) as a fraction of the dynamic (per-step) memory: activations and transients.
    "allocator_fraction": 0.2,
    # NCCL communicators and DeepSpeed/DDP communication buffers outside the gradient copy,
    # per card when more than one process trains (world size > 1).
    "comm_bytes": 2048 * MIB,
    # host: python + torch + transformers + peft + a Trainer built, measured on the fttui CPU
    # worker stack (VmHWM after building a Trainer on the tiny model: 421 MiB) plus the first
    # training steps (thread pools, autograd engine: +37 MiB).
    "host_process_bytes": 458 * MIB,
    # host: extra RSS of a process that trains on CUDA (driver, cudart, cuBLAS/cuDNN kernel
    # images). Measured on an H100 (CUDA 13, torch 2.11): the training process tree peaked at
    # 1,558-1,668 MiB over eight runs whose weights were drawn on the card, i.e. 1,100-1,210
    # MiB above the process baseline.
    "host_cuda_bytes": 1152 * MIB,
    # HF checkpoints are saved in shards of at most this size; a quantised or device-mapped
    # load holds about one shard on the host at a time.
    "host_load_shard_bytes": 5 * 10**9,
}

_HALF = {"fp16": 2, "bf16": 2, "fp32": 4}
METHODS = ("full", "full-zero3-offload", "lora", "lora-emb", "qlora", "lora-int8")
LORA_METHODS = ("lora", "lora-emb", "qlora", "lora-int8")
KBIT_METHODS = ("qlora", "lora-int8")

#: display order and labels of the breakdown
COMPONENTS: dict[str, str] = {
    "weights": "weights",
    "gradients": "gradients",
    "optimizer_states": "optimizer states",
    "lora": "LoRA params + grads + states",
    "quantisation": "quantisation buffers",
    "activations": "activations",
    "communication": "communication buffers",
    "cuda_context": "CUDA context",
    "allocator": "allocator overhead",
}
HOST_COMPONENTS: dict[str, str] = {
    "process": "process baseline",
    "cuda_runtime": "CUDA runtime (host side)",
    "model_load": "model load (host copy)",
    "weights": "weights (CPU training)",
    "gradients": "gradients (CPU training)",
    "optimizer_states": "optimizer states (CPU training)",
    "lora": "LoRA params + grads + states (CPU)",
    "activations": "activations (CPU training)",
    "zero3_master_params": "ZeRO-3 fp32 master params",
    "zero3_optimizer_states": "ZeRO-3 optimizer states",
    "zero3_gradients": "ZeRO-3 fp32 gradients",
    "zero3_param_partitions": "ZeRO-3 half-precision param partitions",
    "zero3_pinned_buffers": "ZeRO-3 pinned / swap buffers",
}


# --------------------------------------------------------------------------------------------
# architecture numbers and linear layers


def _native_linears(a: ArchNumbers) -> list[tuple[str, int, int]]:
    """(name, in, out) of the linear layers of one decoder layer, native transformers names."""
    h, q, kv, i = a.hidden, a.q_dim, a.kv_dim, a.inter
    if a.model_type == "bloom":
        return [("query_key_value", h, 3 * h), ("dense", h, h),
                ("dense_h_to_4h", h, 4 * h), ("dense_4h_to_h", 4 * h, h)]
    return [("q_proj", h, q), ("k_proj", h, kv), ("v_proj", h, kv), ("o_proj", q, h),
            ("gate_proj", h, i), ("up_proj", h, i), ("down_proj", i, h)]


def _real_linears(a: ArchNumbers) -> list[tuple[str, int, int]] | None:
    """The linear layers of the original (remote-code) model, fused modules as one, or None
    when the original has the native names."""
    h, q, kv, i = a.hidden, a.q_dim, a.kv_dim, a.inter
    name = a.arch_name or ""
    if name.startswith("baichuan"):
        return [("W_pack", h, q + 2 * kv), ("o_proj", q, h), ("gate_proj", h, i),
                ("up_proj", h, i), ("down_proj", i, h)]
    if name.startswith("chatglm"):
        return [("query_key_value", h, q + 2 * kv), ("dense", q, h),
                ("dense_h_to_4h", h, 2 * i), ("dense_4h_to_h", i, h)]
    if name.startswith("qwen-"):
        # attention c_proj and mlp c_proj share a name: both match "c_proj"
        return [("c_attn", h, q + 2 * kv), ("c_proj", q, h), ("w1", h, i), ("w2", h, i),
                ("c_proj", i, h)]
    return None


def lora_modules(resolved: Mapping[str, Any], a: ArchNumbers | None = None,
                 notes: list[str] | None = None) -> list[tuple[str, int, int]]:
    """The (name, in, out) linear layers of one decoder layer that LoRA adapts.

    ``all-linear`` = every linear layer but the output layer. With ``model.init = "pretrained"``
    and an original that fuses modules (Baichuan ``W_pack``, ChatGLM ``query_key_value``, Qwen
    ``c_attn``) the original's modules are used; with ``random`` the native mapping's. A name of
    the other naming is mapped onto the layer it stands for (``q_proj`` on Baichuan: the q part
    of ``W_pack``; ``W_pack`` on the native mapping: q, k and v)."""
    a = a or arch_numbers(resolved)
    native = _native_linears(a)
    real = _real_linears(a)
    pretrained = (resolved.get("model") or {}).get("init", "pretrained") == "pretrained"
    layers = real if (real is not None and pretrained) else native
    other = native if layers is not native else (real or [])
    targets = (resolved.get("lora") or {}).get("target_modules", ["q_proj", "v_proj"])
    if targets == "all-linear":
        return list(layers)
    if isinstance(targets, str):
        targets = [targets]
    chosen: list[tuple[str, int, int]] = []
    for t in targets:
        t = str(t).rsplit(".", 1)[-1]
        hits = [m for m in layers if m[0] == t]
        if not hits:
            alt = [m for m in other if m[0] == t]
            if alt:
                hits = alt  # same shapes seen through the other naming
                if notes is not None:
                    notes.append(f"lora target {t!r} is a name of the "
                                 f"{'native mapping' if other is native else 'original model'}; "
                                 "counted with its shape")
            elif notes is not None:
                notes.append(f"lora target {t!r} matches no linear layer of this architecture")
        for m in hits:
            if m not in chosen or m[0] == "c_proj":
                chosen.append(m)
    # c_proj may have been appended twice through duplicates in targets
    seen: list[tuple[str, int, int]] = []
    for m in chosen:
        if chosen.count(m) > 1 and m in seen:
            continue
        seen.append(m)
    return seen


# --------------------------------------------------------------------------------------------
# results


@dataclass(frozen=True)
class Calibration:
    """A fitted activation coefficient: ``activations = per_token_bytes x tokens`` (allocator
    overhead on activations included) + the attention term of the formula."""

    per_token_bytes: float
    rows: int
    metric: str  # "gpu" or "host"
    residual_rel: float = 0.0  # RMS relative error of the fit over its rows
    # this machine's CUDA context per card (NVML "used" - torch's reserved peak, the median
    # over the rows that carry both); None: the constant
    context_bytes: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"per_token_bytes": self.per_token_bytes, "rows": self.rows, "metric": self.metric,
                "residual_rel": self.residual_rel, "context_bytes": self.context_bytes}


@dataclass
class Estimate:
    inputs: dict[str, Any]
    breakdown: dict[str, int]  # per card (every card gets the same figures)
    gpu_peak_bytes: list[int]  # one per card of this node
    host_breakdown: dict[str, int]
    host_peak_bytes: int
    activation_per_token_bytes: float
    activation_attention_bytes: float
    notes: list[str] = field(default_factory=list)
    calibration: Calibration | None = None
    device_bytes: int | None = None

    @property
    def fits(self) -> bool | None:
        if self.device_bytes is None or not self.gpu_peak_bytes:
            return None
        return max(self.gpu_peak_bytes) <= self.device_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu_peak_bytes": list(self.gpu_peak_bytes),
            "host_peak_bytes": self.host_peak_bytes,
            "breakdown": dict(self.breakdown),
            "host_breakdown": dict(self.host_breakdown),
            "device_bytes": self.device_bytes,
            "fits": self.fits,
            "activation_per_token_bytes": self.activation_per_token_bytes,
            "calibration": self.calibration.to_dict() if self.calibration else None,
            "calibrated": (f"calibrated from {self.calibration.rows} measured rows"
                           if self.calibration else None),
            "notes": list(self.notes),
            "inputs": dict(self.inputs),
            "constants": dict(CONSTANTS),
        }


# --------------------------------------------------------------------------------------------
# the model


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


def _quant_bytes(n: int, method: str, quant: Mapping[str, Any]) -> tuple[float, float]:
    """(weight bytes, constant bytes) of ``n`` quantised parameters (bitsandbytes storage)."""
    if method == "lora-int8":
        return float(n), 0.0  # row scales are added per output row by the caller
    # 4-bit: two values per byte; one fp32 absmax per block of 64; double quantisation stores
    # the absmax as 8-bit with one fp32 scale per 256 blocks (QLoRA paper: 0.127 bit/param).
    if quant.get("double_quant", True):
        consts = n / 64 * 1 + n / (64 * 256) * 4
    else:
        consts = n / 64 * 4
    return n / 2, consts


def _setting(resolved: Mapping[str, Any]) -> dict[str, Any]:
    t = resolved.get("train") or {}
    d = resolved.get("data") or {}
    dev = resolved.get("devices") or {}
    m = resolved.get("model") or {}
    lo = resolved.get("lora") or {}
    return {
        "method": resolved.get("method", "lora"),
        "precision": t.get("precision", "fp32"),
        "batch_size": int(t.get("batch_size", 1)),
        "max_seq_len": int(d.get("max_seq_len", 512)),
        "gradient_checkpointing": bool(t.get("gradient_checkpointing", False)),
        "optimizer": t.get("optimizer") or ("paged_adamw_32bit" if resolved.get("method") == "qlora"
                                            else "adamw_torch"),
        "gpus": int(dev.get("gpus", 1)),
        "cpu_processes": int(dev.get("cpu_processes", 1) or 1),
        "nodes": int(dev.get("nodes", 1) or 1),
        "attn_implementation": m.get("attn_implementation") or "sdpa",
        "init": m.get("init", "pretrained"),
        "lora_r": int(lo.get("r", 8)),
        "lora_dropout": float(lo.get("dropout", 0.05)),
        "lora_target_modules": lo.get("target_modules", ["q_proj", "v_proj"]),
        "quant": dict(resolved.get("quant") or {}),
        "zero3": dict(resolved.get("zero3") or {}),
    }


def estimate(resolved: Mapping[str, Any], calibration: Calibration | None = None,
             device_bytes: int | None = None) -> Estimate:
    """Predict peak GPU memory per card and the host peak of a resolved profile."""
    s = _setting(resolved)
    method, precision = s["method"], s["precision"]
    if method not in METHODS:
        raise EstimateError(f"method {method!r} is not one the estimator knows ({', '.join(METHODS)})")
    if precision not in _HALF:
        raise EstimateError(f"train.precision {precision!r}: use fp32, fp16 or bf16")
    a = arch_numbers(resolved)
    notes: list[str] = []
    b, seq = s["batch_size"], s["max_seq_len"]
    tokens = b * seq
    gpus = s["gpus"]
    on_gpu = gpus > 0
    C = CONSTANTS
    half = _HALF[precision] == 2
    ab = 2 if half else 4  # activation dtype (autocast / half weights)
    P, V, h, L = a.params, a.vocab, a.hidden, a.layers
    embed = V * h
    head = 0 if a.tied else embed
    lin_per_layer = sum(fi * fo for _n, fi, fo in _native_linears(a))
    lin_total = L * lin_per_layer
    other = P - lin_total  # embeddings, output layer, norms, biases

    # ---- weights / trainable states --------------------------------------------------------
    bd = dict.fromkeys(COMPONENTS, 0.0)
    lora_mods: list[tuple[str, int, int]] = []
    lora_params = 0
    if method in LORA_METHODS:
        lora_mods = lora_modules(resolved, a, notes)
        lora_params = L * sum(s["lora_r"] * (fi + fo) for _n, fi, fo in lora_mods)
    opt = s["optimizer"]
    if method in ("full", "full-zero3-offload"):
        wb = 2 if precision == "bf16" else 4  # fp16 AMP keeps fp32 weights (fttui.worker.model)
    elif method in KBIT_METHODS:
        # prepare_model_for_kbit_training casts every non-quantised tensor to fp32
        wb = 4 if s["quant"].get("prepare", "peft") == "peft" else _HALF[precision]
    else:
        wb = _HALF[precision]
    # the residual stream follows the embedding output: fp32 weights -> fp32 activations there
    rb = wb if method != "full-zero3-offload" else _HALF[precision]

    host_bd = dict.fromkeys(HOST_COMPONENTS, 0.0)
    zero3 = method == "full-zero3-offload"
    world = max(1, gpus if on_gpu else s["cpu_processes"]) * s["nodes"]
    gathered = 0.0
    if zero3:
        z = s["zero3"]
        hb = _HALF[precision] if precision != "fp32" else 4
        off_p, off_o = z.get("offload_params", True), z.get("offload_optimizer", True)
        # fttui builds the model before DeepSpeed (no zero.Init): DeepSpeed casts it to the
        # half dtype and moves the whole module to the card before partitioning
        # (DeepSpeedEngine._configure_distributed_model); the freed blocks stay reserved by the
        # caching allocator, so every card keeps about one half-precision copy of the model.
        floor = P * hb
        # gathered parameters in flight: the largest module twice (prefetch) ~ DeepSpeed
        # estimate_zero3_model_states_mem_needs: 4 x largest_layer_params with offload
        largest = max(embed, max(fi * fo for _n, fi, fo in _native_linears(a)))
        gathered = 4 * largest + (0 if off_p else P * hb / world)
        grads_gpu = 0 if off_o else P * hb / world
        opt_gpu = 0 if off_o else P * 12 / world
        bd["weights"] = floor
        bd["gradients"] = grads_gpu
        bd["optimizer_states"] = opt_gpu
        notes.append("ZeRO-3: the model is built before DeepSpeed (no zero.Init), so each card "
                     "first holds a whole half-precision copy; the caching allocator keeps it "
                     "reserved and activations reuse it")
        # host (per node): DeepSpeed estimate_zero3_model_states_mem_needs with offload:
        # fp32 master params 4 + Adam states 8 + fp32 grads 4 (+ half param partitions 2)
        share = P / s["nodes"]
        if off_o:
            host_bd["zero3_master_params"] = 4 * share
            host_bd["zero3_optimizer_states"] = 8 * share
            host_bd["zero3_gradients"] = 4 * share
        if off_p:
            host_bd["zero3_param_partitions"] = hb * share
        # pinned staging buffers for the parameter and gradient buckets (prefetch + reduce
        # buckets, about 4 x hidden^2 elements each, fp32). DeepSpeed's own estimator multiplies
        # the 18 bytes/param by additional_buffer_factor = 1.5 as an upper bound; the reference
        # authors' "needs at least 128 GB" for a 7.5B model fits 18 bytes/param without it.
        host_bd["zero3_pinned_buffers"] = 2 * 4 * h * h * 4 * (world // s["nodes"])
        upper = P * max(4 * (world // s["nodes"]), 18) * 1.5 / s["nodes"]
        notes.append(f"ZeRO-3 host: DeepSpeed estimate_zero3_model_states_mem_needs (no "
                     f"zero.Init, factor 1.5) gives {upper / GIB:.0f} GiB as an upper bound")
    elif method == "full":
        bd["weights"] = P * wb
        if wb == 4 and half:
            # autocast keeps half copies of the matmul weights from forward to backward
            bd["weights"] += lin_total * 2 + head * 2
            notes.append("fp16/bf16 AMP on fp32 weights: autocast's half copies of the matmul "
                         "weights counted under weights")
        bd["gradients"] = P * wb
        per, why = _optimizer_bytes_per_param(opt, wb)
        bd["optimizer_states"] = P * per
        notes.append(f"optimizer {opt}: {why}")
    else:
        if method in KBIT_METHODS:
            qw, qc = _quant_bytes(lin_total, method, s["quant"])
            if method == "lora-int8":
                qc = L * sum(fo for _n, _fi, fo in _native_linears(a)) * 4  # fp32 row scales
            bd["weights"] = qw + other * wb
            # constants + one dequantised matrix in the compute dtype (bnb matmul) in flight
            largest_lin = max(fi * fo for _n, fi, fo in _native_linears(a))
            bd["quantisation"] = qc + 2 * largest_lin * ab
            if ab == 2 and wb == 4:
                # prepare_model_for_kbit_training leaves the output layer in fp32: autocast
                # casts it to the half dtype for the matmul and the matmul keeps that copy for
                # its backward (measured on an H100: Qwen-1.8B QLoRA, V*h*2 = 593 MiB)
                bd["weights"] += (embed if a.tied else head) * 2
                notes.append("k-bit under fp16/bf16 autocast: the half copy of the fp32 output "
                             "layer kept for its backward counted under weights")
        else:
            bd["weights"] = P * wb
        if method == "lora-emb":
            # modules_to_save: trainable copies of the input embedding and the output layer
            emb_train = embed + head
            bd["weights"] += emb_train * wb
            bd["gradients"] += emb_train * wb
            per, _why = _optimizer_bytes_per_param(opt, wb)
            bd["optimizer_states"] += emb_train * per
        # peft creates the adapters in fp32 (autocast_adapter_dtype); grads fp32; optimizer
        per, why = _optimizer_bytes_per_param(opt, 4)
        bd["lora"] = lora_params * (4 + 4 + per)
        notes.append(f"optimizer {opt}: {why}")
    extra_head = 0.0
    if a.arch_name == "baichuan2-7b" and s["init"] == "pretrained":
        # NormHead (remote code) normalises the output matrix every training step: one copy in
        # the head's dtype, plus its autocast half copy, kept for the backward
        if zero3:
            extra_head = embed * _HALF[precision]
        else:
            bd["weights"] += embed * (wb + (2 if (half and wb == 4) else 0))
        notes.append("Baichuan2 NormHead: a normalised copy of the output matrix per step "
                     "counted under weights")

    # ---- activations ------------------------------------------------------------------------
    r, drop = s["lora_r"], s["lora_dropout"]
    eager = eager_attention(a, s["attn_implementation"])
    dt = LayerDtypes(ab=ab, wb=_HALF[precision] if zero3 else wb,
                     lin_out=4 if method in KBIT_METHODS and ab == 2 and wb == 4 else ab,
                     mask=1 if on_gpu else 4, full=method in ("full", "full-zero3-offload"))
    pretrained = s["init"] == "pretrained"
    linears = (_real_linears(a) if pretrained else None) or _native_linears(a)
    layer_tok = layer_act_per_token(a, dt, lora_mods, r, drop, eager, linears)
    # the loss (transformers' ForCausalLMLoss): logits in the compute dtype, an fp32 copy and
    # the fp32 log-softmax in the forward; the backward starts with the log-softmax output, the
    # dense NLL gradient and the log-softmax gradient (fp32 each): 12 bytes per vocabulary
    # entry, the larger of the two phases (the logits themselves are dropped with the outputs
    # before the backward). Plus the final norm (fp32 input) and the output layer's input.
    head_in = (dt.wb + (ab if dt.autocast else 0)) * h if (dt.full or method == "lora-emb") else 0
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
    if s["gradient_checkpointing"]:
        ckpt = L * rb * h
        # phase 1: loss and its backward (all checkpoints + logits); phase 2: backward through
        # one recomputed layer (checkpoints + one layer + its transient gradients; with an fp32
        # residual stream the first norm's input is the checkpoint itself); phase 3: that
        # layer's attention backward
        p2 = ckpt + layer_tok - (4 * h if rb == 4 else 0)
        phases = [(ckpt + logits_peak, 0.0), (p2 + mlp_grads, elems * att_elem),
                  (p2 - mlp_saved, elems * (att_elem + att_grad))]
    else:
        # every layer's saved tensors, plus the larger of the loss's backward and the last
        # layer's MLP gradients; or the last layer's attention backward
        phases = [(L * layer_tok + max(logits_peak, mlp_grads), L * elems * att_elem),
                  (L * layer_tok - mlp_saved, elems * (L * att_elem + att_grad))]
    per_tok, att_bytes = max(phases, key=lambda ph: ph[0] * tokens + ph[1])
    # with checkpointing the caching allocator keeps about the checkpoints' size again in
    # blocks it cannot reuse (measured on an H100: reserved - allocated = 0.8-1.4 x the
    # checkpoints over six Llama-2-7B settings, against 0.1-0.3 of the activations without)
    ckpt_bytes = L * 2 * h * tokens if s["gradient_checkpointing"] else 0.0
    if calibration is not None:
        act = calibration.per_token_bytes * tokens + att_bytes
        alloc_on_act = 0.0
    else:
        act = per_tok * tokens + att_bytes
        alloc_on_act = C["allocator_fraction"]
    # the optimizer step runs after the backward has freed the activations: its temporaries
    # (torch AdamW foreach: about one tensor per trainable parameter) compete with them
    trainable_full = P if method in ("full",) else 0
    step_tmp = trainable_full * wb + lora_params * 4
    if method == "lora-emb":
        step_tmp += (embed + head) * wb  # the trainable embedding / output-layer copies
    dyn = max(act, step_tmp)
    bd["activations"] = dyn
    bd["allocator"] = max(alloc_on_act * dyn, ckpt_bytes if alloc_on_act and on_gpu else 0.0)
    if on_gpu:
        bd["cuda_context"] = C["cuda_context_bytes"]
        if calibration is not None and calibration.context_bytes is not None:
            bd["cuda_context"] = calibration.context_bytes
        if world > 1:
            # DDP's reducer keeps its buckets as a second copy of every trainable gradient
            # (gradient_as_bucket_view=False, the HF Trainer default); NCCL its own buffers
            ddp_copy = 0 if zero3 else (lora_params * 4 + (P * wb if method == "full" else 0)
                                        + ((embed + head) * wb if method == "lora-emb" else 0))
            bd["communication"] = C["comm_bytes"] + ddp_copy
    if zero3:
        # the working set (activations, gathered parameters, NormHead copy) first reuses the
        # blocks of the cached half copy; only what exceeds it is new memory. The allocator
        # fraction applies to the whole working set (its tensors do not fit the cached blocks
        # exactly).
        working = dyn + gathered + extra_head
        bd["activations"] = max(0.0, working - bd["weights"])
        bd["allocator"] = alloc_on_act * working
        notes.append(f"ZeRO-3: {min(working, bd['weights']) / GIB:.1f} GiB of the working set "
                     "reuse the cached copy")
    if device_bytes and on_gpu:
        # the caching allocator frees its cached blocks and retries before it reports OOM
        # (PyTorch CUDA caching allocator), so the reserved-but-unused part shrinks to the room
        # left on the card: NVML "used" stays below the card while allocated memory fits
        allocated = sum(v for k, v in bd.items() if k != "allocator")
        bd["allocator"] = max(0.0, min(bd["allocator"], device_bytes - allocated))
    card = {k: int(round(v)) for k, v in bd.items()}
    # ---- host -----------------------------------------------------------------------------
    procs = world // s["nodes"]
    host_bd["process"] = C["host_process_bytes"] * procs
    if on_gpu:
        host_bd["cuda_runtime"] = C["host_cuda_bytes"] * procs
        if method in KBIT_METHODS and s["init"] == "pretrained":
            host_bd["model_load"] = min(P * 2, C["host_load_shard_bytes"]) * procs
        elif s["init"] == "random" and not zero3 and method not in KBIT_METHODS:
            host_bd["model_load"] = 0  # random weights are drawn on the card (fttui.worker.model)
        else:
            # from_pretrained (and the quantised random init) build the whole model on the host
            load_b = wb if not zero3 else 4
            host_bd["model_load"] = P * load_b * procs
            if zero3:
                host_bd["model_load"] = 0  # the fp32 master copy takes its place in time
        gpu_peak = [int(sum(card.values()))] * (gpus if on_gpu else 0)
    else:
        # CPU training: the "card" figures live in host memory
        for k in ("weights", "gradients", "optimizer_states", "lora", "activations"):
            host_bd[k] = bd[k] * procs
        # no caching allocator on the host: glibc returns big blocks (fttui sets the mmap
        # threshold for CPU runs, fttui.core.run.launch), so no allocator overhead is added
        host_bd["activations"] += bd["quantisation"] * procs
        gpu_peak = []
        card = {k: 0 for k in card}
    host = {k: int(round(v)) for k, v in host_bd.items()}
    inputs = {k: v for k, v in s.items()}
    inputs.update({"model": (resolved.get("model") or {}).get("name_or_path"),
                   "arch": a.arch_name or a.model_type, "params": P,
                   "lora_params": lora_params, "tokens_per_step": tokens,
                   "lora_modules": [n for n, _fi, _fo in lora_mods],
                   "profile": resolved.get("name")})
    if calibration is not None:
        ctx = (f", CUDA context {calibration.context_bytes / MIB:.0f} MiB"
               if calibration.context_bytes is not None else "")
        notes.insert(0, f"calibrated from {calibration.rows} measured rows "
                        f"({calibration.per_token_bytes / 1024:.1f} KiB per token{ctx})")
    if s["nodes"] > 1:
        notes.append("per-card figures for one node; every node is the same")
    return Estimate(inputs=inputs, breakdown=card, gpu_peak_bytes=gpu_peak, host_breakdown=host,
                    host_peak_bytes=int(sum(host.values())),
                    activation_per_token_bytes=(calibration.per_token_bytes if calibration
                                                else per_tok * (1 + alloc_on_act)),
                    activation_attention_bytes=att_bytes, notes=notes, calibration=calibration,
                    device_bytes=device_bytes)


# --------------------------------------------------------------------------------------------
# the boundary: the largest batch size / sequence length that fits

PARAMS = {"batch_size": "train.batch_size", "max_seq_len": "data.max_seq_len"}


def _with(resolved: Mapping[str, Any], param: str, value: int) -> dict[str, Any]:
    """A shallow copy of ``resolved`` with one setting changed (no re-validation needed)."""
    out = dict(resolved)
    section, key = PARAMS[param].split(".")
    out[section] = {**(resolved.get(section) or {}), key: int(value)}
    return out


def _peak(e: Estimate) -> int:
    return max(e.gpu_peak_bytes) if e.gpu_peak_bytes else e.host_peak_bytes


def solve_max(resolved: Mapping[str, Any], param: str, device_bytes: int, *,
              calibration: Calibration | None = None, hi: int = 1 << 20) -> int:
    """The largest value of ``param`` (``batch_size`` or ``max_seq_len``) whose predicted peak
    (per card; host memory for a CPU profile) fits ``device_bytes``; 0 when even 1 does not fit.
    The prediction is monotonic in both, so an exponential then a binary search over integers
    finds it exactly: ``value`` fits and ``value + 1`` does not."""
    if param not in PARAMS:
        raise EstimateError(f"--max: use {' or '.join(PARAMS)}")

    def fits(v: int) -> bool:
        return _peak(estimate(_with(resolved, param, v), calibration, device_bytes)) <= device_bytes

    if not fits(1):
        return 0
    lo, step = 1, 2
    while step <= hi and fits(step):
        lo, step = step, step * 2
    if step > hi:
        return hi if fits(hi) else _bisect(fits, lo, hi)
    return _bisect(fits, lo, step)


def _bisect(fits, lo: int, hi: int) -> int:
    """lo fits, hi does not: the largest fitting value."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


# --------------------------------------------------------------------------------------------
# calibration


def _measured(row: Mapping[str, Any], metric: str) -> float | None:
    v = _first(row.get("peak_gpu_mem_mb" if metric == "gpu" else "peak_host_rss_mb"))
    return None if v is None else v * MIB


def _static_and_attention(e: Estimate, metric: str) -> tuple[float, float]:
    if metric == "gpu":
        total = sum(e.breakdown.values())
        dyn = e.breakdown["activations"] + e.breakdown["allocator"]
    else:
        total = e.host_peak_bytes
        dyn = e.host_breakdown["activations"]
    return total - dyn, e.activation_attention_bytes


def calibrate(rows: Iterable[Mapping[str, Any]], resolved: Mapping[str, Any]) -> Calibration:
    """Fit the per-token activation coefficient through measured rows of one profile.

    Each row needs ``batch_size``, ``max_seq_len`` and a measured peak: ``peak_gpu_mem_mb`` (a
    list per card, or a number), or on CPU ``peak_host_rss_mb``. For each row the static terms
    of the model (weights, states, context, ...) and the attention-matrix term are subtracted;
    the rest is fitted as ``k x tokens`` by least squares through the origin
    (``k = sum(x y) / sum(x^2)``). The allocator overhead on activations is part of ``k``."""
    metric = "gpu" if int((resolved.get("devices") or {}).get("gpus", 1)) > 0 else "host"
    rows = list(rows)
    context = _context(rows) if metric == "gpu" else None
    xs: list[float] = []
    ys: list[float] = []
    for row in rows:
        m = _measured(row, metric)
        b, s = row.get("batch_size"), row.get("max_seq_len")
        if m is None or not b or not s:
            continue
        r = _with(_with(resolved, "batch_size", int(b)), "max_seq_len", int(s))
        e = estimate(r)
        static, att = _static_and_attention(e, metric)
        if context is not None:
            static += context - e.breakdown["cuda_context"]
        xs.append(float(int(b) * int(s)))
        ys.append(m - static - att)
    if not xs:
        raise EstimateError("calibration needs measured rows with batch_size, max_seq_len and "
                            "a peak memory figure")
    k = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    k = max(k, 0.0)
    rel = [((k * x) - y) / (y + 1) for x, y in zip(xs, ys)]
    rms = math.sqrt(sum(v * v for v in rel) / len(rel))
    return Calibration(per_token_bytes=k, rows=len(xs), metric=metric, residual_rel=rms,
                       context_bytes=context)


def _first(v: Any) -> float | None:
    """A per-card figure (a list: its largest) or a number, as a float; None if absent."""
    if isinstance(v, (list, tuple)):
        v = max((x for x in v if isinstance(x, (int, float))), default=None)
    return None if v is None else float(v)


def _context(rows: list[Mapping[str, Any]]) -> float | None:
    """This machine's CUDA context per card: NVML's "used" peak less torch's reserved peak
    (what the card holds outside PyTorch's caching allocator: the context, cuBLAS/cuDNN
    workspaces, and whatever the card shows used when idle), the median over the rows that
    carry both figures."""
    diffs = []
    for row in rows:
        used, res = _first(row.get("peak_gpu_mem_mb")), _first(row.get("peak_torch_reserved_mb"))
        if used is not None and res is not None and used > res:
            diffs.append((used - res) * MIB)
    if not diffs:
        return None
    diffs.sort()
    mid = len(diffs) // 2
    return diffs[mid] if len(diffs) % 2 else (diffs[mid - 1] + diffs[mid]) / 2


_MATCH_KEYS = ("model", "method", "precision", "gradient_checkpointing")


def calibration_from_store(resolved: Mapping[str, Any],
                           store_rows: Iterable[Mapping[str, Any]]) -> Calibration | None:
    """Calibrate from the results-store rows (runs, probe trials, sweep cells) of the same model,
    method, precision and gradient checkpointing as ``resolved`` that finished without running
    out of memory and carry a memory figure; ``None`` when there is none."""
    s = _setting(resolved)
    want = {
        "model": (resolved.get("model") or {}).get("name_or_path"),
        "method": s["method"],
        "precision": s["precision"],
        "gradient_checkpointing": int(s["gradient_checkpointing"]),
    }
    metric = "gpu" if s["gpus"] > 0 else "host"
    picked = []
    for row in store_rows:
        if row.get("status") in ("oom", "failed", "cancelled"):
            continue
        if any(row.get(k) is not None and row.get(k) != v
               for k, v in want.items() if k != "gradient_checkpointing"):
            continue
        gc = row.get("gradient_checkpointing")
        if gc is not None and int(gc) != want["gradient_checkpointing"]:
            continue
        if metric == "gpu" and not (row.get("num_gpus") or 0):
            continue
        if metric == "host" and (row.get("num_gpus") or 0):
            continue
        if _measured(row, metric) is None:
            continue
        picked.append(row)
    if not picked:
        return None
    return calibrate(picked, resolved)
