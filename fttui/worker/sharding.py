"""The sharding a run asks for (profile key ``sharding``), as the Trainer runs it, and what ran.

- ``zero2`` / ``zero2-offload`` / ``zero3`` / ``zero3-offload``: :func:`deepspeed_config`, the
  DeepSpeed config handed to ``TrainingArguments(deepspeed=dict)`` (stage 2 or 3; ``-offload``:
  the optimizer states on the host, for stage 3 the parameters too, as ``[deepspeed]`` says).
- ``fsdp`` / ``fsdp-offload``: :func:`fsdp_arguments`, PyTorch FSDP2 through the Trainer and
  accelerate (``-offload``: parameters, gradients and optimizer states on the host; GPU only).
  accelerate switches to FSDP only for GPU-like device types: on CPU ranks it would silently run
  DDP. :func:`trainer_class` gives the Trainer a subclass whose accelerator, right after it is
  created, is put in FSDP mode with the same plugin when it stayed in CPU DDP mode; accelerate's
  own ``prepare`` then shards the model (``fully_shard``).
- FSDP's checkpoints are sharded (``SHARDED_STATE_DICT``: each rank writes and reads its own
  shard of the model and of the optimizer's states through ``torch.distributed.checkpoint``, in
  ``pytorch_model_fsdp_0/`` and ``optimizer_0/``), so that no rank holds every rank's states at a
  save or a resume (issue 44, item 3). The same subclass saves the final model whole
  (``save_model`` outside a checkpoint: the full state dict, gathered on the lowest rank) and
  resumes a checkpoint in the format it was written in (:func:`fsdp_checkpoint_format`: the full
  state dict of a run before the change, ``pytorch_model_fsdp.bin`` and ``optimizer.bin``, still
  loads).
- :func:`sharding_info` reads back what runs (the DeepSpeed engine's stage and offload devices,
  the FSDP-wrapped module and its offload policy, the parameters this rank holds);
  :func:`check_sharding` fails the run when that is not what the profile asked for.

Imports nothing heavy at import time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fttui.core.base import shardings
from fttui.core.profiles.typed import Profile

from .errors import ConfigError

__all__ = [
    "sharding_of",
    "kind_of",
    "deepspeed_settings",
    "deepspeed_config",
    "deepspeed_optimizer",
    "fsdp_arguments",
    "fsdp_checkpoint_format",
    "trainer_class",
    "sharding_info",
    "check_sharding",
    "held_tensors",
    "optimizer_owner",
]


def sharding_of(profile: Profile) -> str:
    """The sharding a profile asks for (a ``profile.json`` of an older run has no ``sharding``
    key: its ``full-zero3-offload`` method is ZeRO-3 offload, anything else none)."""
    return profile.sharding


def kind_of(profile: Profile) -> shardings.Sharding:
    """The registry's entry of :func:`sharding_of` (ConfigError for a name it does not know)."""
    kind = shardings.find(sharding_of(profile))
    if kind is None:
        raise ConfigError(f"sharding: unknown value {sharding_of(profile)!r} (use one of {', '.join(shardings.NAMES)})")
    return kind


def deepspeed_settings(profile: Profile) -> dict[str, Any]:
    """The ``[deepspeed]`` settings (``[zero3]`` in a ``profile.json`` written before sharding)."""
    return profile.deepspeed.to_dict()


