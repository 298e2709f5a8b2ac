"""The Hugging Face Trainer of a run: :func:`make_trainer` builds the counting Trainer on the model
and tokenizer of a :class:`~.startup.Setup`, with the check that the sharding which runs is the
one asked for, on the ``TrainingArguments`` of :mod:`.arguments` (re-exported here). Shared by
the training and probe workers; transformers is imported inside the functions.
"""

from __future__ import annotations

from fttui.core.base.constants import LONGEST_FIRST_STEPS
from fttui.core.profiles.typed import Profile

from .arguments import Plan, plan, training_args
from .partition import skip_frozen_broadcast
from .sharding import check_sharding, sharding_info, trainer_class
from .startup import Setup

__all__ = ["Plan", "plan", "training_args", "make_trainer", "sharding_check_callback"]


def make_trainer(su: Setup, profile: Profile, dataset, callbacks, eval_dataset=None):
    """The Trainer for ``dataset`` (no printer: the worker prints; fttui's event callback counts
    its micro-batches once bound to it, :meth:`fttui.integrations.hf.FttuiCallback.bind`).
    The trackers' callbacks (``train.report_to``) come after fttui's, so that at the end of
    training fttui's row reaches a tracker before its callback closes the writer or ends the run."""
    from transformers import Trainer
    from transformers.trainer_callback import PrinterCallback

    from .data import Collator
    from .testhooks import hook_callbacks, slow_collator

    d = profile.data
    sharding = profile.sharding
    check = sharding_check_callback(sharding)
    trainer = trainer_class(Trainer, sharding)(
        model=su.model,
        args=training_args(profile, su.run_dir, su.world, su.use_cuda),
        train_dataset=dataset,
        eval_dataset=eval_dataset,
        data_collator=slow_collator(Collator(su.tok.pad_token_id, d.max_seq_len, d.pad_to_max)),
        callbacks=[*callbacks, check, *hook_callbacks()],
    )
    check.trainer = trainer
    if not profile.sharding_kind().sharded:  # the process group exists now; DDP wraps in train()
        skip_frozen_broadcast(su.model, su.log)
    if profile.train.longest_first:
        _longest_first(trainer, profile, dataset, su)
    trainer.fttui_sharding = sharding  # the start event's runtime_info reads it
    trainer.remove_callback(PrinterCallback)
    from transformers.integrations import INTEGRATION_TO_CALLBACK

    trackers = tuple(INTEGRATION_TO_CALLBACK.values())
    cbs = trainer.callback_handler.callbacks
    cbs[:] = [cb for cb in cbs if not isinstance(cb, trackers)] + [cb for cb in cbs if isinstance(cb, trackers)]
    return trainer


def _longest_first(trainer, profile: Profile, dataset, su: Setup) -> None:
    """``train.longest_first``: the first optimizer steps (``LONGEST_FIRST_STEPS``) carry the
    data's longest samples, longest first (the Trainer's own sampler would shuffle them anywhere
    into the epoch): the second step is the first with the optimizer's states, so a batch that
    fits only before them fails there, in the first minute, as a probe trial does."""
    from .data import longest_first_sampler, sample_lengths

    lengths = sample_lengths(dataset)
    if not lengths:
        return  # synthetic: every sample is max_seq_len long already
    t = profile.train
    per_step = t.batch_size * t.grad_accum * max(1, su.world)
    first = per_step * LONGEST_FIRST_STEPS
    sampler = longest_first_sampler(lengths, first, t.seed)
    trainer._get_train_sampler = lambda *_a, **_k: sampler
    top = sorted(lengths, reverse=True)[:first]
    su.log(
        f"longest first: the first {LONGEST_FIRST_STEPS} steps carry the {len(top)} longest samples"
        f" ({top[0]} to {top[-1]} tokens; {per_step} a step)"
    )


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
