"""What fttui's Trainer callback (:mod:`fttui.integrations.hf`) reads off the Trainer, the model
and the process: versions, the model's name, method, shape and parameters, the sharding, peak RSS,
the OOM kind of an exception; the per-micro-batch counters. Stdlib only (torch when it is already
imported; the sharding and method registries, fttui.core.base.shardings and methods, are stdlib too); loaded by
path, with those registries, into a command's own Python when fttui is not installed there."""

from __future__ import annotations

import os
import platform
import sys
import time
from typing import Any

try:
    from fttui.core.base import shardings as _shardings
except ImportError:  # loaded by path where fttui is not installed: the registry (stdlib only) by path too
    import importlib.util as _util

    _spec = _util.spec_from_file_location(
        "_fttui_shardings",
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "core", "base", "shardings.py"),
    )
    if _spec is None or _spec.loader is None:
        raise
    _shardings = _util.module_from_spec(_spec)
    sys.modules[_spec.name] = _shardings
    _spec.loader.exec_module(_shardings)
#: the method registry, as the sharding registry loaded it (fttui's, or by path beside it)
_methods = sys.modules[_shardings.Method.__module__]

__all__ = [
    "PHASES",
    "Counters",
    "start_fields",
    "peak_rss_mb",
    "proc_memory",
    "environment",
    "model_shape",
    "model_name",
    "method",
    "sharding",
    "params",
    "oom_kind",
    "STEP_PHASES",
]


#: The training phases a rank marks in memory (:attr:`Counters.phase`; no event per phase: an
#: ``error`` event names the one it failed in): inside a step ``data`` (fetching the step's
#: micro-batches), ``forward``, ``backward``, ``optimizer`` (gradient clipping and the optimizer's
#: step); around steps ``save`` (a checkpoint), ``resume-load`` (the checkpoint resumed from:
#: weights, optimizer and scheduler states) and ``eval``.
PHASES = ("data", "forward", "backward", "optimizer", "save", "resume-load", "eval")
#: the phases of a training step (the step they belong to is the one being run)
STEP_PHASES = ("data", "forward", "backward", "optimizer")


def _input_ids(inputs):
    """A micro-batch's ``input_ids`` when it has a shape of at least one dimension, else None."""
    ids = inputs.get("input_ids") if hasattr(inputs, "get") else None
    return ids if ids is not None and hasattr(ids, "shape") and len(ids.shape) >= 1 else None