def deepspeed_config(profile: Profile, world_size: int) -> dict[str, Any]:
    """The DeepSpeed config of a ``zero*`` sharding: stage 2 or 3; ``-offload`` puts the optimizer
    states (``offload_optimizer``) and, for stage 3, the parameters (``offload_params``) on the
    host, page-locked when ``pin_memory``; ``stage3_max_reuse_distance`` and
    ``stage3_max_live_parameters`` go to stage 3 when set. ``[deepspeed] optimizer``: ``trainer`` (no
    ``optimizer`` section: the Trainer's optimizer is used, DeepSpeed swaps in its CPU Adam when
    the optimizer states are offloaded) or ``deepspeed`` (:func:`deepspeed_optimizer`)."""
    prof = profile
    kind = kind_of(prof)
    if not kind.deepspeed:
        raise ConfigError(
            f"sharding: {kind.name!r} is not a DeepSpeed sharding ({', '.join(shardings.names(shardings.DEEPSPEED))})"
        )
    t, z = prof.train, prof.deepspeed
    stage, offload = kind.stage, kind.offload
    micro, accum, pin = t.batch_size, t.grad_accum, z.pin_memory
    zero: dict[str, Any] = {
        "stage": stage,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "reduce_bucket_size": "auto",
    }
    if stage == 3:
        zero.update(
            {
                "stage3_prefetch_bucket_size": "auto",
                "stage3_param_persistence_threshold": "auto",
                "stage3_gather_16bit_weights_on_model_save": True,
            }
        )
        # [deepspeed] stage3_max_*: passed only when set (DeepSpeed's defaults otherwise)
        zero.update(
            {
                k: getattr(z, k)
                for k in ("stage3_max_reuse_distance", "stage3_max_live_parameters")
                if getattr(z, k) is not None
            }
        )
    else:
        zero.update({"allgather_partitions": True, "allgather_bucket_size": 2e8, "reduce_scatter": True})
    if offload and z.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": pin}
    if offload and stage == 3 and z.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": pin}
    precision = t.precision
    out: dict[str, Any] = {
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
    if z.optimizer == "deepspeed":
        out["optimizer"] = deepspeed_optimizer()
    return out


def deepspeed_optimizer() -> dict[str, Any]:
    """The ``optimizer`` section of a run whose optimizer DeepSpeed owns (``[deepspeed] optimizer =
    "deepspeed"``): DeepSpeed's AdamW with the Trainer's values (``auto``: learning rate, betas,
    eps, weight decay), as Qwen's and LLaMA-Factory's DeepSpeed JSONs write it. DeepSpeed builds
    its fused Adam on a GPU (stepping the fp32 partition in place, no per-parameter temporaries)
    and its CPU Adam when the optimizer states are on the host."""
    return {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}}


#: accelerate's names of the FSDP state dict types (``FullyShardedDataParallelPlugin.state_dict_type``)
FULL, SHARDED = "FULL_STATE_DICT", "SHARDED_STATE_DICT"
#: the file of a Trainer's FSDP checkpoint written with the full state dict (accelerate's
#: ``FSDP_MODEL_NAME``); a sharded one has the folder ``pytorch_model_fsdp_0/`` instead
_FULL_MODEL_FILE = "pytorch_model_fsdp.bin"


def fsdp_arguments(profile: Profile) -> dict[str, Any]:
    """``TrainingArguments`` keys of an ``fsdp*`` sharding: FSDP2, every decoder layer its own
    unit (the model's ``_no_split_modules``), parameters resharded after the forward (full
    sharding of parameters, gradients and optimizer states); ``fsdp-offload`` adds the CPU
    offload policy. ``cpu_ram_efficient_loading``: the lowest rank alone holds the weights
    before sharding, the others build on the meta device (:mod:`.partition`) and receive their
    shards from it (not for the quantised methods: accelerate broadcasts no 4-bit parameters).
    ``state_dict_type``: the checkpoints' (sharded; the final model is saved whole by
    :func:`trainer_class`'s subclass)."""
    kind = kind_of(profile)
    if not kind.fsdp:
        raise ConfigError(
            f"sharding: {kind.name!r} is not an FSDP sharding ({', '.join(shardings.names(shardings.FSDP))})"
        )
    return {
        "fsdp": "full_shard",
        "fsdp_config": {
            "version": 2,
            "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "reshard_after_forward": True,
            "cpu_offload": kind.offload,
            "state_dict_type": SHARDED,
            "cpu_ram_efficient_loading": not profile.method_kind().quantised,
        },
    }


def _promote_fsdp(trainer) -> None:
    """FSDP on CPU ranks: accelerate leaves a CPU process group in DDP mode (``MULTI_CPU``) even
    with an FSDP plugin; put the state in FSDP mode with the plugin the Trainer built its
    arguments for, before anything is prepared. Other modes are left alone (the check after
    preparation says what ran)."""
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    args_plugin = getattr(trainer.args, "fsdp_plugin_args", None)
    state = trainer.accelerator.state
    if args_plugin is None or getattr(state, "fsdp_plugin", None) is not None:
        return
    if state.distributed_type != DistributedType.MULTI_CPU:
        return
    plugin = FullyShardedDataParallelPlugin(**args_plugin)
    if state.mixed_precision != "no":
        plugin.set_mixed_precision(state.mixed_precision)
    state.fsdp_plugin = plugin
    state.distributed_type = DistributedType.FSDP
    from accelerate.state import PartialState

    PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    trainer.is_fsdp_enabled = True


