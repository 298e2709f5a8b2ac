"""Sharding over ranks: what one rank holds under DeepSpeed ZeRO-2 / ZeRO-3 and FSDP, and what
the offloading variants move to the host.

Owns :func:`sharded_states` (the static per-rank terms of a sharded run, in place of the
unsharded ones of :mod:`fttui.core.memory.states`), :func:`step_temporaries` (the optimizer
step's temporaries per rank) and :data:`DEEPSPEED_DEFAULTS` (the DeepSpeed settings the figures
assume: DeepSpeed's own defaults as the HF Trainer fills them). ``N`` below is the world size
(nodes x processes per node); ``T`` the trainable parameters (every parameter for ``full``,
the adapters, plus ``lora-emb``'s embedding copies, for the LoRA family). The sources and the
check against DeepSpeed's own estimator are in docs/estimate.md.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from fttui.core.base.units import GIB
from fttui.core.memory.inputs import DTYPE_BYTES, Setup
from fttui.core.memory.linears import _native_linears
from fttui.core.memory.states import _adapters, _optimizer_bytes_per_param

__all__ = [
    "DEEPSPEED_DEFAULTS",
    "Working",
    "deepspeed_owns_optimizer",
    "zero3_init",
    "deepspeed_reference",
    "ds_buckets",
    "largest_layer_params",
    "sharded_states",
    "step_temporaries",
    "trainable_params",
]


class Working(NamedTuple):
    """The parameters a rank gathers in flight, by phase of the step (bytes): ``gathered`` in
    every phase (ZeRO-3); ``loss`` while the loss runs its backward and ``layer`` while a decoder
    layer runs its backward (FSDP). ``whole``: the bytes of the whole model a card holds while the
    model is built, before the engine shards it (0 when it never does: ZeRO-3 builds inside
    zero.Init, FSDP ranks other than the lowest build on the meta device); ``rank0_only``: only
    the lowest rank's card holds it (FSDP's random init, drawn on that card)."""

    gathered: float = 0.0
    loss: float = 0.0
    layer: float = 0.0
    whole: float = 0.0
    rank0_only: bool = False


#: DeepSpeed settings the estimate assumes. The worker's config leaves the bucket sizes to the HF
#: Trainer ("auto": ``reduce_bucket_size = h^2``, ``stage3_prefetch_bucket_size = 0.9 h^2``,
#: ``stage3_param_persistence_threshold = 10 h``, transformers.integrations.deepspeed) and the
#: rest to DeepSpeed's defaults (deepspeed.runtime.zero.config).
DEEPSPEED_DEFAULTS: dict[str, Any] = {
    "overlap_comm": True,  # the worker's config: two reduce buckets under ZeRO-2
    "contiguous_gradients": True,
    "stage3_max_live_parameters": 10**9,
    "stage3_max_reuse_distance": 10**9,
    # the worker's ZeRO-2 setting; ZeRO-2 gathers the updated partitions straight into its flat
    # half-precision buffer, so this bucket holds no copy
    "allgather_bucket_size": 2 * 10**8,
}


def ds_buckets(hidden: int) -> dict[str, int]:
    """The bucket sizes (elements) the HF Trainer fills for DeepSpeed's ``auto`` keys."""
    return {
        "reduce_bucket_size": hidden * hidden,
        "stage3_prefetch_bucket_size": int(0.9 * hidden * hidden),
        "stage3_param_persistence_threshold": 10 * hidden,
    }


def trainable_params(c: Setup) -> int:
    """``T``: the parameters that have gradients and optimizer states."""
    if c.method.full:
        return c.a.params
    return c.lora_params + ((c.embed + c.head) if c.method.embeddings else 0)


def largest_layer_params(c: Setup) -> int:
    """The parameters of the largest single module (the embedding or one linear layer), as
    DeepSpeed's ZeRO-3 estimator takes them."""
    return max(c.embed, max(fi * fo for _n, fi, fo in _native_linears(c.a)))


