"""Model construction for every method of the contract, parameter counting, DeepSpeed config.

Weight dtype per method and precision (``train.precision``):
  fp32 -> float32 everywhere.
  bf16 -> bfloat16 weights (Trainer ``bf16=True`` autocast on top).
  fp16 -> full / full-zero3-offload keep float32 master weights (fp16 AMP cannot unscale fp16
          gradients); the frozen base of the LoRA family is loaded in float16 (adapters stay fp32).
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from .errors import ConfigError

METHODS = ("full", "full-zero3-offload", "lora", "lora-emb", "qlora", "lora-int8")
LORA_METHODS = ("lora", "lora-emb", "qlora", "lora-int8")
FULL_METHODS = ("full", "full-zero3-offload")


def torch_dtype(precision: str, method: str = "full"):
    import torch

    if precision == "bf16":
        return torch.bfloat16
    if precision == "fp16":
        return torch.float32 if method in FULL_METHODS else torch.float16
    if precision in ("fp32", "", None):
        return torch.float32
    raise ConfigError(f"train.precision: unknown value {precision!r} (use fp32, fp16 or bf16)")


def compute_dtype(precision: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)


def count_params(model) -> tuple[int, int]:
    """(total, trainable) real parameter counts.

    bitsandbytes 4-bit weights (``Params4bit``) are stored packed (two 4-bit values per uint8, so
    ``numel()`` is half the real count, or less with other storage dtypes): the real count is the
    numel of ``quant_state.shape`` (the unquantised shape). Int8 weights have their real shape.
    Under DeepSpeed ZeRO-3 a partitioned parameter reports its full size in ``ds_numel``.
    """
    total = trainable = 0
    seen = set()
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        n = getattr(p, "ds_numel", None)
        if n is None:
            qs = getattr(p, "quant_state", None)
            shape = getattr(qs, "shape", None) if qs is not None else None
            if shape is not None and type(p).__name__ == "Params4bit":
                n = 1
                for d in shape:
                    n *= int(d)
            else:
                n = p.numel()
        total += n
        if p.requires_grad:
            trainable += n
    return total, trainable


def _load_config(m: dict[str, Any]):
    from transformers import AutoConfig

    arch_config = dict(m.get("arch_config") or {})
    cfg_path = m.get("config")
    if cfg_path:
        if os.path.isdir(cfg_path):
            cfg_path = os.path.join(cfg_path, "config.json")
        try:
            with open(cfg_path, encoding="utf-8") as f:
                raw = json.load(f)
        except FileNotFoundError:
            raise ConfigError(f"model.config: {cfg_path}: file not found") from None
        except ValueError as e:
            raise ConfigError(f"model.config: {cfg_path}: malformed JSON ({e})") from None
        model_type = raw.pop("model_type", None) or m.get("arch")
        if not model_type:
            raise ConfigError(f"model.config: {cfg_path}: no model_type (set model.arch)")
        raw.update(arch_config)
        for k in ("architectures", "transformers_version", "_name_or_path"):
            raw.pop(k, None)
        return AutoConfig.for_model(model_type, **raw)
    arch = m.get("arch")
    if not arch:
        raise ConfigError("model.arch: required with model.init = \"random\" (or set model.config)")
    try:
        return AutoConfig.for_model(arch, **arch_config)
    except ValueError as e:
        raise ConfigError(f"model.arch: {e}".splitlines()[0]) from None


def _quant_config(method: str, resolved: dict[str, Any]):
    if method not in ("qlora", "lora-int8"):
        return None
    from transformers import BitsAndBytesConfig

    if method == "lora-int8":
        return BitsAndBytesConfig(load_in_8bit=True)
    q = resolved.get("quant") or {}
    qtype = q.get("type", "nf4")
    if qtype not in ("nf4", "fp4"):
        raise ConfigError(f"quant.type: unknown value {qtype!r} (use nf4 or fp4)")
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=qtype,
        bnb_4bit_use_double_quant=bool(q.get("double_quant", True)),
        bnb_4bit_compute_dtype=compute_dtype(resolved["train"].get("precision", "fp32")),
    )


def _device_map(use_cuda: bool, local_rank: int):
    return {"": local_rank} if use_cuda else "cpu"


def load_base_model(resolved: dict[str, Any], *, use_cuda: bool = False, local_rank: int = 0):
    """The base causal-LM (quantised for qlora / lora-int8), before PEFT wrapping."""
    import torch
    from transformers import AutoModelForCausalLM

    m = resolved["model"]
    method = resolved.get("method", "lora")
    if method not in METHODS:
        raise ConfigError(f"method: unknown value {method!r} (use one of {', '.join(METHODS)})")
    precision = resolved["train"].get("precision", "fp32")
    dtype = torch_dtype(precision, method)
    attn = m.get("attn_implementation") or "sdpa"
    trust = bool(m.get("trust_remote_code"))
    qconf = _quant_config(method, resolved)
    seed = int(resolved["train"].get("seed", 42))
    torch.manual_seed(seed)
    init = m.get("init", "pretrained")
    kwargs: dict[str, Any] = {"dtype": dtype, "attn_implementation": attn, "trust_remote_code": trust}
    if qconf is not None:
        kwargs["quantization_config"] = qconf
        kwargs["device_map"] = _device_map(use_cuda, local_rank)
    if init == "pretrained":
        path = m.get("name_or_path")
        if not path:
            raise ConfigError("model.name_or_path: required")
        return AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if init != "random":
        raise ConfigError(f"model.init: unknown value {init!r} (use pretrained or random)")
    config = _load_config(m)
    if qconf is None:
        return AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn,
                                                trust_remote_code=trust)
    # bitsandbytes quantises while loading weights: materialise the random model once in a
    # temporary folder and load it back quantised (the fp weights are freed before loading).
    fp = AutoModelForCausalLM.from_config(config, dtype=dtype, trust_remote_code=trust)
    with tempfile.TemporaryDirectory(prefix="fttui-randinit-") as tmp:
        fp.save_pretrained(tmp)
        del fp
        return AutoModelForCausalLM.from_pretrained(tmp, **kwargs)


def _module_name(model, target) -> str | None:
    for name, mod in model.named_modules():
        if mod is target:
            return name.rsplit(".", 1)[-1]
    return None


def lora_config(resolved: dict[str, Any], model):
    from peft import LoraConfig

    lo = resolved.get("lora") or {}
    targets = lo.get("target_modules", ["q_proj", "v_proj"])
    if isinstance(targets, str) and targets != "all-linear":
        targets = [targets]
    kwargs: dict[str, Any] = {
        "r": int(lo.get("r", 8)),
        "lora_alpha": int(lo.get("alpha", 16)),
        "lora_dropout": float(lo.get("dropout", 0.05)),
        "target_modules": targets,
        "task_type": "CAUSAL_LM",
    }
    if resolved.get("method") == "lora-emb":
        # peft-standard way to train whole modules next to the adapters: modules_to_save
        # (a trainable copy of the input embeddings and of the LM head).
        names = []
        for mod in (model.get_input_embeddings(), model.get_output_embeddings()):
            n = _module_name(model, mod) if mod is not None else None
            if n and n not in names:
                names.append(n)
        if not names:
            raise ConfigError("method lora-emb: cannot find the embedding / lm_head modules of this model")
        kwargs["modules_to_save"] = names
        if getattr(model.config, "tie_word_embeddings", False):
            kwargs["ensure_weight_tying"] = True
    return LoraConfig(**kwargs)


def enable_checkpointing(model) -> None:
    kw = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kw)
    else:  # older transformers
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)


def build_model(resolved: dict[str, Any], *, use_cuda: bool = False, local_rank: int = 0):
    """Model ready for the Trainer (PEFT-wrapped for the LoRA family). Returns ``(model, info)``
    with ``info = {"params_total", "params_trainable", "dtype", "method"}``."""
    method = resolved.get("method", "lora")
    gc = bool(resolved["train"].get("gradient_checkpointing", False))
    model = load_base_model(resolved, use_cuda=use_cuda, local_rank=local_rank)
    model.config.use_cache = False
    if method in FULL_METHODS:
        for p in model.parameters():
            p.requires_grad_(True)
        if gc:
            enable_checkpointing(model)
    else:
        from peft import get_peft_model, prepare_model_for_kbit_training

        if method in ("qlora", "lora-int8"):
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        if gc:
            enable_checkpointing(model)
            model.enable_input_require_grads()
        model = get_peft_model(model, lora_config(resolved, model))
    total, trainable = count_params(model)
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    return model, {"params_total": total, "params_trainable": trainable, "dtype": dtype, "method": method}


def deepspeed_config(resolved: dict[str, Any], world_size: int) -> dict[str, Any]:
    """ZeRO-3 config with CPU offload of optimizer state and parameters."""
    t = resolved["train"]
    z = resolved.get("zero3") or {}
    micro = int(t.get("batch_size", 1))
    accum = int(t.get("grad_accum", 1))
    pin = bool(z.get("pin_memory", True))
    zero: dict[str, Any] = {
        "stage": 3,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto",
        "stage3_gather_16bit_weights_on_model_save": True,
    }
    if z.get("offload_optimizer", True):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": pin}
    if z.get("offload_params", True):
        zero["offload_param"] = {"device": "cpu", "pin_memory": pin}
    precision = t.get("precision", "fp32")
    return {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accum,
        "train_batch_size": micro * accum * max(1, int(world_size)),
        "gradient_clipping": "auto",
        "fp16": {"enabled": precision == "fp16"},
        "bf16": {"enabled": precision == "bf16"},
        "zero_optimization": zero,
        "steps_per_print": 1_000_000_000,
        "wall_clock_breakdown": False,
    }
