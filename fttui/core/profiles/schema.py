"""The profile schema: every key a profile may hold, its kind, default, allowed values and range.

:data:`SCHEMA` (section -> key -> :class:`Field`) is the one description of a profile; the
names around it (sections, ``--set`` aliases, path keys, the meta keys a resolved profile adds)
are read off it. Pure data: no I/O, nothing that checks or resolves (see ``values`` and
``resolve``). The methods come from :mod:`fttui.core.base.constants` (the method registry's names).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from fttui.core.base import methods, shardings
from fttui.core.base.constants import METHODS, SHARDINGS

SYNTHETIC = "synthetic"
SYNTHETIC_DEFAULT_SAMPLES = 256
OVERRIDE = "--set"  # the "file" that override errors name


class Field(NamedTuple):
    """One key of the schema.

    kind: ``str``, ``int``, ``float`` (ints accepted), ``bool``, ``table``, ``modules``
    (a list of names or one string), ``names`` (a list of names, maybe empty; one string is
    read as a comma-separated list), ``size`` (a size string for :func:`parse_size`, "" = none).
    A default of ``None`` means "not set" (optional, or derived from other keys).
    """

    kind: str
    default: Any
    choices: tuple = ()
    lo: float | None = None
    hi: float | None = None
    hi_open: bool = False
    hint: str = ""


TOP = ""  # the section name of top-level keys in SCHEMA

#: section -> key -> Field. The only description of what a profile may contain.
SCHEMA: dict[str, dict[str, Field]] = {
    TOP: {
        "description": Field("str", ""),
        "extends": Field("str", None),
        "method": Field("str", methods.DEFAULT.name.value, METHODS),
        # how states are spread over ranks, orthogonal to the method (docs/launchers.md)
        "sharding": Field("str", shardings.NONE.name, SHARDINGS),
    },
    "model": {
        "name_or_path": Field("str", None),
        "init": Field("str", "pretrained", ("pretrained", "random")),
        "arch": Field("str", None),
        "config": Field("str", None),
        "arch_config": Field("table", {}),
        "arch_name": Field("str", None),  # set by resolution: the fttui.core.models.archs entry
        "trust_remote_code": Field("bool", False),
        "tokenizer": Field("str", None),
        "attn_implementation": Field("str", "sdpa", ("eager", "sdpa", "flash_attention_2")),
    },
    "data": {
        "source": Field("str", SYNTHETIC),
        "name": Field("str", None),
        "format": Field("str", "auto", ("auto", "instruction", "chat")),
        # at least 2: a causal LM learns each token from the ones before it (one token has no label)
        "max_seq_len": Field("int", 512, lo=2, hint="tokens per sample; use 2 or more"),
        "num_samples": Field("int", 0, lo=0, hint="0 means all samples of the file"),
        "pad_to_max": Field("bool", False),
        # a fraction of the samples held out for evaluation (0 = none): evaluated at the end and
        # every train.eval_steps; the evaluation loss goes to the row and the events
        "eval_ratio": Field(
            "float", 0.0, lo=0, hi=1, hi_open=True, hint="a fraction of the samples, 0 or more and below 1, e.g. 0.1"
        ),
    },
    "train": {
        "batch_size": Field("int", 1, lo=1, hint="micro batch per device; use 1 or more"),
        "grad_accum": Field("int", 1, lo=1, hint="gradient accumulation steps; use 1 or more"),
        "epochs": Field("float", 1.0, lo=0, hint="epochs must be >= 0; set max_steps > 0 instead"),
        "max_steps": Field("int", -1, hint="-1 or 0 = use epochs"),
        "lr": Field("float", 2e-4, lo=0, hint="learning rate, e.g. 2e-4"),
        "precision": Field("str", "fp32", ("fp32", "fp16", "bf16")),
        "gradient_checkpointing": Field("bool", False),
        "optimizer": Field("str", None),
        "lr_scheduler": Field("str", "linear"),
        "warmup_ratio": Field("float", 0.0, lo=0, hi=1, hint="a fraction of the steps, 0 to 1"),
        "weight_decay": Field("float", 0.0, lo=0, hint="use 0 or more, e.g. 0.01"),
        "seed": Field("int", 42),
        "warmup_exclude_steps": Field("int", 1, lo=0, hint="steps left out of steady rates; 0 or more"),
        # what the run keeps (docs/architecture.md, "Results kept"): "end" the trained adapter or
        # model in the output folder; "steps" also a resumable checkpoint every save_steps steps
        "save": Field("str", "end", ("end", "steps", "none")),
        "save_steps": Field("int", 100, lo=1, hint="optimizer steps between checkpoints; use 1 or more"),
        "output_dir": Field("str", None),  # none = <run dir>/output
        "eval_steps": Field("int", 0, lo=0, hint="optimizer steps between evaluations; 0 = at the end only"),
        # Trainer trackers (transformers' report_to names); fttui logs its row there at the end
        "report_to": Field("names", []),
        # out of memory in a training step (docs/reliability.md, "Out of memory"): "fail" ends the
        # run; "shrink" resumes from the last checkpoint as a new attempt with half the micro batch
        # and twice the accumulation (the effective batch stays), at most max_oom_retries times
        "on_oom": Field("str", "fail", ("fail", "shrink")),
        "max_oom_retries": Field("int", 3, lo=0, hint="attempts after the first that may shrink the batch; 0 or more"),
        # the data's longest samples in the first optimizer step (then the usual shuffled order):
        # a batch that does not fit runs out of memory in the first minute, not hours in
        "longest_first": Field("bool", False),
        # on a card, the allocator's history for the first optimizer steps: a CUDA out of memory
        # leaves a snapshot of what held the memory (docs/reliability.md); 0 = off
        "memory_history_steps": Field("int", 2, lo=0, hint="optimizer steps to record on a card; 0 = off"),
    },
    "lora": {
        "r": Field("int", 8, lo=1, hint="LoRA rank, e.g. 8 or 16"),
        "alpha": Field("int", 16, lo=1, hint="LoRA alpha, e.g. twice the rank"),
        "dropout": Field("float", 0.05, lo=0, hi=1, hi_open=True, hint="a probability: 0 or more and below 1"),
        "target_modules": Field("modules", ["q_proj", "v_proj"]),
    },
    "quant": {
        "type": Field("str", "nf4", ("nf4", "fp4")),
        "double_quant": Field("bool", True),
        # "peft": peft's prepare_model_for_kbit_training (every weight that is not quantised,
        # embeddings, norms and output layer, cast to fp32: an fp32 residual stream);
        # "none": they stay in the compute dtype (smaller activations; what scripts that skip
        # that call run)
        "prepare": Field("str", "peft", ("peft", "none")),
    },
    # DeepSpeed settings of every zero* sharding (old name [zero3], still read: SECTION_ALIASES).
    # What goes to the host under a *-offload sharding: the optimizer states, and under zero3 the
    # parameters; both are ignored without -offload.
    "deepspeed": {
        "offload_optimizer": Field("bool", True),
        "offload_params": Field("bool", True),
        "pin_memory": Field("bool", True),
        # who owns the optimizer: "trainer" = the Trainer's train.optimizer (DeepSpeed swaps in its
        # CPU Adam when the states are offloaded); "deepspeed" = the config's optimizer section,
        # DeepSpeed's own Adam (fused on a GPU, stepping in place; CPU Adam under offload)
        "optimizer": Field("str", "trainer", ("trainer", "deepspeed")),
        # ZeRO-3: build the model inside zero.Init (each module partitioned as it is built; a
        # pretrained checkpoint read by rank 0 only); false = every rank builds the whole model
        # and DeepSpeed partitions it when the engine starts (what a script that loads the model
        # before creating its TrainingArguments runs)
        "zero3_init": Field("bool", True),
        # ZeRO-3: a gathered parameter stays gathered while it is used again within this many
        # elements of the step's module order (DeepSpeed's stage3_max_reuse_distance; unset =
        # DeepSpeed's default, 1e9: a model of up to 1e9 parameters stays whole from the forward
        # to the backward); and prefetching stops at this many gathered elements
        # (stage3_max_live_parameters, same default). Lower them to keep less of a model gathered.
        "stage3_max_reuse_distance": Field("int", None, lo=0, hint="elements; 0 or more, unset = DeepSpeed's 1e9"),
        "stage3_max_live_parameters": Field("int", None, lo=0, hint="elements; 0 or more, unset = DeepSpeed's 1e9"),
    },
    "devices": {
        "gpus": Field("int", 1, lo=0, hint="GPUs (one process each) per node; 0 = CPU"),
        "cpu_processes": Field("int", 1, lo=1, hint="processes per node when gpus = 0 (CPU ranks)"),
        "nodes": Field("int", 1, lo=1, hint="number of machines; use 1 or more"),
        "node_rank": Field("int", 0, lo=0, hint="this machine's index, from 0 to nodes - 1"),
        "main_addr": Field("str", "127.0.0.1"),
        "main_port": Field("int", 29500, lo=1, hi=65535, hint="a TCP port, 1 to 65535"),
        "launcher": Field("str", "auto", ("auto", "python", "torchrun", "accelerate", "deepspeed")),
    },
    "limits": {
        "gpu_memory": Field("size", ""),
        "host_memory": Field("size", ""),
    },
    "monitor": {
        "stall_timeout_s": Field(
            "float",
            0.0,
            lo=0,
            hint="seconds without a step before a run is flagged stalled; 0 = automatic (max(10 min, 10 usual steps))",
        ),
        "oom_warn_steps": Field(
            "int",
            200,
            lo=1,
            hint="warn when a memory trend reaches its limit within this many steps (docs/reliability.md)",
        ),
    },
    # a command the profile runs instead of fttui's worker (docs/commands.md): `fttui run -p NAME`
    # supervises it as `fttui run -- ARGV` does; the model, data and train sections then go unused
    "command": {
        "argv": Field("argv", None),
        "cwd": Field(
            "str", None
        ),  # the folder it runs in (relative: from the profile's folder); none = where fttui starts
    },
}

SECTIONS: tuple[str, ...] = tuple(s for s in SCHEMA if s != TOP)

#: old section names, read as the new ones (files and ``--set``)
SECTION_ALIASES: dict[str, str] = {shardings.LEGACY_SECTION: "deepspeed"}

#: short ``--set`` names
ALIASES: dict[str, str] = {
    "batch_size": "train.batch_size",
    "grad_accum": "train.grad_accum",
    "max_seq_len": "data.max_seq_len",
    "num_samples": "data.num_samples",
    "max_steps": "train.max_steps",
    "epochs": "train.epochs",
    "lr": "train.lr",
    "precision": "train.precision",
    "gpus": "devices.gpus",
    "cpu_processes": "devices.cpu_processes",
}

#: keys that may hold a path; relative ones are taken from the folder of the file that set them
PATH_KEYS = ("model.name_or_path", "model.tokenizer", "model.config", "data.source")

#: top-level keys of a resolved profile that are not schema keys
META_KEYS = ("name", "source", "origin", "derived", "overrides")


def dotted(section: str, key: str) -> str:
    """``train.batch_size``; a top-level key (section TOP) stays as it is."""
    return f"{section}.{key}" if section else key


ALL_KEYS: tuple[str, ...] = tuple(dotted(s, k) for s, keys in SCHEMA.items() for k in keys)


def default_optimizer(method: str | None, sharding: str | None) -> str:
    """``train.optimizer`` when the profile leaves it out: the method's own (QLoRA's paged AdamW),
    except where the sharding's optimizer does not step plain tensors (FSDP: bitsandbytes'
    optimizers cannot step its DTensor shards), and torch's AdamW for everything else."""
    kind = shardings.find(shardings.of(method, sharding)[1]) or shardings.NONE
    entry = shardings.method_of(method)
    own = entry.optimizer if entry is not None else None
    return own if own and kind.steps_plain_tensors else "adamw_torch"


__all__ = [
    "ALIASES",
    "ALL_KEYS",
    "META_KEYS",
    "METHODS",
    "OVERRIDE",
    "PATH_KEYS",
    "default_optimizer",
    "SCHEMA",
    "SECTIONS",
    "SECTION_ALIASES",
    "SYNTHETIC",
    "SYNTHETIC_DEFAULT_SAMPLES",
    "TOP",
    "Field",
    "dotted",
]