def deepspeed_reference(c: Setup, factor: float = 1.5) -> tuple[float, float]:
    """(bytes per card, host bytes per node) of the model states by DeepSpeed's own estimators
    for full fine-tuning, ``estimate_zero2_model_states_mem_needs`` and
    ``estimate_zero3_model_states_mem_needs`` (``zero_init=False``: fttui builds the model
    before DeepSpeed), with ``additional_buffer_factor``; restated here so that the estimate
    stays torch-free (tests/unit/test_estimate_sharding.py checks it against DeepSpeed's)."""
    P, n, nodes = c.a.params, c.per_node, c.p.devices.nodes
    gpus = n * nodes
    off_o, off_p = _offloads(c)
    if c.kind.stage == 2:
        if off_o:
            return 2 * P, P * max(4 * gpus, 16) * factor
        return 2 * P + int(18 * P / gpus), P * 4 * n * factor
    largest = 4 * largest_layer_params(c)
    if off_o and off_p:
        return largest, P * max(4 * n, 18 / nodes) * factor
    if off_o:
        return largest + int(2 * P / gpus), P * max(4 * n, 16 / nodes) * factor
    return largest + int(18 * P / gpus), P * 4 * n * factor


def _opt_bytes(optimizer: str, param_bytes: int) -> float:
    return _optimizer_bytes_per_param(optimizer, param_bytes)[0]


def _offloads(c: Setup) -> tuple[bool, bool]:
    """(optimizer states offloaded, parameters offloaded) to the host: under DeepSpeed what the
    ``[deepspeed]`` settings move (parameters at stage 3 only), under FSDP everything."""
    kind, z = c.kind, c.p.deepspeed
    if not kind.offload:
        return False, False
    if kind.deepspeed:
        return bool(z.offload_optimizer), kind.zero3 and bool(z.offload_params)
    return True, True


def deepspeed_owns_optimizer(c: Setup) -> bool:
    """``[deepspeed] optimizer = "deepspeed"`` under a ZeRO sharding: DeepSpeed's own Adam steps
    (fused on the card, in place; its CPU Adam when the states are offloaded)."""
    return c.deepspeed and c.p.deepspeed.optimizer == "deepspeed"


def zero3_init(c: Setup) -> bool:
    """ZeRO-3 builds the model inside zero.Init (``[deepspeed] zero3_init``, default true), unless
    the base is quantised (transformers builds no quantised model there)."""
    return c.zero3 and not c.method.quantised and bool(c.p.deepspeed.zero3_init)


def step_temporaries(c: Setup) -> float:
    """The optimizer step's temporaries on a rank (torch AdamW foreach: about one tensor per
    parameter it steps): the rank's partition, in fp32 under DeepSpeed (its masters), in the
    parameter dtype under FSDP; nothing on the card when the step runs on the host or when
    DeepSpeed's fused Adam steps in place."""
    off_o, _off_p = _offloads(c)
    if off_o or deepspeed_owns_optimizer(c):
        return 0.0
    t = trainable_params(c) / c.world
    if c.deepspeed:
        return 4 * t
    return t * (c.wb if c.method.full else 4)


def _unsharded(c: Setup, notes: list[str]) -> tuple[float, float, float, float]:
    """(frozen weight bytes, adapter bytes, other trainable bytes, quantisation bytes) of the
    whole model as the run holds it before sharding. DeepSpeed casts the whole module, adapters
    included, to the half dtype; FSDP keeps the dtypes the model was built with (peft's adapters
    fp32). Other trainable: every parameter (``full``) or ``lora-emb``'s embedding copies."""
    if c.method.full:
        return 0.0, 0.0, c.a.params * c.wb, 0.0
    tmp = dict.fromkeys(("weights", "gradients", "optimizer_states", "lora", "quantisation"), 0.0)
    scratch: list[str] = []  # its optimizer note is the unsharded one; the sharded note follows
    _adapters(c, tmp, scratch)
    notes += [n for n in scratch if not n.startswith("optimizer ")]
    emb = (c.embed + c.head) if c.method.embeddings else 0
    adapter_b = DTYPE_BYTES[c.precision] if c.deepspeed else 4
    return tmp["weights"] - emb * c.wb, c.lora_params * adapter_b, emb * c.wb, tmp["quantisation"]


