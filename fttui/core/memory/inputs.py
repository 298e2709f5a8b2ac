"""What the estimator reads of a resolved profile, and the sizes every memory term shares.

The estimator takes the typed :class:`~fttui.core.profiles.typed.Profile` and its terms read its
attributes. This module owns :func:`settings` (the settings an estimate was made for, as its
``inputs`` report them), :func:`_with` (one probe setting substituted, as
:func:`fttui.core.memory.solve.solve_max` and the calibration vary batch size and sequence
length) and :class:`Setup`, the profile with the quantities derived once per estimate (the
method's registry entry, dtype sizes of weights, activations and the residual stream, parameter
counts, world size, the LoRA modules) that the weight, activation and host terms read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fttui.core.base import methods, shardings
from fttui.core.base.constants import METHODS, PROBE_PARAMS, SHARDINGS
from fttui.core.base.errors import EstimateError
from fttui.core.base.methods import MethodKind
from fttui.core.memory.linears import _native_linears, lora_modules
from fttui.core.models.numbers import ArchNumbers, arch_numbers
from fttui.core.models.prequant import CheckpointQuant, checkpoint_quant, refusal
from fttui.core.profiles.schema import default_optimizer
from fttui.core.profiles.typed import Profile

__all__ = ["DTYPE_BYTES", "PARAMS", "Setup", "settings", "setup", "sharding_of"]

#: bytes per element of each training precision
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
#: the settings solve_max searches, with the profile key each one sets
PARAMS = PROBE_PARAMS


def sharding_of(p: Profile) -> tuple[str, str]:
    """(method, sharding) as the estimator models them: the profile's ``sharding`` (default
    ``none``); ``method = "full-zero3-offload"`` reads as ``full`` with ``zero3-offload``."""
    method = p.method  # the raw name: a legacy one is checked
    sharding = p.sharding or shardings.NONE.name
    legacy = shardings.LEGACY_METHODS.get(method)
    if legacy is not None:
        full, _ = shardings.of(method, None)
        if sharding not in (shardings.NONE.name, legacy.name):
            raise EstimateError(
                f"method {method} is method {full} with sharding {legacy}; "
                f"it cannot take sharding {sharding!r} (use method {full})"
            )
        return str(full), legacy.name
    return method, sharding


def optimizer(p: Profile) -> str:
    """The optimizer that steps: the profile's (resolution fills it; a profile.json written by
    hand may not: then the method's default)."""
    return p.train.optimizer or default_optimizer(p.method, p.sharding)


def settings(p: Profile) -> dict[str, Any]:
    """The settings an estimate was made for, as :attr:`Estimate.inputs
    <fttui.core.memory.breakdown.Estimate.inputs>` reports them (``estimate --json``)."""
    t, dev, lo = p.train, p.devices, p.lora
    method, sharding = shardings.of(p.method, p.sharding)  # a legacy method as its method and sharding
    return {
        "method": method,
        "precision": t.precision,
        "batch_size": t.batch_size,
        "max_seq_len": p.data.max_seq_len,
        "gradient_checkpointing": t.gradient_checkpointing,
        "optimizer": optimizer(p),
        "gpus": dev.gpus,
        "cpu_processes": dev.cpu_processes,
        "nodes": dev.nodes,
        "attn_implementation": p.model.attn_implementation,
        "init": p.model.init,
        "lora_r": lo.r,
        "lora_dropout": float(lo.dropout),
        "lora_target_modules": lo.target_modules if isinstance(lo.target_modules, str) else list(lo.target_modules),
        "quant": p.quant.to_dict(),
        "deepspeed": p.deepspeed.to_dict(),  # [deepspeed] ([zero3] in profiles written before sharding)
        "sharding": sharding,
    }


def _with(p: Profile, param: str, value: int) -> Profile:
    """``p`` with one setting changed (no re-validation needed)."""
    return p.with_settings({PARAMS[param]: int(value)})


@dataclass(frozen=True)
class Setup:
    """The profile of one estimate and the quantities that several memory terms read.

    ``p``: the profile (the terms read its settings); ``optimizer``: the optimizer that steps
    (:func:`optimizer`); ``method``: the method's registry entry as modelled
    (``full-zero3-offload`` is ``full``). ``ab``: activation dtype bytes (2 under autocast or
    half weights); ``wb``: bytes of the non-quantised weights as trained; ``rb``: bytes of the
    residual stream; ``world``: training processes over all nodes; ``head``: output-layer
    parameters (0 when tied to the embedding); ``lin_total``: parameters of the decoder layers'
    linear layers; ``other``: the rest; ``sharding``: one of
    :data:`~fttui.core.base.constants.SHARDINGS` (``kind``: its registry entry); ``per_node``: training processes per
    node;
    ``prequant``: how a GPTQ / AWQ checkpoint stores its weights (None: not pre-quantized)."""

    p: Profile
    optimizer: str
    a: ArchNumbers
    method: MethodKind
    precision: str
    tokens: int
    on_gpu: bool
    half: bool
    ab: int
    wb: int
    rb: int
    embed: int
    head: int
    lin_total: int
    other: int
    lora_mods: list[tuple[str, int, int]]
    lora_params: int
    sharding: str
    world: int
    per_node: int
    prequant: CheckpointQuant | None = None

    @property
    def kind(self) -> shardings.Sharding:
        return shardings.get(self.sharding)

    @property
    def deepspeed(self) -> bool:
        return self.kind.deepspeed

    @property
    def zero3(self) -> bool:
        """DeepSpeed ZeRO stage 3 (parameters partitioned), with or without offload."""
        return self.kind.zero3

    @property
    def fsdp(self) -> bool:
        return self.kind.fsdp


