"""Live tensor memory of a training step, counted storage by storage (CPU; no allocator).

:class:`LiveTensors` is a ``TorchDispatchMode`` that adds up the bytes of every storage an
operator creates inside it and subtracts them when the storage dies (a weak reference on the
storage), so ``peak`` is the largest amount of tensor memory alive at once and ``at_peak`` says
which operator made each storage alive then. Storages made before the mode (parameters,
optimizer states, inputs) are passed as ``external`` and not counted.

:func:`measure_step` builds the model of a resolved profile as the worker does
(:func:`fttui.worker.model.build_model`), runs one warm-up step (optimizer states created), then
measures one step the way the HF Trainer runs it (forward, loss, backward, ``optimizer.step``;
the model outputs are dropped before the backward). It is how the estimator's activation model
is checked tensor by tensor: :func:`check_estimate` on the settings of :data:`SETTINGS`
(``bench/estimate_tensors.py``, ``tests/worker/test_estimate_tensors.py``), and its growth with
the sequence length by :func:`check_slope` (bytes per token between two lengths, measured and
estimated).
"""

from __future__ import annotations

import collections
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from fttui.core.profiles.typed import Profile


class LiveTensors(TorchDispatchMode):
    def __init__(self, external: set[int] | None = None) -> None:
        super().__init__()
        self.current = 0
        self.peak = 0
        self.external = set(external or ())
        self._alive: dict[int, tuple[str, tuple[int, ...], str, int]] = {}
        self._refs: dict[int, Any] = {}
        self.at_peak: dict[int, tuple[str, tuple[int, ...], str, int]] = {}

    def _free(self, key: int, n: int) -> None:
        if self._alive.pop(key, None) is not None:
            self.current -= n
        self._refs.pop(key, None)

    def _on_free(self, key: int, n: int) -> Callable[[object], None]:
        """The weakref callback of one storage: ``key`` (its data pointer) and ``n`` bytes freed."""
        return lambda _ref: self._free(key, n)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
                continue
            st = t.untyped_storage()
            key, n = st.data_ptr(), st.nbytes()
            if n == 0 or key in self._alive or key in self.external:
                continue
            self._alive[key] = (str(func), tuple(t.shape), str(t.dtype).replace("torch.", ""), n)
            self._refs[key] = weakref.ref(st, self._on_free(key, n))
            self.current += n
            if self.current > self.peak:
                self.peak = self.current
                self.at_peak = dict(self._alive)
        return out

    def top(self, k: int = 10) -> list[tuple[str, str, int]]:
        """The operators whose outputs held the most memory at the peak: (op, dtype, bytes)."""
        c: collections.Counter = collections.Counter()
        for op, _shape, dtype, n in self.at_peak.values():
            c[(op.replace("aten.", "").split(".")[0], dtype)] += n
        return [(op, dt, n) for (op, dt), n in c.most_common(k)]


def _storage_keys(tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if isinstance(t, torch.Tensor)}


def measure_step(resolved: Profile, seed: int = 0) -> dict[str, Any]:
    """Bytes of one CPU training step of ``resolved`` (every sample at ``max_seq_len``):
    ``params`` (all parameters and buffers), ``optimizer`` (states), ``dynamic_peak`` (the
    largest live amount of everything else: activations, gradients, temporaries) and
    ``total``; ``top`` lists what held the most at the peak."""
    from .model import build_model

    torch.manual_seed(seed)
    model, _info = build_model(resolved)
    model.train()
    prof = resolved
    b, s = prof.train.batch_size, prof.data.max_seq_len
    ids = torch.randint(0, model.config.vocab_size, (b, s))
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-4)
    amp = prof.train.precision == "bf16"  # the Trainer's bf16=True: CPU autocast

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # optimizer states exist from here on
    states = [v for st in opt.state.values() for v in st.values() if torch.is_tensor(v)]
    static = list(model.parameters()) + list(model.buffers())
    live = LiveTensors(_storage_keys(static + states + [ids]))
    with live:
        step()
    params = sum(p.untyped_storage().nbytes() for p in {id(p): p for p in static}.values())
    optimizer = sum(v.untyped_storage().nbytes() for v in states)
    return {
        "params": params,
        "optimizer": optimizer,
        "dynamic_peak": live.peak,
        "total": params + optimizer + live.peak,
        "top": live.top(),
    }


