"""What the resolved profile asks of the model, as the configs it is built and trained with:
the weight and compute dtypes, the transformers config of a random-init model, the bitsandbytes
quantisation config (qlora / lora-int8) and the device map (the DeepSpeed config of each
sharding is :mod:`.sharding`'s).

Weight dtype per method and precision (``train.precision``):
  fp32 -> float32 everywhere.
  bf16 -> bfloat16 weights (Trainer ``bf16=True`` autocast on top).
  fp16 -> full / full-zero3-offload keep float32 master weights (fp16 AMP cannot unscale fp16
          gradients); the frozen base of the LoRA family is loaded in float16 (adapters stay fp32).
Imports nothing heavy at import time (torch and transformers are imported inside the functions).
"""

from __future__ import annotations

import json
import os

from fttui.core.base.errors import EstimateError
from fttui.core.models.numbers import config_numbers
from fttui.core.profiles.frozen import thaw
from fttui.core.profiles.typed import ModelSettings, Profile

from .errors import ConfigError

__all__ = ["torch_dtype", "compute_dtype", "load_config", "quant_config", "device_map"]


def torch_dtype(precision: str, full: bool = True):
    """The dtype the weights load in; ``full``: full fine-tuning (fp16 AMP keeps fp32 weights)."""
    import torch

    if precision == "bf16":
        return torch.bfloat16
    if precision == "fp16":
        return torch.float32 if full else torch.float16
    if precision in ("fp32", "", None):
        return torch.float32
    raise ConfigError(f"train.precision: unknown value {precision!r} (use fp32, fp16 or bf16)")


def compute_dtype(precision: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)


def load_config(m: ModelSettings):
    """The transformers config of a ``model.init = "random"`` model: ``model.config`` (a
    config.json or its folder; resolution sets it to the config.json of a model folder or a
    cached hub id given as ``model.name_or_path``) or ``model.arch``, with ``model.arch_config``
    on top. The numbers are the ones the estimator reads (:func:`config_numbers`)."""
    from transformers import AutoConfig

    arch_config = thaw(dict(m.arch_config or {}))  # a typed profile's tables are read-only
    cfg_path = m.config
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
        if not isinstance(raw, dict):
            raise ConfigError(f"model.config: {cfg_path}: not a JSON object")
        try:
            # the decoder's numbers (a multimodal config's text_config), without the meta keys
            model_type, raw = config_numbers(raw, m.arch)
        except EstimateError:
            raise ConfigError(f"model.config: {cfg_path}: no model_type (set model.arch)") from None
        raw.update(arch_config)
        raw.pop("quantization_config", None)  # random weights: the method decides the quantisation
        try:
            return AutoConfig.for_model(model_type, **raw)
        except ValueError as e:
            raise ConfigError(f"model.config: {cfg_path}: {e}".splitlines()[0]) from None
    arch = m.arch
    if not arch:
        raise ConfigError('model.arch: required with model.init = "random" (or set model.config)')
    try:
        return AutoConfig.for_model(arch, **arch_config)
    except ValueError as e:
        raise ConfigError(f"model.arch: {e}".splitlines()[0]) from None


def quant_config(prof: Profile):
    """The ``BitsAndBytesConfig`` of a k-bit method: qlora (4-bit, ``quant`` section) and lora-int8
    (8-bit); for a GPTQ / AWQ checkpoint, the loading settings that override its stored ones (a
    kernel that trains); else None."""
    method = prof.method_kind()
    if not method.quantised:
        return _prequant_config(prof)
    from transformers import BitsAndBytesConfig

    if method.bits == 8:
        return BitsAndBytesConfig(load_in_8bit=True)
    kwargs = {}
    kind = prof.sharding_kind()
    if kind.zero3 or kind.fsdp:
        # QLoRA under ZeRO-3 / FSDP: the packed 4-bit weights stored in the compute dtype, so that
        # the engine can shard them as float tensors (PEFT's and accelerate's QLoRA + FSDP /
        # DeepSpeed guides); uint8 storage would be left whole on every rank
        kwargs["bnb_4bit_quant_storage"] = compute_dtype(prof.train.precision)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=prof.quant.type,
        bnb_4bit_use_double_quant=prof.quant.double_quant,
        bnb_4bit_compute_dtype=compute_dtype(prof.train.precision),
        **kwargs,
    )


def device_map(use_cuda: bool, local_rank: int):
    """Where a quantised model is loaded: this rank's GPU, or the host."""
    return {"": local_rank} if use_cuda else "cpu"


def _prequant_config(prof: Profile):
    """A GPTQ / AWQ checkpoint is loaded with ``backend="auto_trainable"``: GPT-QModel picks
    among its kernels that have a backward (on a GPU the fastest one is not always one of them);
    the rest of its ``quantization_config`` comes from the checkpoint."""
    from fttui.core.models.prequant import PREQUANT_METHODS, checkpoint_quant

    q = checkpoint_quant(prof.model)
    if q is None or q.method not in PREQUANT_METHODS:
        return None
    from transformers import AwqConfig, GPTQConfig

    if q.method == "gptq":
        return GPTQConfig(bits=q.bits or 4, backend="auto_trainable")
    from transformers.utils.quantization_config import AwqBackend

    return AwqConfig(bits=q.bits or 4, backend=AwqBackend.AUTO_TRAINABLE)
