"""Predict peak GPU memory per card and host memory of a run before launching it (pure Python).

``estimate(profile) -> Estimate`` reads a resolved, typed profile
(:class:`fttui.core.profiles.typed.Profile`) and the architecture numbers
(``fttui.core.models.numbers``) and adds up, per card, step by step:

* weights, gradients, optimizer states, LoRA parameters and quantisation buffers
  (:mod:`fttui.core.memory.states`; per rank under DeepSpeed ZeRO / FSDP, with what the
  offloading variants put on the host: :mod:`fttui.core.memory.sharding`),
* activations (:mod:`fttui.core.memory.activations`: what autograd keeps, with and without
  gradient checkpointing, the output layer's logits and the attention matrix of eager
  attention) and the optimizer step's temporaries,
* framework overhead: the CUDA context, communication buffers and the caching allocator's
  reserved-but-unused memory (this module),
* the host (:mod:`fttui.core.memory.host`).

No torch, no weights. The formulas, their sources and where they depart from them are in
docs/estimate.md; the global constants are :data:`fttui.core.memory.breakdown.CONSTANTS`.
Calibration against measured rows is in :mod:`fttui.core.memory.calibration`.
"""

from __future__ import annotations

from typing import Any

from fttui.core.base.units import GIB, MIB
from fttui.core.memory.activations import activation_peak
from fttui.core.memory.breakdown import COMPONENTS, CONSTANTS, HOST_COMPONENTS, Calibration, Estimate
from fttui.core.memory.host import host_terms
from fttui.core.memory.inputs import Setup, settings, setup
from fttui.core.memory.resume import resume_peak
from fttui.core.memory.sharding import Working, sharded_states, step_temporaries
from fttui.core.memory.states import norm_head, trainable_states
from fttui.core.profiles.typed import Profile

__all__ = ["estimate"]


def _dynamic(
    c: Setup,
    bd: dict[str, float],
    per_tok: float,
    att_bytes: float,
    calibration: Calibration | None,
    sides: list[float],
) -> float:
    """Activations (or the optimizer step's temporaries, the larger) and the allocator's share
    of them. Returns the allocator fraction applied to activations; ``sides`` gets the two
    (activations, the step's temporaries)."""
    method, P, wb = c.method, c.a.params, c.wb
    # with checkpointing the caching allocator keeps about the checkpoints' size again in
    # blocks it cannot reuse (measured on an H100: reserved - allocated = 0.8-1.4 x the
    # checkpoints over six Llama-2-7B settings, against 0.1-0.3 of the activations without)
    ckpt_bytes = c.a.layers * 2 * c.a.hidden * c.tokens if c.p.train.gradient_checkpointing else 0.0
    if calibration is not None:
        act = calibration.per_token_bytes * c.tokens + att_bytes
        alloc_on_act = 0.0
    else:
        act = per_tok * c.tokens + att_bytes
        alloc_on_act = CONSTANTS["allocator_fraction"]
    # the optimizer step runs after the backward has freed the activations: its temporaries
    # (torch AdamW foreach: about one tensor per trainable parameter) compete with them
    if c.kind.sharded:
        step_tmp = step_temporaries(c)
    else:
        step_tmp = (P * wb if method.full else 0) + c.lora_params * 4
        if method.embeddings:
            step_tmp += (c.embed + c.head) * wb  # the trainable embedding / output-layer copies
    dyn = max(act, step_tmp)
    bd["activations"] = dyn
    # the two sides of that max, apart: an out of memory's phase names one (fttui.core.results.oomexplain)
    sides.extend((act, step_tmp))
    bd["allocator"] = max(alloc_on_act * dyn, ckpt_bytes if alloc_on_act and c.on_gpu else 0.0)
    return alloc_on_act


def _framework(c: Setup, bd: dict[str, float], calibration: Calibration | None) -> None:
    """The CUDA context and, with more than one process, the communication buffers (on top of
    the sharded runs' buckets, already in ``bd``)."""
    if not c.on_gpu:
        return
    bd["cuda_context"] = CONSTANTS["cuda_context_bytes"]
    if calibration is not None and calibration.context_bytes is not None:
        bd["cuda_context"] = calibration.context_bytes
    if c.world > 1:
        # DDP's reducer keeps its buckets as a second copy of every trainable gradient
        # (gradient_as_bucket_view=False, the HF Trainer default); NCCL its own buffers
        P, wb, method = c.a.params, c.wb, c.method
        ddp_copy = (
            0
            if c.kind.sharded
            else (
                c.lora_params * 4
                + (P * wb if method.full else 0)
                + ((c.embed + c.head) * wb if method.embeddings else 0)
            )
        )
        bd["communication"] += CONSTANTS["comm_bytes"] + ddp_copy