#: a Llama small enough for a fraction of a second per step, large enough that activations
#: dominate: hidden 128, intermediate 344, 2 layers, 4 heads over 2 KV heads (GQA), 4 x 256
SMALL_ARCH = [
    "model.arch_config.hidden_size=128",
    "model.arch_config.intermediate_size=344",
    "model.arch_config.num_attention_heads=4",
    "model.arch_config.num_key_value_heads=2",
    "model.arch_config.num_hidden_layers=2",
    "data.source=synthetic",
    "batch_size=4",
    "max_seq_len=256",
]
#: a 13M-parameter Llama at batch 16 x 512 (``bench/estimate_tensors.py --big``)
BIG_ARCH = [
    "model.arch_config.hidden_size=512",
    "model.arch_config.intermediate_size=1376",
    "model.arch_config.num_attention_heads=8",
    "model.arch_config.num_key_value_heads=8",
    "model.arch_config.num_hidden_layers=4",
    "data.source=synthetic",
    "batch_size=16",
    "max_seq_len=512",
]
#: (profile, overrides) the estimator's activation model is checked on
SETTINGS: list[tuple[str, list[str]]] = [
    ("tiny-lora", []),
    ("tiny-lora", ["train.gradient_checkpointing=true"]),
    ("tiny-lora", ["train.precision=bf16"]),
    ("tiny-lora", ["model.attn_implementation=eager"]),
    ("tiny-lora", ["lora.dropout=0.0", "lora.target_modules=all-linear"]),
    ("tiny-lora", ["train.precision=bf16", "lora.dropout=0.0", "lora.target_modules=all-linear"]),
    ("tiny-full", []),
    ("tiny-full", ["train.gradient_checkpointing=true"]),
    ("tiny-full", ["train.precision=bf16", "model.attn_implementation=eager"]),
    ("tiny-lora-emb", []),
    ("tiny-qlora", []),
    ("tiny-qlora", ["train.precision=bf16", "train.gradient_checkpointing=true"]),
    ("tiny-lora-int8", []),
    ("tiny-qlora", ["quant.prepare=none", "train.precision=bf16"]),
]
#: the estimate's host components that hold the model (the process baseline excluded)
MODEL_PARTS = ("weights", "gradients", "optimizer_states", "lora", "activations")


def check_estimate(profile: str, overrides: list[str]) -> dict[str, Any]:
    """One step of ``profile`` measured (:func:`measure_step`) against the model part of its
    estimate: ``measured``, ``predicted`` (bytes), ``error`` (relative) and ``top``."""
    from fttui.core.memory import estimate
    from fttui.core.profiles import load_profile

    resolved = load_profile(profile, overrides)
    m = measure_step(resolved)
    host = estimate(resolved).host_breakdown
    predicted = sum(host[k] for k in MODEL_PARTS)
    return {
        "measured": m["total"],
        "predicted": predicted,
        "error": (predicted - m["total"]) / m["total"],
        "top": m["top"],
    }


def check_slope(profile: str, overrides: list[str], lengths: tuple[int, int] = (128, 512)) -> dict[str, Any]:
    """Bytes per token that one step's live tensors grow by between two sequence lengths
    (``measured``: the dynamic peak of :func:`measure_step`; ``predicted``: the estimate's
    activations), the relative ``error``, and ``peaks`` (the live storages at each peak, by
    operator and dtype: :meth:`LiveTensors.top`)."""
    from fttui.core.memory import estimate
    from fttui.core.profiles import load_profile

    dyn, act, tokens, peaks = [], [], [], []
    for n in lengths:
        resolved = load_profile(profile, [*overrides, f"max_seq_len={n}"])
        m = measure_step(resolved)
        dyn.append(m["dynamic_peak"])
        act.append(estimate(resolved).host_breakdown["activations"])
        tokens.append(resolved.train.batch_size * n)
        peaks.append(m["top"])
    d = tokens[1] - tokens[0]
    measured, predicted = (dyn[1] - dyn[0]) / d, (act[1] - act[0]) / d
    return {"measured": measured, "predicted": predicted, "error": (predicted - measured) / measured, "peaks": peaks}