class Counters:
    """Samples, tokens and the step's loss of one rank, counted per micro-batch in the Trainer's
    ``training_step``; the non-padding tokens and the loss stay on the device until the step ends
    (no sync per micro-batch). ``step``: the last finished optimizer step (for error events).
    ``passes``: micro-batches (forward and backward passes) so far; ``tokens_padded_x_len``: the
    padded tokens, each times its micro-batch's padded length (sum of batch x length squared: the
    attention's share of the FLOPs); the step's seconds in those passes (:meth:`pass_begin`,
    :meth:`pop_pass_time`; on a GPU timed by CUDA events, no sync per micro-batch)."""

    def __init__(self) -> None:
        self.samples = 0
        self.tokens_padded = 0
        self.passes = 0
        self.tokens_padded_x_len = 0
        self.cuda = False  # time the passes with CUDA events (the run trains on a GPU)
        self._pass_s = 0.0
        self._pass_events: list = []
        self.longest_seq = 0  # the widest micro-batch fed (tokens per sample, padding included)
        self.feeding_seq = 0  # ... and the one being fed now (set before its forward: an error names it)
        self._tokens = 0  # settled ints
        self._tokens_dev = None  # pending device tensor
        self._loss_dev = None  # sum of this step's micro-batch losses (already / grad_accum)
        self.fetch_t0: float | None = None
        self.data_wait = 0.0  # seconds this step spent fetching its batches (get_batch_samples)
        self.step = 0
        #: the phase this rank is in (:data:`PHASES`; None: outside them), an attribute set at
        #: each boundary (cheap enough to leave on: nothing is written until an error names it)
        self.phase: str | None = None
        self.in_pass = False  # inside training_step: compute_loss is the forward

    def enter(self, phase: str | None) -> str | None:
        """This rank is now in ``phase``; returns the phase it was in."""
        was, self.phase = self.phase, phase
        return was

    def phase_step(self) -> int:
        """The step the current phase belongs to: the one being run for a step's phases, else the
        last finished one (a checkpoint saved after step N: N; a resume: the step it continues from)."""
        return self.step + 1 if self.phase in STEP_PHASES else self.step

    def feeding(self, inputs) -> None:
        """The micro-batch about to be fed: its padded length (an error in its pass names it)."""
        ids = _input_ids(inputs)
        if ids is not None:
            self.feeding_seq = max(self.feeding_seq, int(ids.shape[-1]))

    def fed_seq(self) -> int | None:
        """The longest sequence fed so far, the micro-batch being fed included (None: nothing yet)."""
        return max(self.longest_seq, self.feeding_seq) or None

    def add(self, inputs, loss) -> None:
        ids = _input_ids(inputs)
        if ids is not None:
            self.samples += int(ids.shape[0])
            self.tokens_padded += int(ids.numel())
            self.tokens_padded_x_len += int(ids.numel()) * int(ids.shape[-1])
            self.longest_seq = max(self.longest_seq, int(ids.shape[-1]))
            mask = inputs.get("attention_mask")
            if mask is not None:
                s = mask.detach().sum()
                self._tokens_dev = s if self._tokens_dev is None else self._tokens_dev + s
            else:
                self._tokens += int(ids.numel())
        # The returned loss is already divided for gradient accumulation (or normalised by the
        # token count of the whole step), so the sum over the step's micro-batches is the step loss.
        if loss is not None and hasattr(loss, "detach"):
            v = loss.detach().float()
            self._loss_dev = v if self._loss_dev is None else self._loss_dev + v

    def pass_begin(self) -> Any:
        """The start of a forward and backward pass: a time, or a recorded CUDA event."""
        if self.cuda:
            ev = sys.modules["torch"].cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def pass_end(self, begun: Any) -> None:
        """The pass begun at ``begun`` is over: one more pass, its time added to the step's."""
        self.passes += 1
        if self.cuda:
            ev = sys.modules["torch"].cuda.Event(enable_timing=True)
            ev.record()
            self._pass_events.append((begun, ev))
        else:
            self._pass_s += time.perf_counter() - begun

    def pop_pass_time(self) -> float:
        """Seconds of the passes since the last call (the step's forward and backward)."""
        took, self._pass_s = self._pass_s, 0.0
        events, self._pass_events = self._pass_events, []
        for begun, ended in events:
            ended.synchronize()
            took += begun.elapsed_time(ended) / 1000.0
        return took

    @property
    def tokens(self) -> int:
        if self._tokens_dev is not None:
            self._tokens += int(self._tokens_dev.item())
            self._tokens_dev = None
        return self._tokens

    def pop_loss(self) -> float | None:
        if self._loss_dev is None:
            return None
        v, self._loss_dev = float(self._loss_dev.item()), None
        return v if v == v else None  # NaN -> null


