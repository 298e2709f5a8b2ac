"""Building the model for every method of the contract: the base causal LM (pretrained or random,
quantised for qlora / lora-int8), gradient checkpointing, and the PEFT wrapping of the LoRA
family; :func:`build_model` returns it with the evidence of what was built.

The configs it is built from live in :mod:`.model_config` (dtypes, quantisation, DeepSpeed), the
adapters in :mod:`.lora`, the evidence in :mod:`.structure`. Imports nothing heavy at import time.
"""

from __future__ import annotations

import contextlib
import tempfile
from typing import Any

from fttui.core.profiles.typed import Profile

from .errors import ConfigError
from .lora import lora_config
from .model_config import device_map, load_config, quant_config, torch_dtype
from .sharding import deepspeed_config
from .structure import count_params, model_structure

# deepspeed_config is re-exported: callers import it from here without loading torch.
__all__ = [
    "ZERO_INIT",
    "META",
    "WHOLE",
    "load_base_model",
    "random_on_host",
    "reentrant_checkpointing",
    "enable_checkpointing",
    "build_model",
    "deepspeed_config",
]

#: how a rank builds its model (:mod:`.partition` decides): inside DeepSpeed's zero.Init, on the
#: meta device (an FSDP rank that receives its shards), or whole
ZERO_INIT, META, WHOLE = "zero.Init", "meta", "whole"


def _meta_model(prof: Profile, dtype, attn: str, trust: bool):
    """The model without weights: what an FSDP rank other than the lowest builds; accelerate
    fills its shards from rank 0's weights. Built on the meta device (buffers real), then each
    parameter gets uninitialised host storage that nothing writes (pages the kernel never maps:
    no resident memory). Not left on meta: accelerate re-points the optimizer from the old
    parameters to the sharded ones by storage address, and meta parameters all share address 0
    (rank 1's optimizer then stepped one parameter many times)."""
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    m = prof.model
    if m.init == "random":
        config = load_config(m)
    elif not m.name_or_path:  # as load_base_model says for the whole model
        raise ConfigError("model.name_or_path: required")
    else:
        config = AutoConfig.from_pretrained(m.name_or_path, trust_remote_code=trust)
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn, trust_remote_code=trust)
    made: dict[int, Any] = {}  # tied parameters stay one parameter
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is not None and p.is_meta:
                if id(p) not in made:
                    made[id(p)] = torch.nn.Parameter(torch.empty_like(p, device="cpu"), requires_grad=p.requires_grad)
                module._parameters[name] = made[id(p)]
    return model


def load_base_model(resolved: Profile, *, use_cuda: bool = False, local_rank: int = 0, build: str = WHOLE):
    """The base causal-LM (quantised for qlora / lora-int8), before PEFT wrapping. ``build``:
    :data:`META` builds it without weights; under :data:`ZERO_INIT` transformers partitions it
    while building it (random weights drawn module by module where DeepSpeed puts them)."""
    import torch
    from transformers import AutoModelForCausalLM

    prof = resolved
    m = prof.model
    dtype = torch_dtype(prof.train.precision, prof.method_kind().full)
    attn, trust = m.attn_implementation, m.trust_remote_code
    qconf = quant_config(prof)
    torch.manual_seed(prof.train.seed)
    kwargs: dict[str, Any] = {"dtype": dtype, "attn_implementation": attn, "trust_remote_code": trust}
    if build == META:
        return _meta_model(prof, dtype, attn, trust)
    if qconf is not None:
        kwargs["quantization_config"] = qconf
        kwargs["device_map"] = device_map(use_cuda, local_rank)
    if m.init == "pretrained":
        if not m.name_or_path:
            raise ConfigError("model.name_or_path: required")
        return AutoModelForCausalLM.from_pretrained(m.name_or_path, **kwargs)
    config = load_config(m)
    card = torch.device("cuda", local_rank) if use_cuda else None
    if qconf is None:
        # on a GPU the random weights are drawn where they will train: a 7B model initialises
        # in seconds there instead of minutes on the host, and the host never holds a copy.
        # DeepSpeed and FSDP keep a host build (they move or partition the host copy themselves;
        # FSDP wrapping a model already on the card held it twice there): drawn on the card one
        # module at a time.
        if build == ZERO_INIT:
            return AutoModelForCausalLM.from_config(
                config, dtype=dtype, attn_implementation=attn, trust_remote_code=trust
            )
        if card is not None and prof.sharding_kind().sharded:
            return random_on_host(config, dtype=dtype, attn=attn, trust=trust, draw_on=card)
        with card or contextlib.nullcontext():
            return AutoModelForCausalLM.from_config(
                config, dtype=dtype, attn_implementation=attn, trust_remote_code=trust
            )
    # bitsandbytes quantises while loading weights: materialise the random model once in a
    # temporary folder and load it back quantised (the fp weights are freed before loading).
    fp = random_on_host(config, dtype=dtype, attn=attn, trust=trust, draw_on=card)
    with tempfile.TemporaryDirectory(prefix="fttui-randinit-") as tmp:
        fp.save_pretrained(tmp)
        del fp
        return AutoModelForCausalLM.from_pretrained(tmp, **kwargs)