def fsdp_checkpoint_format(checkpoint: str) -> str:
    """The state dict type a Trainer's FSDP checkpoint was written in: :data:`FULL` when it holds
    ``pytorch_model_fsdp.bin`` (a run of fttui before its checkpoints were sharded), else
    :data:`SHARDED`."""
    return FULL if os.path.isfile(os.path.join(checkpoint, _FULL_MODEL_FILE)) else SHARDED


@contextmanager
def _state_dict_type(trainer, kind: str) -> Iterator[None]:
    """The FSDP plugin's state dict type set to ``kind`` (with that type's default configs, as
    accelerate builds them) for the block, then restored; nothing without an FSDP plugin."""
    plugin = getattr(getattr(trainer.accelerator, "state", None), "fsdp_plugin", None)
    if plugin is None or str(plugin.state_dict_type).endswith(kind):
        yield
        return
    saved = (plugin.state_dict_type, plugin.state_dict_config, plugin.optim_state_dict_config)
    plugin.state_dict_config = plugin.optim_state_dict_config = None
    plugin.set_state_dict_type(kind)
    try:
        yield
    finally:
        plugin.state_dict_type, plugin.state_dict_config, plugin.optim_state_dict_config = saved


def trainer_class(base: type, sharding: str) -> type:
    """``base`` (the counting Trainer), or for an FSDP sharding a subclass that keeps FSDP on
    CPU ranks (:func:`_promote_fsdp`), saves the final model whole (the full state dict: a
    checkpoint's save, ``_internal_call``, stays sharded) and loads a checkpoint in its own
    format (:func:`fsdp_checkpoint_format`)."""
    if not (shardings.find(sharding) or shardings.NONE).fsdp:
        return base

    class FsdpTrainer(base):
        def create_accelerator_and_postprocess(self) -> None:
            super().create_accelerator_and_postprocess()
            _promote_fsdp(self)

        def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
            if _internal_call:
                return super().save_model(output_dir, _internal_call)
            with _state_dict_type(self, FULL):
                return super().save_model(output_dir, _internal_call)

        def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
            with _state_dict_type(self, fsdp_checkpoint_format(resume_from_checkpoint)):
                return super()._load_from_checkpoint(resume_from_checkpoint, model)

        def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
            if checkpoint is None:
                return super()._load_optimizer_and_scheduler(checkpoint)
            with _state_dict_type(self, fsdp_checkpoint_format(checkpoint)):
                return super()._load_optimizer_and_scheduler(checkpoint)

    FsdpTrainer.__name__ = FsdpTrainer.__qualname__ = f"Fsdp{base.__name__}"
    return FsdpTrainer


def _qualname(obj) -> str:
    return f"{type(obj).__module__}.{type(obj).__name__}"


def _local_numel(p) -> int:
    """Elements of a parameter this rank holds: a DTensor's local shard, a ZeRO-3 partition."""
    ds = getattr(p, "ds_tensor", None)
    if ds is not None:
        return int(ds.numel())
    to_local = getattr(p, "to_local", None)
    if callable(to_local):
        return int(to_local().numel())
    return int(p.numel())


def _fsdp_modules(model) -> list:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def _fsdp_offload(modules) -> bool | None:
    """Whether the FSDP2 parameter groups offload to the host (their offload policy)."""
    from torch.distributed.fsdp import CPUOffloadPolicy

    seen = None
    for m in modules:
        try:
            group = m._get_fsdp_state()._fsdp_param_group
        except AttributeError:  # evidence only: a torch whose FSDP2 internals moved
            return None
        if group is not None:
            seen = bool(seen) or isinstance(group.offload_policy, CPUOffloadPolicy)
    return seen


def optimizer_owner(trainer) -> str:
    """``deepspeed`` when the DeepSpeed config the engine runs with has an ``optimizer`` section
    (DeepSpeed builds the optimizer), else ``trainer``."""
    conf = getattr(getattr(getattr(trainer, "args", None), "hf_deepspeed_config", None), "config", None)
    return "deepspeed" if isinstance(conf, dict) and conf.get("optimizer") else "trainer"


def _innermost(opt) -> str | None:
    """The class name of the optimizer that steps, below accelerate's and DeepSpeed's wrappers."""
    for _ in range(6):
        inner = getattr(opt, "optimizer", None)
        if inner is None or inner is opt:
            break
        opt = inner
    return type(opt).__name__ if opt is not None else None