def _weight_bytes(method: MethodKind, kind: shardings.Sharding, p: Profile) -> int:
    """Bytes per non-quantised weight as the worker trains it."""
    precision = p.train.precision
    if kind.deepspeed:
        # DeepSpeed casts the whole module to the half dtype under fp16/bf16
        # (DeepSpeedEngine._configure_distributed_model); the fp32 masters live in its optimizer
        return DTYPE_BYTES[precision]
    if method.full:
        return 2 if precision == "bf16" else 4  # fp16 AMP keeps fp32 weights (fttui.worker.model)
    if method.quantised:
        # prepare_model_for_kbit_training casts every non-quantised tensor to fp32
        return 4 if p.quant.prepare == "peft" else DTYPE_BYTES[precision]
    return DTYPE_BYTES[precision]


_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


def _moe_lora(mods: list[tuple[str, int, int]], a: ArchNumbers, notes: list[str]) -> list[tuple[str, int, int]]:
    """The LoRA modules of an MoE layer: the attention ones, and the MLP names only on a shared
    expert (its width); the routed experts are 3-D parameters, not linear modules LoRA adapts."""
    h, si = a.hidden, a.shared_inter
    shared = {"gate_proj": (h, si), "up_proj": (h, si), "down_proj": (si, h)}
    out = [m for m in mods if m[0] in _ATTENTION]
    mlp = [m[0] for m in mods if m[0] in shared]
    if si:
        out += [(n, *shared[n]) for n in mlp]
    if mlp:
        notes.append(
            f"MoE: lora targets {', '.join(mlp)} adapt "
            f"{'the shared expert only' if si else 'nothing'}; the {a.experts} routed experts "
            "per layer are not linear modules and stay frozen"
        )
    return out


def setup(p: Profile, notes: list[str]) -> Setup:
    """Check the method and precision, read the architecture and derive the shared quantities
    (the LoRA modules' notes go to ``notes``)."""
    precision = p.train.precision
    if p.method not in METHODS:
        raise EstimateError(f"method {p.method!r} is not one the estimator knows ({', '.join(METHODS)})")
    if p.sharding not in SHARDINGS:
        raise EstimateError(f"sharding {p.sharding!r} is not one the estimator knows ({', '.join(SHARDINGS)})")
    name, sharding = sharding_of(p)
    kind = shardings.get(sharding)
    if name not in kind.methods:
        raise EstimateError(
            f"method {name} cannot run with sharding {sharding} (sharding {sharding} "
            f"runs {', '.join(kind.methods)}; method {name} runs with "
            f"{', '.join(shardings.runs_with(name))})"
        )
    if precision not in DTYPE_BYTES:
        raise EstimateError(f"train.precision {precision!r}: use fp32, fp16 or bf16")
    method = methods.get(name)
    model = p.model
    stored = refusal(name, model, sharding)  # a checkpoint stored quantised: never as bf16
    if stored is not None:
        raise EstimateError(f"{stored[0]} ({stored[1]})")
    a = arch_numbers(model)
    gpus = p.devices.gpus
    on_gpu = gpus > 0
    half = DTYPE_BYTES[precision] == 2
    P, V, h, L = a.params, a.vocab, a.hidden, a.layers
    embed = V * h
    # the decoder layers' linear modules (what bitsandbytes quantises; MoE experts are not ones)
    lin_total = a.linear_params or L * sum(fi * fo for _n, fi, fo in _native_linears(a))
    if a.note:
        notes.append(a.note)
    lora_mods: list[tuple[str, int, int]] = []
    lora_params = 0
    if method.adapters:
        lora_mods = lora_modules(p, a, notes)
        if a.experts:
            lora_mods = _moe_lora(lora_mods, a, notes)
        lora_params = L * sum(p.lora.r * (fi + fo) for _n, fi, fo in lora_mods)
    wb = _weight_bytes(method, kind, p)
    per_node = max(1, gpus if on_gpu else p.devices.cpu_processes)
    return Setup(
        p=p,
        optimizer=optimizer(p),
        a=a,
        method=method,
        precision=precision,
        tokens=p.train.batch_size * p.data.max_seq_len,
        on_gpu=on_gpu,
        half=half,
        ab=2 if half else 4,  # activation dtype (autocast / half weights)
        wb=wb,
        # the residual stream follows the embedding output: fp32 weights -> fp32 activations
        rb=wb,
        embed=embed,
        head=0 if a.tied else embed,
        lin_total=lin_total,
        other=P - lin_total,  # embeddings, output layer, norms, biases
        lora_mods=lora_mods,
        lora_params=lora_params,
        sharding=sharding,
        per_node=per_node,
        world=per_node * p.devices.nodes,
        prequant=checkpoint_quant(model),
    )