def _zero3_gathered(c: Setup) -> float:
    """ZeRO-3 releases a module's gathered parameters only when they are not reused within
    ``stage3_max_reuse_distance`` elements of the recorded module order (DeepSpeed's
    ``PartitionedParameterCoordinator``; default 1e9, ``[deepspeed] stage3_max_reuse_distance``):
    around the turn from forward to backward up to that many elements stay gathered; plus the
    prefetch bucket, which never prefetches past ``stage3_max_live_parameters`` gathered
    elements. In the half dtype, on every phase of the step."""
    a, ds = c.a, c.p.deepspeed
    reuse, live = (
        DEEPSPEED_DEFAULTS[k] if v is None else int(v)
        for k, v in (
            ("stage3_max_reuse_distance", ds.stage3_max_reuse_distance),
            ("stage3_max_live_parameters", ds.stage3_max_live_parameters),
        )
    )
    prefetch = min(ds_buckets(a.hidden)["stage3_prefetch_bucket_size"], live)
    return c.wb * (min(a.params, reuse) + prefetch)


def _fsdp_working(c: Setup) -> Working:
    """FSDP, one unit per decoder layer and the root (embeddings, final norm, output layer): the
    root stays gathered from its forward to the end of the backward; a layer's backward holds two
    layer-sized flat buffers: the layer gathered, and the next layer's all-gather (prefetch) or
    the layer's flat gradients on their way to the reduce-scatter (measured on CPU: never three).
    Gathered in the compute dtype (mixed precision casts the gathered copy)."""
    a = c.a
    layer = (a.params - c.embed - c.head) / max(1, a.layers)
    per = DTYPE_BYTES[c.precision] if c.half else c.wb
    root = per * (c.embed + c.head)
    return Working(loss=root, layer=root + 2 * per * layer)