def sharding_info(trainer, asked: str | None = None) -> dict[str, Any]:
    """What shards the run, read back from the objects that train: ``ran`` (a ``sharding``
    value), ``distributed_type`` (accelerate's), and per kind the engine's ZeRO stage and
    offload devices or the FSDP modules and offload policy; ``params`` / ``params_local``:
    elements of every parameter and of the part this rank holds; ``gathers_sliced``
    (DeepSpeed on CPU ranks): the gathers made in slices so far, None when not sliced
    (:mod:`fttui.worker.gloogather`)."""
    from .gloogather import sliced_so_far

    info: dict[str, Any] = {"asked": asked}
    acc = getattr(trainer, "accelerator", None)
    dtype = getattr(getattr(acc, "state", None), "distributed_type", None)
    info["distributed_type"] = getattr(dtype, "value", None if dtype is None else str(dtype))
    wrapped = getattr(trainer, "model_wrapped", None)
    model = wrapped if wrapped is not None else getattr(trainer, "model", None)
    if getattr(trainer, "is_deepspeed_enabled", False):
        engine: Any = getattr(trainer, "deepspeed", None) or wrapped  # DeepSpeed's engine (no type hints)
        stage = engine.zero_optimization_stage()
        devices = []
        for fn in ("zero_offload_optimizer", "zero_offload_param"):
            conf = getattr(engine, fn)()
            dev = getattr(conf, "device", None) if conf is not None else None
            devices.append(str(getattr(dev, "value", dev) or "none"))
        offload = any(d in ("cpu", "nvme") for d in devices)
        ran = shardings.from_engine(shardings.DEEPSPEED, stage, offload)
        info.update(
            kind="deepspeed",
            zero_stage=stage,
            offload_optimizer=devices[0],
            offload_param=devices[1],
            ran=ran.name if ran is not None else f"zero{stage}",
            optimizer_owner=optimizer_owner(trainer),
            optimizer=_innermost(getattr(trainer, "optimizer", None)),
            gathers_sliced=sliced_so_far(),
        )
        model = getattr(engine, "module", model)
    else:
        fsdp = _fsdp_modules(model) if model is not None else []
        if fsdp:
            fsdp_offload = _fsdp_offload(fsdp)
            ran = shardings.from_engine(shardings.FSDP, offload=bool(fsdp_offload))
            info.update(
                kind="fsdp",
                fsdp_modules=len(fsdp),
                fsdp_root=_qualname(model),
                offload=fsdp_offload,
                ran=ran.name if ran is not None else shardings.FSDP,
            )
        else:
            info.update(kind="none", ran=shardings.NONE.name)
    params = local = 0
    seen: set[int] = set()
    for p in model.parameters() if model is not None else ():
        if id(p) in seen:
            continue
        seen.add(id(p))
        params += int(getattr(p, "ds_numel", None) or p.numel())
        local += _local_numel(p)
    info["params"], info["params_local"] = params, local
    return info


def check_sharding(asked: str, info: dict[str, Any]) -> None:
    """ConfigError (one line) when the sharding that runs is not the one asked for."""
    ran = info.get("ran")
    if ran == asked:
        return
    raise ConfigError(
        f"sharding {asked!r} was asked for but {ran!r} runs (accelerate distributed type "
        f"{info.get('distributed_type')}, wrapper {info.get('wrapper') or '?'}); "
        "refusing to record a run under the wrong sharding"
    )


def held_tensors(trainer) -> dict[str, int]:
    """Bytes this rank holds in parameters and optimizer states, from the tensors themselves
    (local shards of DTensors; ZeRO-3 partitions; DeepSpeed's flat fp32 partitions)."""
    import torch

    def nbytes(t) -> int:
        if hasattr(t, "to_local"):
            t = t.to_local()
        return int(t.numel() * t.element_size())

    wrapped = getattr(trainer, "model_wrapped", None) or trainer.model
    model = getattr(wrapped, "module", wrapped) if getattr(trainer, "is_deepspeed_enabled", False) else wrapped
    params = 0
    seen: set[int] = set()
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            ds = getattr(p, "ds_tensor", None)
            params += nbytes(ds) if ds is not None else nbytes(p)
    opt = trainer.optimizer
    inner = opt
    for _ in range(6):  # accelerate / DeepSpeed wrappers down to the optimizer that holds state
        nxt = getattr(inner, "optimizer", None)
        if nxt is None or nxt is inner:
            break
        inner = nxt
    states = 0
    seen_t: set[int] = set()
    for st in getattr(inner, "state", {}).values():
        for v in st.values():
            if isinstance(v, torch.Tensor) and v.dim() > 0 and id(v) not in seen_t:
                seen_t.add(id(v))
                states += nbytes(v)
    return {"params": params, "optimizer_states": states}
