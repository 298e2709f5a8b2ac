"""A LLaMA-Factory training YAML (``llamafactory-cli train FILE.yaml``) read into fttui's terms.

Mapped: the model, ``finetuning_type`` (+ ``quantization_bit``, ``additional_target``) ->
method, the DeepSpeed config -> sharding, ``cutoff_len``, ``max_samples``, batch, accumulation,
epochs and steps, learning rate and schedule, precision, gradient checkpointing (on unless
``disable_gradient_checkpointing``), attention, LoRA rank/alpha/dropout/targets, output, saving,
evaluation split and trackers. Dataset names refer to LLaMA-Factory's ``dataset_info.json``:
they are listed as not mapped (fttui runs its synthetic data unless ``data.source`` is set).
"""

from __future__ import annotations

from typing import Any

from fttui.core.profiles.foreign.common import (
    Mapped,
    deepspeed_sharding,
    gpu_count_note,
    is_true,
    known_keys,
    tool_default,
)

__all__ = ["read_llamafactory"]

TOOL = "LLaMA-Factory"

_ATTENTION = {"auto": "sdpa", "sdpa": "sdpa", "fa2": "flash_attention_2", "disabled": "eager"}

# Keys that describe the launch or the tool's own bookkeeping, not what trains.
_NOT_TRAINING = {
    "do_train": "always true for a training run",
    "overwrite_output_dir": "fttui writes each run to a folder of its own",
    "overwrite_cache": "LLaMA-Factory's dataset cache",
    "preprocessing_num_workers": "LLaMA-Factory's tokenisation workers",
    "dataloader_num_workers": "fttui's data loader runs in the training process",
    "logging_steps": "fttui records every step",
    "plot_loss": "fttui's report draws the loss",
    "ddp_timeout": "the process group's timeout",
    "template": "LLaMA-Factory's chat template; fttui formats with the tokenizer's own",
    "save_only_model": "fttui saves in the Trainer's format",
    "resume_from_checkpoint": "use `fttui run --resume RUN`",
}


def _method(m: Mapped) -> str:
    kind = str(m.get("finetuning_type", "lora")).lower()
    stage = str(m.get("stage", "sft")).lower()
    if stage not in ("sft", "pt"):
        raise m.error("stage", f"stage {stage}: fttui runs supervised fine-tuning", "use stage: sft")
    if stage == "pt":
        m.notes.append(
            "stage pt (pre-training on raw text): fttui trains on instruction data; memory and "
            "speed per token are the same"
        )
    if kind not in ("lora", "full"):
        raise m.error(
            "finetuning_type",
            f"finetuning_type {kind}: not a method fttui runs",
            "use lora or full (fttui's methods: full, lora, lora-emb, qlora, lora-int8)",
        )
    bits = m.get("quantization_bit")
    if bits is not None:
        qm = str(m.get("quantization_method", "bnb")).lower()
        if qm not in ("bnb", "bitsandbytes"):
            raise m.error(
                "quantization_method",
                f"quantization_method {qm}: fttui quantises with bitsandbytes",
                "use quantization_method: bnb",
            )
        if kind == "full":
            raise m.error(
                "quantization_bit",
                "quantization_bit with finetuning_type full",
                "a quantised model trains through adapters: use finetuning_type: lora",
            )
        if int(bits) not in (4, 8):
            raise m.error("quantization_bit", f"quantization_bit {bits}: bitsandbytes has 4 and 8 bits", "use 4 or 8")
        if int(bits) == 8:
            return "lora-int8"
        qtype = m.get("quantization_type")
        if qtype is not None:
            m.put("quant.type", str(qtype).lower())
        if m.has("double_quantization"):
            m.put("quant.double_quant", is_true(m.get("double_quantization")))
        return "qlora"
    m.get("quantization_method")
    targets = [t.strip() for t in str(m.get("additional_target", "")).split(",") if t.strip()]
    if kind == "lora" and targets:
        if {"embed_tokens", "lm_head"} & set(targets):
            rest = [t for t in targets if t not in ("embed_tokens", "lm_head")]
            if rest:
                m.notes.append(
                    f"additional_target {', '.join(rest)}: fttui trains the embeddings and output layer only"
                )
            return "lora-emb"
        m.skip("additional_target", "fttui trains whole modules only for the embeddings and output layer (lora-emb)")
    return kind


def _lora(m: Mapped) -> None:
    rank = int(tool_default(m, "lora_rank", 8))
    m.put("lora.r", rank)
    m.put("lora.alpha", int(m.get("lora_alpha") or rank * 2))
    m.put("lora.dropout", float(m.get("lora_dropout", 0.0)))
    target = str(m.get("lora_target", "all"))
    m.put(
        "lora.target_modules", "all-linear" if target == "all" else [t.strip() for t in target.split(",") if t.strip()]
    )


