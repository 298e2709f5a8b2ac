"""Evidence of how training runs, gathered once the Trainer is set up (``start`` event): the
wrapper around the model, the optimizer chain down to the one that steps, the process group,
under DeepSpeed the engine's ZeRO settings read back from the engine (not from our config), and
the sharding that runs (:func:`fttui.worker.sharding.sharding_info`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["optimizer_info", "deepspeed_info", "runtime_info"]


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
    for key, fn in (
        ("zero_stage", "zero_optimization_stage"),
        ("train_batch_size", "train_batch_size"),
        ("micro_batch", "train_micro_batch_size_per_gpu"),
        ("grad_accum", "gradient_accumulation_steps"),
    ):
        try:
            info[key] = getattr(engine, fn)()
        except Exception:  # evidence only: an engine without this accessor (or one that fails) gives None
            info[key] = None
    for key, fn in (("offload_optimizer", "zero_offload_optimizer"), ("offload_param", "zero_offload_param")):
        try:
            info[key] = _offload(getattr(engine, fn)())
        except Exception:  # evidence only, as above
            info[key] = None
    params = partitioned = 0
    devices: set[str] = set()
    module = getattr(engine, "module", None)
    for p in module.parameters() if module is not None else ():
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


def training_precision(args, engine=None) -> str:
    """The precision training runs in, read back: DeepSpeed's engine when there is one, else the
    Trainer's mixed-precision flags (``bf16`` / ``fp16`` autocast), else ``fp32``."""
    if engine is not None:
        for name, label in (("bfloat16_enabled", "bf16"), ("fp16_enabled", "fp16")):
            fn = getattr(engine, name, None)
            try:
                if callable(fn) and fn():
                    return label
            except Exception:  # evidence only: fall back to the Trainer's flags
                break
    if getattr(args, "bf16", False):
        return "bf16"
    if getattr(args, "fp16", False):
        return "fp16"
    return "fp32"


def runtime_info(trainer) -> dict[str, Any]:
    """Evidence gathered once training is set up (``start`` event): the wrapped model's class, the
    optimizer chain, the process group and, under DeepSpeed, the engine's ZeRO settings."""
    out: dict[str, Any] = {}
    wrapped = getattr(trainer, "model_wrapped", None)
    out["wrapper"] = _qualname(wrapped) if wrapped is not None else None
    optim = getattr(trainer.args, "optim", None)
    out["optimizer"] = optimizer_info(getattr(trainer, "optimizer", None), getattr(optim, "value", optim))
    from .sharding import optimizer_owner, sharding_info

    if out["optimizer"] is not None:
        # who built it: the Trainer (its ``optim``) or DeepSpeed (the config's optimizer section)
        out["optimizer"]["owner"] = (
            optimizer_owner(trainer) if getattr(trainer, "is_deepspeed_enabled", False) else "trainer"
        )
        if out["optimizer"]["owner"] == "deepspeed":
            out["optimizer"]["name"] = "deepspeed"
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            out["distributed"] = {
                "backend": str(dist.get_backend()),
                "world_size": dist.get_world_size(),
                "rank": dist.get_rank(),
            }
        else:
            out["distributed"] = None
    except (ImportError, RuntimeError, ValueError):  # no torch.distributed, or no usable group
        out["distributed"] = None
    out["deepspeed"] = None
    engine = None
    if getattr(trainer, "is_deepspeed_enabled", False):
        engine = getattr(trainer, "deepspeed", None) or wrapped
        out["deepspeed"] = deepspeed_info(engine)
    out["precision"] = training_precision(trainer.args, engine)

    try:
        out["sharding"] = sharding_info(trainer, getattr(trainer, "fttui_sharding", None))
    except Exception as e:  # evidence only; the sharding check (trainer.py) fails the run on its own
        out["sharding"] = {"asked": getattr(trainer, "fttui_sharding", None), "ran": None, "error": repr(e)[:300]}
    return out