def _working_set(
    c: Setup,
    bd: dict[str, float],
    w: Working,
    phase_extra: float,
    extra_head: float,
    alloc_on_act: float,
    notes: list[str],
) -> float:
    """ZeRO-3 and FSDP: the gathered parameters of the peak's phase (counted under weights) and
    the NormHead copy join the activations in the working set, which the allocator fraction
    applies to. A card that holds the whole model while it is built (``w.whole``: a quantised
    base under ZeRO-3 or FSDP; FSDP's random init on the lowest rank's card, where it is drawn)
    keeps those blocks in the caching allocator, and everything it allocates afterwards reuses
    them: its reserved memory is at least that copy (the unused rest counted under allocator
    overhead, on the cards that hold it). Returns the bytes of that copy (0 when no card
    holds it)."""
    # the phase activation_peak chose: a decoder layer's backward or the loss's
    gathered = w.gathered + (w.layer if w.layer and phase_extra == w.layer else w.loss)
    bd["weights"] += gathered
    bd["activations"] += extra_head
    working = bd["activations"] + gathered
    bd["allocator"] = alloc_on_act * working
    if c.on_gpu and w.whole:
        inside = sum(
            bd[k]
            for k in (
                "weights",
                "gradients",
                "optimizer_states",
                "lora",
                "activations",
                "quantisation",
                "communication",
            )
        )
        notes.append(
            f"{'ZeRO-3' if c.zero3 else 'FSDP'}: {min(inside, w.whole) / GIB:.1f} GiB of the "
            + ("lowest rank's card" if w.rank0_only else "card")
            + "'s allocations reuse the "
            "cached copy of the whole model built there"
        )
        return w.whole
    return 0.0


def _load_floor(bd: dict[str, float], whole: float) -> float:
    """The allocator bytes a card that held the whole model (``whole``) keeps above its
    training allocations."""
    inside = sum(v for k, v in bd.items() if k not in ("allocator", "cuda_context"))
    return max(0.0, whole - inside)


def _cap_allocator(bd: dict[str, float], device_bytes: int, whole: float = 0.0) -> None:
    """The caching allocator frees its cached blocks and retries before it reports OOM (PyTorch
    CUDA caching allocator), so the reserved-but-unused part shrinks to the room left on the
    card: NVML "used" stays below the card while allocated memory fits. ``whole``: a copy of the
    whole model the card must hold at once first (ZeRO-3); no retry frees
    that, so a card smaller than it does not fit."""
    allocated = sum(v for k, v in bd.items() if k != "allocator")
    bd["allocator"] = max(0.0, min(bd["allocator"], max(device_bytes, whole) - allocated))


def _inputs(c: Setup) -> dict[str, Any]:
    """The settings an estimate was made for, as :meth:`Estimate.to_dict` reports them."""
    inputs = settings(c.p)
    if c.prequant is not None:  # a GPTQ / AWQ checkpoint: its config.json's storage, not [quant]
        q = c.prequant
        inputs.update(quant={"type": q.method, "bits": q.bits, "group_size": q.group_size, "format": q.fmt})
    elif not c.method.quantised:
        inputs["quant"] = None  # the profile's [quant] defaults quantise nothing in this run
    elif c.method.bits == 8:
        # bitsandbytes LLM.int8(); [quant]'s 4-bit keys do not apply
        inputs["quant"] = {"type": "int8", "prepare": c.p.quant.prepare}
    inputs.update(
        {
            "model": c.p.model.name_or_path,
            "arch": c.a.arch_name or c.a.model_type,
            "params": c.a.params,
            "lora_params": c.lora_params,
            "tokens_per_step": c.tokens,
            "sharding": c.sharding,
            "ranks": c.world,
            "lora_modules": [n for n, _fi, _fo in c.lora_mods],
            "profile": c.p.name or None,
        }
    )
    return inputs


def _final_notes(c: Setup, calibration: Calibration | None, notes: list[str]) -> None:
    if calibration is not None:
        ctx = (
            f", CUDA context {calibration.context_bytes / MIB:.0f} MiB" if calibration.context_bytes is not None else ""
        )
        notes.insert(
            0,
            f"calibrated from {calibration.rows} measured rows "
            f"({calibration.per_token_bytes / 1024:.1f} KiB per token{ctx})",
        )
    if c.p.devices.nodes > 1:
        notes.append(
            f"per-card figures for one node; every node is the same ({c.world} ranks "
            f"= {c.p.devices.nodes} nodes x {c.per_node}); host figures per node"
        )


