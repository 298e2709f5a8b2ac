"""Model construction for every method of the contract, parameter counting, DeepSpeed config.

Weight dtype per method and precision (``train.precision``):
  fp32 -> float32 everywhere.
  bf16 -> bfloat16 weights (Trainer ``bf16=True`` autocast on top).
  fp16 -> full / full-zero3-offload keep float32 master weights (fp16 AMP cannot unscale fp16
          gradients); the frozen base of the LoRA family is loaded in float16 (adapters stay fp32).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
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
        # on a GPU the random weights are drawn where they will train: a 7B model initialises
        # in seconds there instead of minutes on the host, and the host never holds a copy.
        # ZeRO-3 keeps the host build (DeepSpeed partitions from the host copy).
        where = (torch.device("cuda", local_rank) if use_cuda and method != "full-zero3-offload"
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

        if method in ("qlora", "lora-int8") and (resolved.get("quant") or {}).get("prepare", "peft") == "peft":
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        if gc:
            enable_checkpointing(model)
            model.enable_input_require_grads()
        model = get_peft_model(model, lora_config(resolved, model))
    total, trainable = count_params(model)
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    return model, {"params_total": total, "params_trainable": trainable, "dtype": dtype, "method": method,
                   "structure": model_structure(model)}


# ------------------------------------------------------------------ evidence of what was built

_LAYER_INDEX = re.compile(r"\.\d+(?=\.|$)")
_ADAPTER_PARTS = ("lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B", "lora_magnitude_vector")


def _pattern(name: str) -> str:
    """``base_model.model.model.layers.3.mlp.up_proj.lora_A.default.weight`` ->
    ``model.layers.*.mlp.up_proj.lora_A.weight``: layer indexes folded, PEFT prefix and adapter
    name dropped, so a 80-layer model gives as few keys as a 2-layer one."""
    if name.startswith("base_model.model."):
        name = name[len("base_model.model."):]
    name = _LAYER_INDEX.sub(".*", name)
    return name.replace(".default.", ".").removesuffix(".default")


def _short_class(obj) -> str:
    """A readable qualified class name: ``bnb.Linear4bit``, ``lora.Linear4bit``, ``nn.Linear``."""
    cls = type(obj)
    mod = cls.__module__
    if mod.startswith("bitsandbytes."):
        return f"bnb.{cls.__name__}"
    if mod.startswith("peft.tuners.lora"):
        return f"lora.{cls.__name__}"
    if mod.startswith("peft."):
        return f"peft.{cls.__name__}"
    if mod.startswith("torch.nn."):
        return f"nn.{cls.__name__}"
    if mod.startswith("deepspeed."):
        return f"deepspeed.{cls.__name__}"
    return f"{mod}.{cls.__name__}"


def _dtype_name(dt) -> str | None:
    return None if dt is None else str(dt).replace("torch.", "")


def model_structure(model) -> dict[str, Any]:
    """What the model is made of, small enough for the ``start`` event:

    ``modules``: count per class of the layers that tell the methods apart (``nn.Linear``,
    ``bnb.Linear4bit``, ``bnb.Linear8bitLt``, ``lora.Linear``, ``lora.Linear4bit``,
    ``peft.ModulesToSaveWrapper``, ``nn.Embedding``); ``linear``: base linear layers (LoRA
    adapters left out) by name pattern -> class; ``trainable``: trainable parameter count by name
    pattern; ``quant``: the bitsandbytes storage of the base weights (``bits``, ``quant_type``,
    ``double_quant``, ``compute_dtype``, ``storage_dtype``) or None.
    """
    import torch

    modules: dict[str, int] = {}
    linear: dict[str, str] = {}
    quant: dict[str, Any] | None = None
    for name, mod in model.named_modules():
        short = _short_class(mod)
        if short.startswith(("bnb.", "lora.", "peft.")) or short in ("nn.Linear", "nn.Embedding"):
            modules[short] = modules.get(short, 0) + 1
        if isinstance(mod, torch.nn.Linear) and not any(p in name.split(".") for p in _ADAPTER_PARTS):
            linear[_pattern(name)] = short
        if quant is None and short in ("bnb.Linear4bit", "bnb.Linear8bitLt"):
            w = mod.weight
            qs = getattr(w, "quant_state", None)
            quant = {
                "bits": 4 if short == "bnb.Linear4bit" else 8,
                "storage_dtype": _dtype_name(w.dtype),
                "weight_class": type(w).__name__,
                "quant_type": getattr(qs, "quant_type", None) or getattr(w, "quant_type", None),
                "double_quant": bool(getattr(qs, "nested", False)) if qs is not None else None,
                "compute_dtype": _dtype_name(getattr(mod, "compute_dtype", None)),
            }
            if short == "bnb.Linear8bitLt":
                quant["threshold"] = getattr(getattr(mod, "state", None), "threshold", None)
    trainable: dict[str, int] = {}
    seen = set()
    for name, p in model.named_parameters():
        if id(p) in seen or not p.requires_grad:
            continue
        seen.add(id(p))
        key = _pattern(name)
        trainable[key] = trainable.get(key, 0) + int(getattr(p, "ds_numel", None) or p.numel())
    return {"modules": modules, "linear": linear, "trainable": trainable, "quant": quant}


def _qualname(obj) -> str:
    return f"{type(obj).__module__}.{type(obj).__name__}"


def optimizer_info(optimizer, hf_name: str | None = None) -> dict[str, Any] | None:
    """The optimizer actually stepping: the wrapper chain (accelerate, DeepSpeed ZeRO) down to the
    innermost optimizer, whose class says where its state lives (``DeepSpeedCPUAdam``: host RAM)."""
    if optimizer is None:
        return None
    chain, opt = [], optimizer
    for _ in range(6):
        chain.append(_qualname(opt))
        inner = getattr(opt, "optimizer", None)
        if inner is None or inner is opt:
            break
        opt = inner
    args = getattr(opt, "args", None)
    return {
        "name": hf_name,
        "class": type(opt).__name__,
        "chain": chain,
        "paged": getattr(opt, "is_paged", None),
        "optim_bits": getattr(args, "optim_bits", None) if args is not None else None,
    }


def _offload(conf) -> dict[str, Any] | None:
    if conf is None:
        return None
    dev = getattr(conf, "device", None)
    return {"device": getattr(dev, "value", dev), "pin_memory": getattr(conf, "pin_memory", None)}


def deepspeed_info(engine) -> dict[str, Any]:
    """What the DeepSpeed engine runs with, read back from the engine (not from our config)."""
    info: dict[str, Any] = {"engine": _qualname(engine)}
    for key, fn in (("zero_stage", "zero_optimization_stage"), ("train_batch_size", "train_batch_size"),
                    ("micro_batch", "train_micro_batch_size_per_gpu"),
                    ("grad_accum", "gradient_accumulation_steps")):
        try:
            info[key] = getattr(engine, fn)()
        except Exception:
            info[key] = None
    for key, fn in (("offload_optimizer", "zero_offload_optimizer"), ("offload_param", "zero_offload_param")):
        try:
            info[key] = _offload(getattr(engine, fn)())
        except Exception:
            info[key] = None
    params = partitioned = 0
    devices: set[str] = set()
    module = getattr(engine, "module", None)
    for p in (module.parameters() if module is not None else ()):
        params += 1
        if hasattr(p, "ds_id"):
            partitioned += 1
            t = getattr(p, "ds_tensor", None)
            if t is not None:
                devices.add(str(t.device))
    info["params"] = params
    info["params_partitioned"] = partitioned  # ZeRO-3: every parameter is a partitioned ds param
    info["partition_devices"] = sorted(devices)
    return info


def runtime_info(trainer) -> dict[str, Any]:
    """Evidence gathered once training is set up (``start`` event): the wrapped model's class, the
    optimizer chain, the process group and, under DeepSpeed, the engine's ZeRO settings."""
    out: dict[str, Any] = {}
    wrapped = getattr(trainer, "model_wrapped", None)
    out["wrapper"] = _qualname(wrapped) if wrapped is not None else None
    optim = getattr(trainer.args, "optim", None)
    out["optimizer"] = optimizer_info(getattr(trainer, "optimizer", None), getattr(optim, "value", optim))
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            out["distributed"] = {"backend": str(dist.get_backend()), "world_size": dist.get_world_size(),
                                  "rank": dist.get_rank()}
        else:
            out["distributed"] = None
    except Exception:
        out["distributed"] = None
    out["deepspeed"] = None
    if getattr(trainer, "is_deepspeed_enabled", False):
        engine = getattr(trainer, "deepspeed", None) or wrapped
        out["deepspeed"] = deepspeed_info(engine)
    return out


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
