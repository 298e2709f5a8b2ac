"""The LoRA adapters of the LoRA family: the peft ``LoraConfig`` built from the ``lora`` section
(rank, alpha, dropout, target modules) and, for ``lora-emb``, the embedding and LM-head modules
trained in full next to the adapters (peft's ``modules_to_save``).
"""

from __future__ import annotations

from typing import Any

from .errors import ConfigError

__all__ = ["lora_config"]


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
