"""The Hugging Face Trainer of a run: :func:`training_args` turns the resolved profile into
``TrainingArguments`` (the DeepSpeed config of a ``zero*`` sharding, the FSDP arguments of an
``fsdp*`` one: :mod:`.sharding`) and :func:`make_trainer` builds the counting Trainer on the model
and tokenizer of a :class:`~.startup.Setup`, with the check that the sharding which runs is the
one asked for. Shared by the training and probe workers; transformers is imported inside the
functions.
"""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple


from fttui.core.profiles.stored import as_profile
from fttui.core.profiles.typed import Profile

from .errors import ConfigError, one_line
from .model import reentrant_checkpointing
from .sharding import check_sharding, deepspeed_config, fsdp_arguments, sharding_info, trainer_class
from .startup import Setup

__all__ = ["Plan", "plan", "training_args", "make_trainer", "sharding_check_callback"]


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


def run_kind(run_dir: str) -> str:
    """The launch's kind (``run``, ``probe``, ``sweep``) from ``command.json``; ``run`` without one."""
    try:
        with open(os.path.join(run_dir, "command.json"), encoding="utf-8") as f:
            kind = json.load(f).get("kind")
    except (OSError, ValueError, AttributeError):
        return "run"
    return kind if isinstance(kind, str) and kind else "run"


def plan(profile: Profile | dict[str, Any], run_dir: str) -> Plan:
    """The :class:`Plan` of this run. A ``profile.json`` without ``train.save`` (written before
    the key existed, or by hand) saves nothing, as runs did then
    (:data:`~fttui.core.profiles.stored.OLD_DEFAULTS`); the other keys take their defaults."""
    prof = as_profile(profile)
    t = prof.train
    kind = run_kind(run_dir)
    measuring = kind in ("probe", "sweep")
    save = "none" if measuring else t.save
    report_to = [] if kind == "probe" else list(t.report_to)
    return Plan(kind, save, t.save_steps, str(t.output_dir or os.path.join(run_dir, "output")),
                not measuring and prof.data.eval_ratio > 0, t.eval_steps, report_to)


def training_args(profile: Profile | dict[str, Any], run_dir: str, world: int, use_cuda: bool):
    """TrainingArguments from the resolved profile."""
    from transformers import TrainingArguments

    profile = as_profile(profile)
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
        save_strategy="steps" if keep.save == "steps" else "no",
        save_steps=keep.save_steps,
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


def make_trainer(su: Setup, profile: Profile | dict[str, Any], dataset, callbacks, eval_dataset=None):
    """The Trainer for ``dataset`` (no printer: the worker prints; fttui's event callback counts
    its micro-batches once bound to it, :meth:`fttui.integrations.hf.FttuiCallback.bind`).
    The trackers' callbacks (``train.report_to``) come after fttui's, so that at the end of
    training fttui's row reaches a tracker before its callback closes the writer or ends the run."""
    from transformers import Trainer
    from transformers.trainer_callback import PrinterCallback

    from .data import Collator

    profile = as_profile(profile)
    d = profile.data
    sharding = profile.sharding
    check = sharding_check_callback(sharding)
    trainer = trainer_class(Trainer, sharding)(
        model=su.model,
        args=training_args(profile, su.run_dir, su.world, su.use_cuda),
        train_dataset=dataset,
        eval_dataset=eval_dataset,
        data_collator=Collator(su.tok.pad_token_id, d.max_seq_len, d.pad_to_max),
        callbacks=[*callbacks, check],
    )
    check.trainer = trainer
    trainer.fttui_sharding = sharding  # the start event's runtime_info reads it
    trainer.remove_callback(PrinterCallback)
    from transformers.integrations import INTEGRATION_TO_CALLBACK

    trackers = tuple(INTEGRATION_TO_CALLBACK.values())
    cbs = trainer.callback_handler.callbacks
    cbs[:] = [cb for cb in cbs if not isinstance(cb, trackers)] + [cb for cb in cbs if isinstance(cb, trackers)]
    return trainer


def sharding_check_callback(asked: str):
    """A callback that, once the Trainer has wrapped the model (training begins, after the start
    event), fails the run with one line when the sharding that runs is not ``asked``."""
    from transformers import TrainerCallback

    class ShardingCheck(TrainerCallback):
        trainer = None

        def on_train_begin(self, args, state, control, **kw):
            if self.trainer is not None:
                info = sharding_info(self.trainer, asked)
                wrapped = getattr(self.trainer, "model_wrapped", None)
                info["wrapper"] = type(wrapped).__name__ if wrapped is not None else None
                check_sharding(asked, info)

    return ShardingCheck()
