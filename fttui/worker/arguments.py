"""The run's ``TrainingArguments`` and what it keeps: :func:`plan` (save, evaluation, trackers
from the profile and the run's kind) and :func:`training_args` (the DeepSpeed config of a
``zero*`` sharding, the FSDP arguments of an ``fsdp*`` one: :mod:`.sharding`). Built before the
model under ZeRO-3 (:mod:`.partition`: the DeepSpeed config must exist while transformers builds
the model, so that it partitions it inside ``zero.Init``) and again by :mod:`.trainer`.
transformers is imported inside the functions.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from fttui.core.profiles.typed import Profile
from fttui.core.run.launching.oomretry import recovery_saves

from .errors import ConfigError, one_line
from .model import reentrant_checkpointing
from .sharding import deepspeed_config, fsdp_arguments

__all__ = ["Plan", "plan", "run_kind", "training_args"]


class Plan(NamedTuple):
    """What a run keeps and reports, from the profile and the run's kind (``command.json``):
    probe trials and sweep cells measure, so they never save or evaluate, and probe trials
    report to no tracker."""

    kind: str
    save: str  # end | steps | none
    save_steps: int
    output_dir: str
    eval: bool  # a held-out split is evaluated (data.eval_ratio > 0)
    eval_steps: int  # 0 = at the end only
    report_to: list[str]
    # checkpoints every save_steps for train.on_oom = "shrink" alone (save is end or none): only
    # the latest is kept, and removed when training completes (fttui.core.run.launching.oomretry)
    recovery: bool = False


def run_kind(run_dir: str) -> str:
    """The launch's kind (``run``, ``probe``, ``sweep``) from ``command.json``; ``run`` without one."""
    from fttui.core.run.files.rundir import RunDir

    return RunDir(run_dir).kind_and_group()[0]


def plan(profile: Profile, run_dir: str) -> Plan:
    """The :class:`Plan` of this run. A ``profile.json`` without ``train.save`` (written before
    the key existed, or by hand) saves nothing, as runs did then
    (:data:`~fttui.core.profiles.stored.OLD_DEFAULTS`); the other keys take their defaults."""
    prof = profile
    t = prof.train
    kind = run_kind(run_dir)
    measuring = kind in ("probe", "sweep")
    save = "none" if measuring else t.save
    report_to = [] if kind == "probe" else list(t.report_to)
    return Plan(
        kind,
        save,
        t.save_steps,
        str(t.output_dir or os.path.join(run_dir, "output")),
        not measuring and prof.data.eval_ratio > 0,
        t.eval_steps,
        report_to,
        recovery_saves(prof, kind),
    )


def training_args(profile: Profile, run_dir: str, world: int, use_cuda: bool):
    """TrainingArguments from the resolved profile."""
    from transformers import TrainingArguments

    t = profile.train
    precision = t.precision
    optim = t.optimizer or "adamw_torch"  # resolution fills it; a hand-written profile.json may not
    warmup = float(t.warmup_ratio)
    max_steps = t.max_steps
    keep = plan(profile, run_dir)
    ta_kwargs: dict[str, Any] = dict(
        output_dir=keep.output_dir,
        run_name=os.path.basename(os.path.normpath(run_dir)),  # the trackers' run name: the fttui run id
        per_device_train_batch_size=t.batch_size,
        gradient_accumulation_steps=t.grad_accum,
        num_train_epochs=float(t.epochs),
        max_steps=max_steps if max_steps > 0 else -1,
        learning_rate=float(t.lr),
        lr_scheduler_type=t.lr_scheduler,
        # transformers 5 has no warmup_ratio: a float in [0, 1) for warmup_steps is a ratio.
        warmup_steps=min(max(warmup, 0.0), 0.999) if warmup > 0 else 0,
        weight_decay=float(t.weight_decay),
        optim=optim,
        seed=t.seed,
        # No Trainer logging: the step events carry the loss (hf_info.Counters) and the learning rate;
        # logging every step cost a dict, the callbacks' on_log and, on a GPU, two syncs per step.
        # With trackers the Trainer logs every step for them (loss, learning rate, grad norm).
        logging_strategy="steps" if keep.report_to else "no",
        logging_steps=1,
        # "steps": a resumable checkpoint (model, optimizer, scheduler, RNG states) every
        # save_steps and at the last step; the final adapter / model: train.py's save_model.
        save_strategy="steps" if keep.save == "steps" or keep.recovery else "no",
        save_steps=keep.save_steps,
        save_total_limit=1 if keep.recovery else None,
        # the end evaluation: FttuiCallback.eval_at_end (fttui.integrations.hf)
        eval_strategy="steps" if keep.eval and keep.eval_steps > 0 else "no",
        eval_steps=keep.eval_steps if keep.eval and keep.eval_steps > 0 else None,
        per_device_eval_batch_size=t.batch_size,
        prediction_loss_only=True,  # the loss only: no logits gathered over the split
        report_to=keep.report_to,
        disable_tqdm=True,
        dataloader_num_workers=0,
        use_cpu=not use_cuda,
        remove_unused_columns=False,
        fp16=precision == "fp16",
        bf16=precision == "bf16",
        log_level="warning",
    )
    if world > 1 and not use_cuda:
        ta_kwargs["ddp_backend"] = "gloo"
    if reentrant_checkpointing(profile, use_cuda):
        # DDP's search for unused parameters marks a checkpointed layer's twice (every LoRA
        # parameter is used: none to find)
        ta_kwargs["ddp_find_unused_parameters"] = False
    kind = profile.sharding_kind()
    if kind.deepspeed:
        ta_kwargs["deepspeed"] = deepspeed_config(profile, world)
    elif kind.fsdp:
        ta_kwargs.update(fsdp_arguments(profile))
    try:
        return TrainingArguments(**ta_kwargs)
    except ValueError as e:
        raise ConfigError(f"training arguments: {one_line(e)}") from e