def _precision(m: Mapped) -> str:
    bf16, fp16, pure = (is_true(m.get(k, False)) for k in ("bf16", "fp16", "pure_bf16"))
    if bf16 and fp16:
        raise m.error("fp16", "bf16 and fp16 are both true", "keep one of them")
    if pure:
        m.notes.append("pure_bf16: LLaMA-Factory keeps the weights in bf16 without fp32 master copies")
    return "bf16" if (bf16 or pure) else "fp16" if fp16 else "fp32"


def read_llamafactory(m: Mapped) -> None:
    """Fill ``m`` from a LLaMA-Factory config."""
    m.put("model.name_or_path", str(m.get("model_name_or_path") or ""))
    if not m.data["model"]["name_or_path"]:
        raise m.error("model_name_or_path", "no model", "give model_name_or_path: a hub id or a folder")
    if m.has("trust_remote_code"):
        m.put("model.trust_remote_code", is_true(m.get("trust_remote_code")))
    method = _method(m)
    m.put("method", method)
    if method != "full":
        _lora(m)
    if m.has("deepspeed"):
        deepspeed_sharding(m, str(m.get("deepspeed")))
    gpu_count_note(m, "the launch (FORCE_TORCHRUN, CUDA_VISIBLE_DEVICES)")

    m.put("data.max_seq_len", int(tool_default(m, "cutoff_len", 2048)))
    if m.has("max_samples"):
        m.put("data.num_samples", int(m.get("max_samples")))
    for key in ("dataset", "eval_dataset", "dataset_dir"):
        m.skip(
            key,
            "LLaMA-Factory's dataset registry (dataset_info.json); fttui runs its synthetic data "
            "unless you set data.source to a JSON-lines file",
        )

    m.put("train.batch_size", int(tool_default(m, "per_device_train_batch_size", 8)))
    m.put("train.grad_accum", int(m.get("gradient_accumulation_steps", 1)))
    m.put("train.epochs", float(tool_default(m, "num_train_epochs", 3.0)))
    if int(m.get("max_steps", -1) or -1) > 0:
        m.put("train.max_steps", int(m.get("max_steps")))
    m.put("train.lr", float(tool_default(m, "learning_rate", 5e-5)))
    for src, dst, conv in (
        ("lr_scheduler_type", "train.lr_scheduler", str),
        ("warmup_ratio", "train.warmup_ratio", float),
        ("weight_decay", "train.weight_decay", float),
        ("seed", "train.seed", int),
    ):
        if m.has(src):
            m.put(dst, conv(m.get(src)))
    # the Trainer's own default, which LLaMA-Factory keeps (not fttui's paged optimizer for qlora);
    # transformers on torch >= 2.8 picks adamw_torch_fused, which keeps the same states
    m.put("train.optimizer", str(tool_default(m, "optim", "adamw_torch")))
    m.put("train.precision", _precision(m))
    m.put("train.gradient_checkpointing", not is_true(m.get("disable_gradient_checkpointing", False)))
    attn = str(m.get("flash_attn", "auto")).lower()
    if attn not in _ATTENTION:
        raise m.error(
            "flash_attn", f"flash_attn {attn}: not an attention fttui runs", "use auto, sdpa, fa2 or disabled"
        )
    m.put("model.attn_implementation", _ATTENTION[attn])

    _outputs(m)
    for key, why in _NOT_TRAINING.items():
        m.skip(key, why)
    m.finish(known_keys("llamafactory"))


def _outputs(m: Mapped) -> None:
    if m.has("output_dir"):
        m.put_if_known("train.output_dir", str(m.get("output_dir")), "output_dir")
    if m.has("save_steps") and str(m.config.get("save_strategy", "steps")) == "steps":
        m.put_if_known("train.save", "steps", "save_steps")
        m.put_if_known("train.save_steps", int(m.get("save_steps")), "save_steps")
    if str(m.config.get("save_strategy", "")) == "no":
        m.put_if_known("train.save", "none", "save_strategy")
    m.get("save_strategy")
    if m.has("val_size"):
        m.put_if_known("data.eval_ratio", float(m.get("val_size")), "val_size")
    if m.has("eval_steps"):
        m.put_if_known("train.eval_steps", int(m.get("eval_steps")), "eval_steps")
    for key in ("eval_strategy", "per_device_eval_batch_size"):
        m.skip(key, "fttui evaluates at train.eval_steps and at the end, with the training batch")
    report = m.get("report_to")
    if report is not None:
        trackers: list[Any] = [report] if isinstance(report, str) else list(report)
        trackers = [str(t) for t in trackers if str(t) not in ("none", "")]
        m.put_if_known("train.report_to", trackers, "report_to")
