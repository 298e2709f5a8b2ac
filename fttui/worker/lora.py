"""The LoRA adapters of the LoRA family: the peft ``LoraConfig`` built from the ``lora`` section
(rank, alpha, dropout, target modules) and, for ``lora-emb``, the embedding and LM-head modules
trained in full next to the adapters (peft's ``modules_to_save``).
"""

from __future__ import annotations

from typing import Any

from fttui.core.profiles.typed import Profile

from .errors import ConfigError

__all__ = ["lora_config"]


def _module_name(model, target) -> str | None:
    for name, mod in model.named_modules():
        if mod is target:
            return name.rsplit(".", 1)[-1]
    return None


def lora_config(resolved: Profile, model):
    from peft import LoraConfig

    prof = resolved
    lo = prof.lora
    targets = lo.target_modules
    modules = list(targets) if not isinstance(targets, str) else targets if targets == "all-linear" else [targets]
    kwargs: dict[str, Any] = {
        "r": lo.r,
        "lora_alpha": lo.alpha,
        "lora_dropout": float(lo.dropout),
        "target_modules": modules,
        "task_type": "CAUSAL_LM",
    }
    if prof.method_kind().embeddings:
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