def start_fields(args, state, trainer, model, on_cuda: bool, via: str) -> dict[str, Any]:
    """The ``start`` event of a script's Trainer: what the Trainer tells of the run."""
    precision = "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else "fp32"
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    fields: dict[str, Any] = {
        "config": {
            "method": method(model) if model is not None else None,
            "sharding": sharding(trainer) if trainer is not None else None,
            "model": {"name_or_path": model_name(model) if model is not None else None},
            "train": {
                "batch_size": args.per_device_train_batch_size,
                "grad_accum": args.gradient_accumulation_steps,
                "precision": precision,
                "gradient_checkpointing": bool(args.gradient_checkpointing),
                "lr": args.learning_rate,
                "max_steps": int(state.max_steps),
            },
            "devices": {"gpus": local if on_cuda else 0, "nodes": max(1, int(args.world_size) // local)},
        },
        "world_size": int(args.world_size),
        "micro_batch": args.per_device_train_batch_size,
        "grad_accum": args.gradient_accumulation_steps,
        "precision": precision,
        "env": environment(),
        "integration": {
            "via": via,
            "counting": trainer is not None,
            "trainer": type(trainer).__name__ if trainer is not None else None,
        },
    }
    if model is not None:
        fields["params_total"], fields["params_trainable"] = params(model)
        fields["model_shape"] = model_shape(model)
    dataset = getattr(trainer, "train_dataset", None)
    try:
        fields["num_samples"] = len(dataset) if dataset is not None else None
    except TypeError:
        fields["num_samples"] = None
    return fields


def peak_rss_mb() -> float | None:
    return proc_memory().get("peak_rss_mb")


_STATUS_KEYS = {b"VmHWM:": "peak_rss_mb", b"VmRSS:": "rss_mb", b"VmSize:": "vm_mb", b"VmPeak:": "peak_vm_mb"}


def proc_memory() -> dict[str, float]:
    """This process's memory now, in MiB (to the KiB), from one read of ``/proc/self/status``: ``rss_mb``
    (VmRSS), ``peak_rss_mb`` (VmHWM), ``vm_mb`` (VmSize), ``peak_vm_mb`` (VmPeak), and ``vm_limit_mb`` when an
    address-space
    limit (RLIMIT_AS: ``limits.host_memory``) is set; the keys it cannot read are left out."""
    out: dict[str, float] = {}
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                key = _STATUS_KEYS.get(line.split(b" ", 1)[0].split(b"\t", 1)[0])
                if key is not None:
                    # to the KiB /proc gives: a launched probe trial's headroom (limit minus VmPeak)
                    # predicts from differences of a tenth of a MiB (0.12 MiB a token of tiny-lora)
                    out[key] = round(int(line.split()[1]) / 1024, 3)
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY and soft > 0:
            out["vm_limit_mb"] = round(soft / 2**20, 3)
    except (ImportError, OSError, ValueError):
        pass
    return out


def _version(dist: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return None


def environment() -> dict[str, Any]:
    torch = sys.modules.get("torch")
    gpus = []
    if torch is not None and torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": p.name, "mem_total_mb": int(p.total_memory // 2**20)})
    env = {k: _version(k) for k in ("torch", "transformers", "peft", "accelerate", "bitsandbytes", "deepspeed", "trl")}
    return {
        "python": platform.python_version(),
        **env,
        "cuda": getattr(getattr(torch, "version", None), "cuda", None),
        "gpus": gpus,
        "gpu_names": [g["name"] for g in gpus],
        "cpu_count": os.cpu_count(),
        "hostname": platform.node(),
    }


def model_shape(model) -> dict[str, Any] | None:
    """``vocab``, ``hidden``, ``layers``, ``attn_dim``, ``tied`` from the model's (text) config,
    and for a mixture of experts ``experts``, ``top_k``, ``expert_inter``, ``sparse_layers``:
    what fttui's FLOPs per token need (the same reading as fttui's worker)."""
    cfg = getattr(model, "config", None)
    if cfg is not None and callable(getattr(cfg, "get_text_config", None)):
        cfg = cfg.get_text_config()
    if cfg is None:
        return None

    def first(*names):
        for n in names:
            v = getattr(cfg, n, None)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        return None

    vocab = first("vocab_size", "padded_vocab_size")
    hidden = first("hidden_size", "n_embd", "n_embed", "d_model")
    layers = first("num_hidden_layers", "num_layers", "n_layer")
    heads = first("num_attention_heads", "n_head")
    if None in (vocab, hidden, layers, heads):
        return None
    head_dim = first("head_dim", "kv_channels") or hidden // heads
    shape: dict[str, Any] = {
        "vocab": vocab,
        "hidden": hidden,
        "layers": layers,
        "attn_dim": heads * head_dim,
        "tied": bool(getattr(cfg, "tie_word_embeddings", False)),
    }
    shape.update(_moe_shape(cfg, first, layers))
    return shape


def _moe_shape(cfg, first, layers: int) -> dict[str, int]:
    """A mixture of experts' ``experts`` (routed, per sparse layer), ``top_k`` (per token),
    ``expert_inter`` (one expert's width) and ``sparse_layers``, read with the keys of
    fttui.core.models.layouts: every layer sparse but Qwen-MoE's ``mlp_only_layers`` and the
    layers off its ``decoder_sparse_step`` (and DeepSeek's ``first_k_dense_replace``); empty for
    a dense model."""
    experts = first("num_local_experts", "num_experts", "n_routed_experts")
    top_k = first("num_experts_per_tok", "moe_top_k")
    expert_inter = first("moe_intermediate_size", "intermediate_size")
    if experts is None or top_k is None or expert_inter is None or top_k > experts:
        return {}
    step = first("decoder_sparse_step") or 1
    dense_only = set(getattr(cfg, "mlp_only_layers", None) or ())
    first_dense = first("first_k_dense_replace") or 0
    sparse = sum(1 for i in range(first_dense, layers) if i not in dense_only and (i + 1) % step == 0)
    if not sparse:
        return {}
    return {"experts": experts, "top_k": top_k, "expert_inter": expert_inter, "sparse_layers": sparse}


def model_name(model) -> str | None:
    cfg = getattr(model, "config", None)
    name = getattr(cfg, "_name_or_path", None) or getattr(model, "name_or_path", None)
    if isinstance(name, str) and name:
        return name
    kind = getattr(cfg, "model_type", None)
    return f"{kind} (from config)" if kind else None


def method(model) -> str:
    """The method a model trains with: adapters (peft) on a base bitsandbytes loaded in 4 or 8
    bits, or on an unquantised one; full fine-tuning without adapters."""
    if not hasattr(model, "peft_config"):
        return _methods.Method.FULL.value
    for bits in (4, 8):
        kind = _methods.quantised_to(bits)
        if kind is not None and getattr(model, f"is_loaded_in_{bits}bit", False):
            return kind.name.value
    return _methods.Method.LORA.value


def sharding(trainer) -> str | None:
    """``zeroN`` / ``zeroN-offload`` under DeepSpeed, ``fsdp`` under FSDP, ``none`` otherwise;
    ``None`` when it cannot be told."""
    try:
        if getattr(trainer, "is_deepspeed_enabled", False):
            plugin = trainer.accelerator.state.deepspeed_plugin
            stage = plugin.zero_stage
            zero = plugin.deepspeed_config.get("zero_optimization", {})
            off = any(
                str((zero.get(k) or {}).get("device", "none")) not in ("none", "None")
                for k in ("offload_optimizer", "offload_param")
            )
            kind = _shardings.from_engine(_shardings.DEEPSPEED, stage, off)
            return kind.name if kind is not None else None
        if getattr(trainer, "is_fsdp_enabled", False):
            kind = _shardings.from_engine(_shardings.FSDP)
            return kind.name if kind is not None else None
        return _shardings.NONE.name
    except Exception:
        return None


def params(model) -> tuple[int, int]:
    total = trainable = 0
    for p in model.parameters():
        n = int(getattr(p, "ds_numel", 0) or p.numel())  # ZeRO-3 keeps a partition: ds_numel is the whole
        total += n
        trainable += n if p.requires_grad else 0
    return total, trainable


def oom_kind(exc: BaseException) -> str | None:
    """The OOM kind of an exception chain (fttui's kinds: ``cpu``, ``nccl``, ``cuda``, ``bnb``)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        low = str(e).lower()
        if isinstance(e, MemoryError) or "defaultcpuallocator: can't allocate memory" in low:
            return "cpu"
        if "nccl" in low and "out of memory" in low:
            return "nccl"
        if type(e).__name__ == "OutOfMemoryError" or "cuda out of memory" in low:
            return "cuda"
        if "bitsandbytes" in low and "memory" in low:
            return "bnb"
        e = e.__cause__ or e.__context__
    return None
