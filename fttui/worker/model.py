"""Building the model for every method of the contract: the base causal LM (pretrained or random,
quantised for qlora / lora-int8), gradient checkpointing, and the PEFT wrapping of the LoRA
family; :func:`build_model` returns it with the evidence of what was built.

The configs it is built from live in :mod:`.model_config` (dtypes, quantisation, DeepSpeed), the
adapters in :mod:`.lora`, the evidence in :mod:`.structure`. Imports nothing heavy at import time.
"""

from __future__ import annotations

import contextlib
import tempfile
from typing import Any

from fttui.core.base.constants import FULL_METHODS, KBIT_METHODS, METHODS

from .errors import ConfigError
from .lora import lora_config
from .model_config import device_map, load_config, quant_config, torch_dtype
from .sharding import deepspeed_config, kind_of
from .structure import count_params, model_structure

# deepspeed_config is re-exported: callers import it from here without loading torch.
__all__ = ["load_base_model", "enable_checkpointing", "build_model", "deepspeed_config"]


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
    qconf = quant_config(method, resolved)
    seed = int(resolved["train"].get("seed", 42))
    torch.manual_seed(seed)
    init = m.get("init", "pretrained")
    kwargs: dict[str, Any] = {"dtype": dtype, "attn_implementation": attn, "trust_remote_code": trust}
    if qconf is not None:
        kwargs["quantization_config"] = qconf
        kwargs["device_map"] = device_map(use_cuda, local_rank)
    if init == "pretrained":
        path = m.get("name_or_path")
        if not path:
            raise ConfigError("model.name_or_path: required")
        return AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if init != "random":
        raise ConfigError(f"model.init: unknown value {init!r} (use pretrained or random)")
    config = load_config(m)
    if qconf is None:
        # on a GPU the random weights are drawn where they will train: a 7B model initialises
        # in seconds there instead of minutes on the host, and the host never holds a copy.
        # DeepSpeed keeps the host build (it moves or partitions the host copy itself).
        where = (torch.device("cuda", local_rank) if use_cuda and not kind_of(resolved).deepspeed
                 else contextlib.nullcontext())
        with where:
            return AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn,
                                                    trust_remote_code=trust)
    # bitsandbytes quantises while loading weights: materialise the random model once in a
    # temporary folder and load it back quantised (the fp weights are freed before loading).
    fp = AutoModelForCausalLM.from_config(config, dtype=dtype, trust_remote_code=trust)
    with tempfile.TemporaryDirectory(prefix="fttui-randinit-") as tmp:
        fp.save_pretrained(tmp)
        del fp
        return AutoModelForCausalLM.from_pretrained(tmp, **kwargs)


def enable_checkpointing(model) -> None:
    kw = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kw)
    else:  # older transformers
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)


def build_model(resolved: dict[str, Any], *, use_cuda: bool = False, local_rank: int = 0):
    """Model ready for the Trainer (PEFT-wrapped for the LoRA family). Returns ``(model, info)``
    with ``info = {"params_total", "params_trainable", "dtype", "method", "structure"}``
    (``structure``: :func:`model_structure`)."""
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

        if method in KBIT_METHODS and (resolved.get("quant") or {}).get("prepare", "peft") == "peft":
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        if gc:
            enable_checkpointing(model)
            model.enable_input_require_grads()
        model = get_peft_model(model, lora_config(resolved, model))
    total, trainable = count_params(model)
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    return model, {"params_total": total, "params_trainable": trainable, "dtype": dtype, "method": method,
                   "structure": model_structure(model)}