def estimate(profile: Profile, calibration: Calibration | None = None, device_bytes: int | None = None) -> Estimate:
    """Predict peak GPU memory per card and the host peak of a resolved profile."""
    notes: list[str] = []
    c = setup(profile, notes)
    if c.kind.sharded and c.world == 1:
        notes.append(
            f"sharding {c.sharding} over 1 process shards nothing: every state stays whole on it "
            "(devices.gpus = N, or devices.cpu_processes = N on CPU, for N ranks)"
        )
    bd = dict.fromkeys(COMPONENTS, 0.0)
    host_bd = dict.fromkeys(HOST_COMPONENTS, 0.0)
    w = Working()
    if not c.kind.sharded:
        trainable_states(c, bd, notes)
    else:
        w = sharded_states(c, bd, host_bd, notes)
    extra_head = norm_head(c, bd, notes)
    per_tok, att_bytes, phase_extra = activation_peak(c, w.loss, w.layer)
    sides: list[float] = []
    alloc_on_act = _dynamic(c, bd, per_tok, att_bytes, calibration, sides)
    whole = 0.0
    if c.zero3 or c.fsdp:
        whole = _working_set(c, bd, w, phase_extra, extra_head, alloc_on_act, notes)
    # the allocations the cached copy covers are the model's and the step's, not the
    # communication buffers added with the framework below
    floor = _load_floor(bd, whole) if whole else 0.0
    _framework(c, bd, calibration)
    others = None  # the cards that never hold the whole model, when only the lowest rank's does
    if whole and w.rank0_only:
        others = dict(bd)
    bd["allocator"] += floor
    if device_bytes and c.on_gpu:
        _cap_allocator(bd, device_bytes, whole)
        if others is not None:
            _cap_allocator(others, device_bytes)
        if whole > device_bytes:
            where = "the lowest rank's card" if w.rank0_only else "the card"
            notes.append(
                f"does not fit: {where} first holds the "
                f"whole model ({whole / GIB:.1f} GiB) before "
                f"{'DeepSpeed partitions' if c.zero3 else 'FSDP shards'} it, more than "
                f"{device_bytes / GIB:.1f} GiB"
            )
    card = {k: int(round(v)) for k, v in bd.items()}
    rank = dict(card)  # one rank's terms wherever they live (its card, or the host for CPU training)
    host_load = host_terms(c, bd, host_bd)
    load_card = 0
    if c.on_gpu:
        gpus = c.p.devices.gpus
        gpu_peak = [int(sum(card.values()))] * gpus
        if others is not None and gpus > 1:
            gpu_peak[1:] = [int(round(sum(others.values())))] * (gpus - 1)
            notes.append(
                "per-card peaks differ: only the lowest rank's card builds the whole model "
                "(the breakdown is that card's)"
            )
        load_card = int(round(whole + bd["cuda_context"])) if whole else 0
    else:
        gpu_peak = []
        card = dict.fromkeys(card, 0)
    host = {k: int(round(v)) for k, v in host_bd.items()}
    resume = _resume(c, rank, notes)
    _final_notes(c, calibration, notes)
    return Estimate(
        inputs=_inputs(c),
        breakdown=card,
        gpu_peak_bytes=gpu_peak,
        host_breakdown=host,
        host_peak_bytes=int(sum(host.values())),
        host_load_peak_bytes=int(round(host_load)),
        host_train_peak_bytes=int(round(sum(host_bd.values()) - host_bd["model_load"])),
        gpu_load_peak_bytes=load_card,
        activation_per_token_bytes=(calibration.per_token_bytes if calibration else per_tok * (1 + alloc_on_act)),
        activation_attention_bytes=att_bytes,
        notes=notes,
        calibration=calibration,
        device_bytes=device_bytes,
        rank_breakdown=rank,
        on_gpu=c.on_gpu,
        activation_bytes=int(round(sides[0])),
        step_temporaries_bytes=int(round(sides[1])),
        resume=resume,
    )


def _resume(c: Setup, rank: dict[str, int], notes: list[str]) -> dict:
    """A resume's load peak per rank (:func:`fttui.core.memory.resume.resume_peak`); a note when
    the run keeps checkpoints to resume from (``train.save = "steps"``, ``on_oom = "shrink"``)
    and the resume's peak is above the training's."""
    kind = c.kind.family
    trained = c.a.params * c.wb if c.method.full else c.lora_params * 4
    got = resume_peak({k: float(v) for k, v in rank.items()}, float(sum(rank.values())), kind, trained)
    resumable = c.p.train.save == "steps" or c.p.train.on_oom == "shrink"
    if resumable and got["above"] > 0:
        notes.append(
            f"a resume from a checkpoint peaks at {got['peak'] / GIB:.2f} GiB on every rank, "
            f"{got['above'] / GIB:.2f} GiB above its training peak"
        )
    return got