def sharded_states(c: Setup, bd: dict[str, float], host_bd: dict[str, float], notes: list[str]) -> Working:
    """Fill the static per-rank terms of a sharded run (``bd``: this rank's card; ``host_bd``:
    this node's offloaded parts). Returns the parameters gathered in flight, by phase."""
    a, N, per_node = c.a, c.world, c.per_node
    T = trainable_params(c)
    frozen, adapter_b, other_b, quant = _unsharded(c, notes)
    train_b = adapter_b + other_b
    off_o, off_p = _offloads(c)
    node_share = per_node / N  # the part of the whole model the ranks of one node hold
    bd["quantisation"] = quant
    if c.deepspeed:
        hb = DTYPE_BYTES[c.precision]
        # fp32 master partition (4) + the optimizer's states on it (Adam m and v: 8)
        ob = 4 + _opt_bytes(c.optimizer, 4)
        # the gradient partition in the half dtype + its fp32 copy for the step (torch AdamW);
        # DeepSpeed's own Adam: the fp32 copy is made as the half partition is freed
        ds_opt = deepspeed_owns_optimizer(c)
        gb = max(hb, 4) if ds_opt else hb + 4
        if c.kind.stage == 2:
            # ZeRO-2: the half-precision parameters are replicated on every rank
            bd["weights"] = frozen + other_b
            bd["lora"] = adapter_b
        else:
            part = (frozen + train_b) / N
            if off_p:
                host_bd["offload_param_partitions"] = (frozen + train_b) * node_share
            else:
                bd["weights"] = part
        if off_o:
            # ZeRO-Offload: the gradients go straight to a pinned fp32 host buffer; the
            # fp32 masters and the states stay on the host, where the step runs
            host_bd["offload_master_params"] = 4 * T * node_share
            host_bd["offload_optimizer_states"] = (ob - 4) * T * node_share
            host_bd["offload_gradients"] = 4 * T * node_share
        else:
            bd["gradients"] = gb * T / N
            bd["optimizer_states"] = ob * T / N
        buckets = ds_buckets(a.hidden)["reduce_bucket_size"] * hb
        stage2 = c.kind.stage == 2
        bd["communication"] = buckets * (2 if stage2 and DEEPSPEED_DEFAULTS["overlap_comm"] else 1)
        if stage2 and off_o:
            # ZeRO-2 offload stages the updated partition in the half dtype on the host
            # (param_buffer_of_bit16_for_cpu_offload_groups) before it goes back to the card
            host_bd["offload_pinned_buffers"] = hb * T * node_share
        if c.zero3 and (off_p or off_o):
            # pinned staging buffers for the parameter and gradient buckets (prefetch + reduce
            # buckets, about 4 x hidden^2 elements each, fp32)
            host_bd["offload_pinned_buffers"] = 2 * 4 * a.hidden * a.hidden * 4 * per_node
        if ds_opt:
            notes.append(
                "optimizer: DeepSpeed's own Adam (the DeepSpeed config's optimizer section): "
                + (
                    "its CPU Adam steps on the host"
                    if off_o
                    else "fused, stepping the fp32 partition in place (no per-parameter temporaries)"
                )
            )
        notes.append(
            f"DeepSpeed {c.sharding} over {N} rank(s): per trainable parameter "
            + (
                f"fp32 masters + optimizer states + fp32 gradients {ob + 4:.0f} B on the host"
                if off_o
                else f"fp32 masters + optimizer states {ob:.0f} B and gradients {gb} B on the card"
            )
            + ", partitioned"
        )
        whole = 0.0
        if c.zero3 and quant:
            # a quantised model is loaded whole on every card (no zero.Init for it) and
            # partitioned by the engine
            whole = frozen + train_b + quant
            notes.append(
                f"ZeRO-3 with a quantised base: every card first loads the whole quantised model "
                f"({whole / GIB:.1f} GiB) before DeepSpeed partitions it (no zero.Init for it)"
            )
        elif c.zero3 and not zero3_init(c):
            whole = a.params * c.wb
            notes.append(
                f"ZeRO-3 without zero.Init ([deepspeed] zero3_init = false): every card first holds the "
                f"whole model in the half dtype ({whole / GIB:.1f} GiB) before DeepSpeed partitions it; "
                "a smaller card fails while the engine starts"
            )
        elif c.zero3:
            notes.append(
                "ZeRO-3 builds the model inside zero.Init: each module partitioned as it is built "
                "(from_pretrained: rank 0 reads the checkpoint on the host); no card holds the whole model"
            )
        if c.method.full:
            gpu, cpu = deepspeed_reference(c)
            notes.append(
                f"DeepSpeed's own estimator (model states, additional_buffer_factor 1.5, "
                f"no zero.Init): {gpu / GIB:.1f} GiB per card, {cpu / GIB:.1f} GiB host "
                "per node"
            )
        return Working(gathered=_zero3_gathered(c), whole=whole) if c.zero3 else Working()
    # FSDP, full shard: parameters, gradients and optimizer states partitioned over the ranks
    gp = c.wb if c.method.full else 4
    ob = _opt_bytes(c.optimizer, gp)
    if off_p:
        host_bd["offload_param_partitions"] = (frozen + train_b) * node_share
        host_bd["offload_gradients"] = gp * T * node_share
        host_bd["offload_optimizer_states"] = ob * T * node_share
    else:
        bd["weights"] = (frozen + train_b) / N
        bd["gradients"] = gp * T / N
        bd["optimizer_states"] = ob * T / N
    # the root unit's gradients (embeddings, output layer: when they train) stay unsharded until
    # the end of the backward
    root_train = (c.embed + c.head) if c.method.trains_embeddings else 0
    bd["gradients"] += root_train * gp
    notes.append(
        f"FSDP full shard over {N} rank(s): parameters, gradients and optimizer states "
        "partitioned" + (", on the host" if off_p else "") + "; the root unit gathered "
        "through the step, a layer and the next (prefetched) in a layer's backward"
    )
    w = _fsdp_working(c)
    if quant:
        # every rank loads the quantised model (accelerate broadcasts no 4-bit parameters)
        notes.append(
            f"FSDP with a quantised base (4-bit weights stored in the compute dtype): every card first "
            f"loads the whole quantised model ({(frozen + train_b + quant) / GIB:.1f} GiB), then keeps its shard"
        )
        return w._replace(whole=frozen + train_b + quant)
    # RAM-efficient loading: the lowest rank reads the checkpoint or draws the random weights
    # (on the host; fttui.worker.model), the others build on the meta device and receive their
    # shards: no card holds the whole model (the host copy: fttui.core.memory.host)
    return w
