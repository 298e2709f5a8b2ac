"""The Hugging Face Trainer of a run: :func:`training_args` turns the resolved profile into
``TrainingArguments`` (the DeepSpeed config of a ``zero*`` sharding, the FSDP arguments of an
``fsdp*`` one: :mod:`.sharding`) and :func:`make_trainer` builds the counting Trainer on the model
and tokenizer of a :class:`~.startup.Setup`, with the check that the sharding which runs is the
one asked for. Shared by the training and probe workers; transformers is imported inside the
functions.
"""

from __future__ import annotations

import os
from typing import Any

from fttui.core.base.constants import DEEPSPEED_SHARDINGS, FSDP_SHARDINGS

from .errors import ConfigError, one_line
from .sharding import check_sharding, deepspeed_config, fsdp_arguments, sharding_info, sharding_of, trainer_class
from .startup import Setup

__all__ = ["training_args", "make_trainer", "sharding_check_callback"]


def training_args(profile: dict[str, Any], run_dir: str, world: int, use_cuda: bool):
    """TrainingArguments from the resolved profile."""
    from transformers import TrainingArguments

    t = profile["train"]
    precision = t.get("precision", "fp32")
    optim = t.get("optimizer") or "adamw_torch"
    warmup = float(t.get("warmup_ratio") or 0.0)
    max_steps = int(t.get("max_steps", -1) or -1)
    ta_kwargs: dict[str, Any] = dict(
        output_dir=os.path.join(run_dir, "trainer"),
        per_device_train_batch_size=int(t.get("batch_size", 1)),
        gradient_accumulation_steps=int(t.get("grad_accum", 1)),
        num_train_epochs=float(t.get("epochs", 1.0)),
        max_steps=max_steps if max_steps > 0 else -1,
        learning_rate=float(t.get("lr", 2e-4)),
        lr_scheduler_type=t.get("lr_scheduler") or "linear",
        # transformers 5 has no warmup_ratio: a float in [0, 1) for warmup_steps is a ratio.
        warmup_steps=min(max(warmup, 0.0), 0.999) if warmup > 0 else 0,
        weight_decay=float(t.get("weight_decay", 0.0)),
        optim=optim,
        seed=int(t.get("seed", 42)),
        # No Trainer logging: the step events carry the loss (Counters) and the learning rate;
        # logging every step cost a dict, the callbacks' on_log and, on a GPU, two syncs per step.
        logging_strategy="no",
        save_strategy="no",
        report_to=[],
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
    sharding = sharding_of(profile)
    if sharding in DEEPSPEED_SHARDINGS:
        ta_kwargs["deepspeed"] = deepspeed_config(profile, world)
    elif sharding in FSDP_SHARDINGS:
        ta_kwargs.update(fsdp_arguments(profile))
    try:
        return TrainingArguments(**ta_kwargs)
    except ValueError as e:
        raise ConfigError(f"training arguments: {one_line(e)}") from e


def make_trainer(su: Setup, profile: dict[str, Any], dataset, counters, callbacks):
    """The :class:`~.callback.CountingTrainer` for ``dataset`` (no printer: the worker prints)."""
    from transformers.trainer_callback import PrinterCallback

    from .callback import CountingTrainer
    from .data import Collator

    d = profile["data"]
    sharding = sharding_of(profile)
    check = sharding_check_callback(sharding)
    trainer = trainer_class(CountingTrainer, sharding)(
        model=su.model,
        args=training_args(profile, su.run_dir, su.world, su.use_cuda),
        train_dataset=dataset,
        data_collator=Collator(su.tok.pad_token_id, int(d.get("max_seq_len", 512)), bool(d.get("pad_to_max"))),
        callbacks=[*callbacks, check],
        counters=counters,
    )
    check.trainer = trainer
    trainer.fttui_sharding = sharding  # the start event's runtime_info reads it
    trainer.remove_callback(PrinterCallback)
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
