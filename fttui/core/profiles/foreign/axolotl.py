"""An axolotl training YAML (``axolotl train FILE.yml``) read into fttui's terms.

Mapped: ``base_model``, ``adapter`` (+ ``load_in_4bit`` / ``load_in_8bit``,
``lora_modules_to_save``, ``gptq``) -> method, ``deepspeed`` / ``fsdp`` -> sharding, ``sequence_len``,
``pad_to_sequence_len``, micro batch, accumulation, epochs and steps, learning rate and schedule,
optimizer, precision, gradient checkpointing, attention, LoRA settings, a local dataset file,
output, saving, evaluation split and trackers. Sample packing, hub datasets and the many
kernel and plugin switches are listed as not mapped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fttui.core.profiles.foreign.common import (
    Mapped,
    deepspeed_sharding,
    gpu_count_note,
    is_true,
    known_keys,
    tool_default,
)

__all__ = ["read_axolotl"]

TOOL = "axolotl"

_FORMATS = {"alpaca": "instruction", "chat_template": "chat", "sharegpt": "chat"}

_NOT_TRAINING = {
    "model_type": "fttui builds the model class the config names (AutoModelForCausalLM)",
    "tokenizer_type": "fttui loads the model's own tokenizer",
    "strict": "axolotl's config checking",
    "dataset_prepared_path": "axolotl's tokenised-dataset cache",
    "logging_steps": "fttui records every step",
    "special_tokens": "fttui uses the tokenizer's own special tokens",
    "sample_packing": "fttui does not pack samples: each sample is its own sequence (memory per token is "
    "alike; packed runs process more tokens per step)",
    "train_on_inputs": "fttui trains on the response tokens",
    "resume_from_checkpoint": "use `fttui run --resume RUN`",
    "hub_model_id": "fttui does not upload",
    "tf32": "a matmul precision switch of Ampere cards",
}


def _method(m: Mapped) -> str:
    rl = m.get("rl")
    if rl:
        raise m.error("rl", f"rl {rl}: fttui runs supervised fine-tuning", "drop rl (and its datasets) for SFT")
    adapter = str(m.get("adapter", "") or "").lower()
    four, eight = is_true(m.get("load_in_4bit", False)), is_true(m.get("load_in_8bit", False))
    if four and eight:
        raise m.error("load_in_8bit", "load_in_4bit and load_in_8bit are both true", "keep one of them")
    if is_true(m.get("gptq", False)):
        # base_model is a GPTQ checkpoint, trained as stored with LoRA (issue 22; axolotl's
        # examples/llama-2/gptq-lora.yml): fttui reads the quantisation from its config.json
        if four or eight or adapter not in ("", "lora"):
            raise m.error(
                "gptq",
                "gptq: true trains the GPTQ checkpoint as stored, with a LoRA adapter",
                "set adapter: lora, load_in_4bit and load_in_8bit: false",
            )
        for key in ("gptq_disable_exllama", "gptq_groupsize", "gptq_model_v1"):
            m.skip(
                key,
                "fttui reads the GPTQ settings from the checkpoint's config.json and asks "
                "GPT-QModel for a kernel that trains",
            )
        return "lora"
    if adapter not in ("", "lora", "qlora"):
        raise m.error("adapter", f"adapter {adapter}: not a method fttui runs", "use lora, qlora or no adapter (full)")
    if not adapter:
        if four or eight:
            raise m.error(
                "adapter", "a quantised model without an adapter", "set adapter: qlora (4 bit) or lora (8 bit)"
            )
        return "full"
    if adapter == "qlora" and not four:
        raise m.error("adapter", "adapter qlora without load_in_4bit: true", "set load_in_4bit: true")
    if four:
        kwargs = m.get("bnb_config_kwargs") or {}
        if isinstance(kwargs, dict):
            if "bnb_4bit_quant_type" in kwargs:
                m.put("quant.type", str(kwargs["bnb_4bit_quant_type"]).lower())
            if "bnb_4bit_use_double_quant" in kwargs:
                m.put("quant.double_quant", is_true(kwargs["bnb_4bit_use_double_quant"]))
        return "qlora"
    if eight:
        return "lora-int8"
    saved = [str(x) for x in (m.get("lora_modules_to_save") or [])]
    if {"embed_tokens", "lm_head"} & set(saved):
        return "lora-emb"
    if saved:
        m.skip("lora_modules_to_save", "fttui trains whole modules only for the embeddings and output layer (lora-emb)")
    return "lora"


def _lora(m: Mapped) -> None:
    m.put("lora.r", int(tool_default(m, "lora_r", 8)))
    m.put("lora.alpha", int(tool_default(m, "lora_alpha", 16)))
    m.put("lora.dropout", float(m.get("lora_dropout", 0.0)))
    modules = m.get("lora_target_modules")
    if is_true(m.get("lora_target_linear", False)):
        m.put("lora.target_modules", "all-linear")
    elif modules:
        m.put("lora.target_modules", [str(x) for x in modules] if isinstance(modules, list) else str(modules))
    m.get("lora_modules_to_save")


def _sharding(m: Mapped) -> None:
    fsdp = m.get("fsdp")
    fsdp_config = m.get("fsdp_config") or {}
    version = m.get("fsdp_version")
    if m.has("deepspeed") and (fsdp or version):
        raise m.error("fsdp", "both deepspeed and fsdp are set", "keep one of them")
    if m.has("deepspeed"):
        deepspeed_sharding(m, str(m.get("deepspeed")))
        return
    if not fsdp and not version:
        return
    opts = [str(x) for x in fsdp] if isinstance(fsdp, list) else str(fsdp or "").split()
    conf = fsdp_config if isinstance(fsdp_config, dict) else {}
    _fsdp_unmapped(m, opts, conf)
    strategy = str(conf.get("reshard_after_forward", conf.get("fsdp_sharding_strategy", "FULL_SHARD")))
    if "shard_grad_op" in opts or strategy.upper() in ("SHARD_GRAD_OP", "FALSE"):
        raise m.error(
            "fsdp",
            "FSDP SHARD_GRAD_OP (gradients and optimizer states only)",
            "fttui's fsdp shards parameters too (full_shard); use full_shard, or deepspeed ZeRO-2",
        )
    offload = is_true(conf.get("offload_params", conf.get("fsdp_offload_params", False))) or "offload" in opts
    m.put("sharding", "fsdp-offload" if offload else "fsdp")
    m.put("devices.launcher", "torchrun")
    if m.data.get("method") == "qlora":
        m.notes.append(
            "QLoRA under FSDP: fttui stores the 4-bit weights in the compute dtype "
            "(bnb_4bit_quant_storage) so that FSDP shards them, as axolotl's qlora-fsdp setups do; "
            "every rank loads the quantised model (no RAM-efficient loading of 4-bit weights)"
        )
    m.notes.append(
        "FSDP: fttui wraps every decoder layer (FSDP2 through accelerate)"
        + (f"; fsdp_version {version}" if version else "")
    )


# fsdp_config keys fttui reads (offload, sharding strategy); every other one is listed with why
_FSDP_READ = {"offload_params", "fsdp_offload_params", "reshard_after_forward", "fsdp_sharding_strategy"}
_FSDP_WHY = {
    "state_dict_type": "fttui's FSDP checkpoints are SHARDED_STATE_DICT, its final model whole (docs/architecture.md)",
    "cpu_ram_efficient_loading": "each rank loads the model itself (fttui has no RAM-efficient loading yet)",
    "sync_module_states": "each rank loads the model itself (fttui has no RAM-efficient loading yet)",
    "auto_wrap_policy": "fttui wraps every decoder layer",
    "transformer_layer_cls_to_wrap": "fttui wraps every decoder layer",
    "use_orig_params": "accelerate's own setting for fttui's FSDP2 wrapping",
    "limit_all_gathers": "accelerate's own setting for fttui's FSDP2 wrapping",
    "activation_checkpointing": "fttui's gradient checkpointing is train.gradient_checkpointing",
}
_FSDP_OPTIONS = {"full_shard", "auto_wrap", "offload"}


def _fsdp_unmapped(m: Mapped, opts: list[str], conf: dict[str, Any]) -> None:
    """The FSDP settings fttui does not take over, each listed as ``fsdp_config.KEY`` with why
    (never silently dropped): everything but offload and the (full) sharding strategy."""
    for key, value in conf.items():
        if key in _FSDP_READ or value is None or value == "":
            continue
        why = _FSDP_WHY.get(str(key).removeprefix("fsdp_"), "an FSDP setting fttui leaves at accelerate's default")
        m.unmapped.append((f"fsdp_config.{key}", value, why))
    other = [o for o in opts if o not in _FSDP_OPTIONS and o != "shard_grad_op"]
    if other:
        m.unmapped.append(
            (
                "fsdp",
                other,
                "FSDP options fttui does not take: it runs full_shard with every "
                "decoder layer wrapped (offload from fsdp_config or the offload option)",
            )
        )


def _precision(m: Mapped) -> str:
    bf16, fp16 = m.get("bf16"), m.get("fp16")
    pure = is_true(m.get("bfloat16", False)) or is_true(m.get("float16", False))
    if is_true(bf16) and is_true(fp16):
        raise m.error("fp16", "bf16 and fp16 are both true", "keep one of them")
    if str(bf16).lower() == "auto":
        m.notes.append("bf16: auto read as bf16 (what axolotl picks on cards that have it)")
        return "bf16"
    if pure:
        m.notes.append("bfloat16 / float16: axolotl loads the weights in half precision without fp32 master copies")
        return "bf16" if is_true(m.get("bfloat16", False)) else "fp16"
    return "bf16" if is_true(bf16) else "fp16" if is_true(fp16) else "fp32"


def _dataset(m: Mapped) -> None:
    sets = m.get("datasets") or []
    if not isinstance(sets, list) or not sets:
        return
    first = sets[0] if isinstance(sets[0], dict) else {}
    path = str(first.get("path", ""))
    local = [p for p in (Path.cwd() / path, m.path.parent / path) if path and p.is_file()]
    kind = str(first.get("type", ""))
    if local and kind in _FORMATS and len(sets) == 1:
        m.put("data.source", str(local[0].resolve()))
        m.put("data.format", _FORMATS[kind])
        return
    m.skip(
        "datasets",
        "hub datasets and several datasets are not read; fttui runs its synthetic data "
        "unless the one dataset is a local alpaca or chat file",
    )


def read_axolotl(m: Mapped) -> None:
    """Fill ``m`` from an axolotl config."""
    base = str(m.get("base_model") or "")
    if not base:
        raise m.error("base_model", "no model", "give base_model: a hub id or a folder")
    m.put("model.name_or_path", base)
    if m.has("trust_remote_code"):
        m.put("model.trust_remote_code", is_true(m.get("trust_remote_code")))
    method = _method(m)
    m.put("method", method)
    if method != "full":
        _lora(m)
    _sharding(m)
    gpu_count_note(m, "the launch (accelerate / torchrun)")

    m.put("data.max_seq_len", int(tool_default(m, "sequence_len", 2048)))
    if m.has("pad_to_sequence_len"):
        m.put("data.pad_to_max", is_true(m.get("pad_to_sequence_len")))
    _dataset(m)

    m.put("train.batch_size", int(tool_default(m, "micro_batch_size", 1)))
    m.put("train.grad_accum", int(m.get("gradient_accumulation_steps", 1)))
    m.put("train.epochs", float(tool_default(m, "num_epochs", 1.0)))
    if int(m.get("max_steps", -1) or -1) > 0:
        m.put("train.max_steps", int(m.get("max_steps")))
    if m.has("learning_rate"):
        m.put("train.lr", float(m.get("learning_rate")))
    for src, dst, conv in (
        ("lr_scheduler", "train.lr_scheduler", str),
        ("warmup_ratio", "train.warmup_ratio", float),
        ("weight_decay", "train.weight_decay", float),
        ("seed", "train.seed", int),
    ):
        if m.has(src):
            m.put(dst, conv(m.get(src)))
    m.put("train.optimizer", str(tool_default(m, "optimizer", "adamw_torch_fused")))  # axolotl's schema default
    m.put("train.precision", _precision(m))
    m.put("train.gradient_checkpointing", is_true(m.get("gradient_checkpointing", False)))
    kwargs = m.get("gradient_checkpointing_kwargs")
    if isinstance(kwargs, dict) and kwargs and kwargs != {"use_reentrant": False}:
        m.skip("gradient_checkpointing_kwargs", "fttui checkpoints with use_reentrant=False, its own setting")
    _attention(m)
    _outputs(m)
    for key, why in _NOT_TRAINING.items():
        m.skip(key, why)
    m.finish(known_keys("axolotl"))


def _attention(m: Mapped) -> None:
    given = m.get("attn_implementation")
    if given:
        if str(given) not in ("eager", "sdpa", "flash_attention_2"):
            raise m.error(
                "attn_implementation",
                f"attn_implementation {given}: not an attention fttui runs",
                "use eager, sdpa or flash_attention_2",
            )
        m.put("model.attn_implementation", str(given))
    elif is_true(m.get("flash_attention", False)):
        m.put("model.attn_implementation", "flash_attention_2")
    elif is_true(m.get("sdp_attention", False)):
        m.put("model.attn_implementation", "sdpa")
    elif is_true(m.get("eager_attention", False)):
        m.put("model.attn_implementation", "eager")


def _outputs(m: Mapped) -> None:
    if m.has("output_dir"):
        m.put_if_known("train.output_dir", str(m.get("output_dir")), "output_dir")
    if m.has("save_steps"):
        m.put_if_known("train.save", "steps", "save_steps")
        m.put_if_known("train.save_steps", int(m.get("save_steps")), "save_steps")
    m.skip("saves_per_epoch", "fttui saves at the end or every train.save_steps")
    m.skip("evals_per_epoch", "fttui evaluates at train.eval_steps and at the end")
    val = m.get("val_set_size")
    if val is not None and float(val) > 0:
        if float(val) < 1:
            m.put_if_known("data.eval_ratio", float(val), "val_set_size")
        else:
            m.skip("val_set_size", "a count of samples; fttui holds out a fraction (data.eval_ratio)")
    if m.has("eval_steps"):
        m.put_if_known("train.eval_steps", int(m.get("eval_steps")), "eval_steps")
    trackers: list[Any] = []
    if m.has("wandb_project"):
        trackers.append("wandb")
    if is_true(m.get("use_tensorboard", False)):
        trackers.append("tensorboard")
    if is_true(m.get("use_mlflow", False)) or m.has("mlflow_tracking_uri"):
        trackers.append("mlflow")
    for key in [k for k in m.config if str(k).startswith(("wandb_", "mlflow_"))]:
        m.skip(key, "the tracker's own settings: set them in its environment variables")
    if trackers:
        m.put_if_known("train.report_to", trackers, "wandb_project" if "wandb" in trackers else "use_tensorboard")