def random_on_host(config, *, dtype, attn: str, trust: bool, draw_on=None):
    """A random-init model whose weights live on the host. With ``draw_on`` (a CUDA device) the
    parameters are built on the meta device and each module's own tensors are drawn there by the model's
    own ``_init_weights`` and copied to the host one module at a time: a 7B model in seconds
    instead of minutes of host init, and the card never holds more than one module (its memory
    peak stays the training's). Without it, the plain host build."""
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedModel

    if draw_on is None:
        return AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn, trust_remote_code=trust)
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):  # parameters on the meta device, buffers real
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn, trust_remote_code=trust)

    def draw(module, owner) -> None:
        for child in module.children():  # a sub-model initialises its own modules (as transformers does)
            draw(child, child if isinstance(child, PreTrainedModel) else owner)
        if not any(t is not None for t in (*module._parameters.values(), *module._buffers.values())):
            return
        module._apply(lambda t: torch.empty_like(t, device=draw_on), recurse=False)
        owner._init_weights(module)
        module._apply(lambda t: t.to("cpu"), recurse=False)

    with torch.no_grad():
        draw(model, model)
    model.tie_weights()  # the modules' tensors were replaced one by one: tie the shared ones again
    return model


def reentrant_checkpointing(resolved: Profile, use_cuda: bool) -> bool:
    """Whether gradient checkpointing runs reentrant: 8-bit LoRA on CUDA (see build_model)."""
    prof = resolved
    return bool(use_cuda and prof.method_kind().bits == 8 and prof.train.gradient_checkpointing)


def enable_checkpointing(model, *, reentrant: bool = False) -> None:
    """Gradient checkpointing of every decoder layer; non-reentrant unless ``reentrant``."""
    kw = {"use_reentrant": reentrant}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kw)
    else:  # older transformers
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)


def build_model(resolved: Profile, *, use_cuda: bool = False, local_rank: int = 0, build: str = WHOLE):
    """Model ready for the Trainer (PEFT-wrapped for the LoRA family). Returns ``(model, info)``
    with ``info = {"params_total", "params_trainable", "dtype", "method", "structure", "build"}``
    (``structure``: :func:`model_structure`; ``build``: how this rank built it)."""
    prof = resolved
    kind, gc = prof.method_kind(), prof.train.gradient_checkpointing
    model = load_base_model(prof, use_cuda=use_cuda, local_rank=local_rank, build=build)
    model.config.use_cache = False
    if kind.full:
        for p in model.parameters():
            p.requires_grad_(True)
        if gc:
            enable_checkpointing(model)
    else:
        from peft import get_peft_model, prepare_model_for_kbit_training

        if kind.quantised and prof.quant.prepare == "peft":
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        if gc:
            # bitsandbytes' 8-bit matmul on CUDA keeps its input as an attribute of its autograd
            # context (MatMul8bitLt: ctx.tensors), which non-reentrant checkpointing cannot free:
            # every layer kept its linear inputs (Llama-2-7B b4 x 512 on an H100: 18.2 GB
            # allocated, 10.2 GB predicted). The reentrant variant runs the first forward
            # without autograd, so nothing is kept.
            enable_checkpointing(model, reentrant=reentrant_checkpointing(resolved, use_cuda))
            model.enable_input_require_grads()
        model = get_peft_model(model, lora_config(prof, model))
    total, trainable = count_params(model)
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    return model, {
        "params_total": total,
        "params_trainable": trainable,
        "dtype": dtype,
        "method": prof.method,
        "structure": model_structure(model),
        "build": build,
    }
