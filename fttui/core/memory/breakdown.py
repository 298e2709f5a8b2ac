"""What an estimate is made of: the fitted constants, the labels of the breakdowns and the records.

Owns :data:`CONSTANTS` (the only fitted numbers of the memory model; the fit and its check are
in docs/estimate.md), the display order and labels of the per-card breakdown
(:data:`COMPONENTS`) and of the host breakdown (:data:`HOST_COMPONENTS`), and the two records
the estimator hands out: :class:`Estimate` (one prediction) and :class:`Calibration` (a fitted
activation coefficient, made by :mod:`fttui.core.memory.calibration`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fttui.core.base.constants import CUDA_CONTEXT_BYTES
from fttui.core.base.units import MIB

__all__ = ["CONSTANTS", "COMPONENTS", "HOST_COMPONENTS", "Calibration", "Estimate"]


#: Global constants (the only fitted numbers; see docs/estimate.md).
CONSTANTS: dict[str, float] = {
    # CUDA context + cuBLAS/cuDNN workspaces + NCCL, per card, counted by NVML "used" but not by
    # torch.cuda.memory_reserved(). Typical published values 300-600 MB; fitted: see the doc.
    "cuda_context_bytes": CUDA_CONTEXT_BYTES,
    # extra reserved memory of the caching allocator (block rounding, fragmentation, cached
    # blocks) as a fraction of the dynamic (per-step) memory: activations and transients.
    "allocator_fraction": 0.2,
    # NCCL communicators and DeepSpeed/DDP communication buffers outside the gradient copy and
    # the ZeRO / FSDP buckets, per card when more than one process trains (world size > 1).
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
    "model_load": "model load (host copy, above the training peak)",
    "weights": "weights (CPU training)",
    "gradients": "gradients (CPU training)",
    "optimizer_states": "optimizer states (CPU training)",
    "lora": "LoRA params + grads + states (CPU)",
    "activations": "activations (CPU training)",
    "communication": "communication buckets (CPU training)",
    "offload_master_params": "offloaded fp32 master params",
    "offload_optimizer_states": "offloaded optimizer states",
    "offload_gradients": "offloaded gradients",
    "offload_param_partitions": "offloaded param partitions",
    "offload_pinned_buffers": "pinned staging buffers (ZeRO offload)",
}


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
        return {
            "per_token_bytes": self.per_token_bytes,
            "rows": self.rows,
            "metric": self.metric,
            "residual_rel": self.residual_rel,
            "context_bytes": self.context_bytes,
        }


@dataclass
class Estimate:
    inputs: dict[str, Any]
    breakdown: dict[str, int]  # per card, i.e. per rank (every card gets the same figures)
    gpu_peak_bytes: list[int]  # one per card of this node
    host_breakdown: dict[str, int]
    host_peak_bytes: int
    activation_per_token_bytes: float
    activation_attention_bytes: float
    notes: list[str] = field(default_factory=list)
    calibration: Calibration | None = None
    device_bytes: int | None = None
    # the two phases of the host peak (host_peak_bytes is the larger): while the model is built
    # or loaded, and while it trains
    host_load_peak_bytes: int = 0
    host_train_peak_bytes: int = 0
    # per card while the model is built: the whole model a card holds before the engine shards
    # it (the lowest rank's card when only it builds), with the CUDA context; 0 when none does
    gpu_load_peak_bytes: int = 0
    # the ``activations`` term is the larger of the forward and backward's activations and the
    # optimizer step's temporaries (they never coexist); each apart, at the stated batch and length
    activation_bytes: int = 0
    step_temporaries_bytes: int = 0
    # one rank's per-card terms wherever they live: ``breakdown`` on a card, the host for CPU
    # training (where ``breakdown`` is zeros and ``host_breakdown`` sums the node's ranks)
    rank_breakdown: dict[str, int] = field(default_factory=dict)
    on_gpu: bool = True
    # a resume's load peak per rank beside the training's (fttui.core.memory.resume.resume_peak)
    resume: dict[str, Any] = field(default_factory=dict)

    @property
    def fits(self) -> bool | None:
        if self.device_bytes is None or not self.gpu_peak_bytes:
            return None
        return max(self.gpu_peak_bytes) <= self.device_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu_peak_bytes": list(self.gpu_peak_bytes),
            "host_peak_bytes": self.host_peak_bytes,
            "host_load_peak_bytes": self.host_load_peak_bytes,
            "host_train_peak_bytes": self.host_train_peak_bytes,
            "gpu_load_peak_bytes": self.gpu_load_peak_bytes,
            "breakdown": dict(self.breakdown),
            "host_breakdown": dict(self.host_breakdown),
            "device_bytes": self.device_bytes,
            "fits": self.fits,
            "activation_per_token_bytes": self.activation_per_token_bytes,
            "calibration": self.calibration.to_dict() if self.calibration else None,
            "calibrated": (f"calibrated from {self.calibration.rows} measured rows" if self.calibration else None),
            "notes": list(self.notes),
            "resume": dict(self.resume),
            "inputs": dict(self.inputs),
            "constants": dict(CONSTANTS),
        }
