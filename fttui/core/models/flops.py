"""Model FLOPs per trained token, for full and adapter fine-tuning (docs/performance.md).

Counted per token, in multiply-adds x 2, for a decoder-only transformer:

* ``N``: the parameters used in a matrix multiply per token: every parameter except the input
  embedding table (a lookup, no multiply). The output layer counts, tied to the embedding or not
  (its multiply runs either way: ``vocab x hidden`` weights). Norm weights and biases are in it
  too (a rounding error). Adapters and ``lora-emb``'s trainable copies are in it as they run.
  A mixture of experts: a token runs through ``top_k`` of a sparse layer's ``experts`` routed
  experts, so the others' weights (``(experts - top_k) x 3 x hidden x expert_inter`` per sparse
  layer: gate, up and down) are left out of ``N`` and ``N_trained``; the router
  (``hidden x experts``) and a shared expert run for every token and stay in.
* forward: ``2 N`` plus the attention scores and their weighted sum,
  ``4 L a s`` (``L`` layers, ``a`` = heads x head size, ``s`` tokens in the sequence). The full
  ``s x s`` score matrix is counted, as PaLM's and Megatron-LM's MFU do (a causal kernel that
  skips the masked half still gets credit for it), so figures compare with published ones.
* backward: the activation gradients of every matmul, ``2 N``, plus the weight gradients of the
  trained ones only, ``2 N_trained``, plus the attention's ``8 L a s``.
* full fine-tuning: ``6 N + 12 L a s``; adapters (LoRA, QLoRA, int8): a frozen base gets no weight
  gradient, ``4 N_base + 6 N_adapter + 12 L a s``.
* gradient checkpointing: the decoder layers' forward once more, ``2 (N - N_head) + 4 L a s``
  (transformers checkpoints each decoder layer; the output layer is not recomputed). With it the
  figure counts work the hardware repeats (PaLM calls that hardware FLOPs; see the docs).

Pure Python: the numbers come from the worker's ``start`` event (``params_total``,
``params_trainable``, ``model_shape``: with ``experts``, ``top_k``, ``expert_inter`` and
``sparse_layers`` for a mixture of experts) or from :mod:`fttui.core.models.numbers`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fttui.core.base import shardings

__all__ = ["ModelShape", "MatmulParams", "FlopsPerToken", "matmul_params", "flops_per_token", "shape_from"]


@dataclass(frozen=True)
class ModelShape:
    """What the FLOPs of a training step need to know of the model.

    ``params_total`` / ``params_trainable``: the real counts of the model as trained (adapters and
    ``lora-emb``'s copies included; the worker's ``start`` event). ``attn_dim``: heads x head size
    (the width of the score and weighted-sum multiplies; grouped-query K/V heads do not change it).
    A mixture of experts: ``experts`` routed experts per sparse layer, ``top_k`` of them per token,
    each a gated MLP of width ``expert_inter``, in ``sparse_layers`` of the layers (0: dense)."""

    params_total: int
    params_trainable: int
    vocab: int
    hidden: int
    layers: int
    attn_dim: int
    tied: bool
    experts: int = 0
    top_k: int = 0
    expert_inter: int = 0
    sparse_layers: int = 0

    @property
    def embedding(self) -> int:
        """The input embedding table (= the output layer's weights): ``vocab x hidden``."""
        return self.vocab * self.hidden

    @property
    def idle_experts(self) -> int:
        """The weights of the routed experts a token does not go through, over the sparse layers:
        ``sparse_layers x (experts - top_k) x 3 x hidden x expert_inter`` (0: a dense model, or
        MoE numbers that do not fit together)."""
        if self.sparse_layers <= 0 or self.expert_inter <= 0 or not 0 < self.top_k <= self.experts:
            return 0
        return self.sparse_layers * (self.experts - self.top_k) * 3 * self.hidden * self.expert_inter


@dataclass(frozen=True)
class MatmulParams:
    """``n``: the parameters in a multiply per token (``N``); ``trained``: those of them that get a
    weight gradient; ``head``: the output layer's."""

    n: int
    trained: int
    head: int


def matmul_params(shape: ModelShape, method: str) -> MatmulParams:
    """``N`` and ``N_trained`` of a method. Full methods: everything but the input embedding
    (an untied output layer is its own matrix; a tied one is the embedding, counted once in
    ``params_total`` and run as the output multiply). Adapter methods: the frozen base (total minus
    trainable) without its input embedding, plus the adapters. ``lora-emb`` trains copies of the
    input embedding (a lookup: no multiply) and of the output layer (whose multiply replaces the
    frozen one's). A mixture of experts leaves out the experts a token is not routed to
    (:attr:`ModelShape.idle_experts`): of the model under full methods, of the frozen base under
    adapters (the experts are frozen there)."""
    e = shape.embedding
    idle = shape.idle_experts
    kind = shardings.method_of(method)
    if kind is not None and kind.full:
        n = shape.params_total - (0 if shape.tied else e) - idle
        return MatmulParams(n, n, e)
    frozen = shape.params_total - shape.params_trainable - idle
    trained = shape.params_trainable
    if kind is not None and kind.embeddings:
        if shape.tied:  # one shared trainable copy: the lookup and the output multiply
            frozen -= e
        else:
            frozen -= 2 * e
            trained -= e
    else:
        frozen -= 0 if shape.tied else e
    return MatmulParams(max(0, frozen) + max(0, trained), max(0, trained), e)


@dataclass(frozen=True)
class FlopsPerToken:
    """FLOPs per trained token, by part (their sum is ``total``)."""

    forward: float
    backward: float
    recompute: float
    seq_len: float

    @property
    def total(self) -> float:
        return self.forward + self.backward + self.recompute

    def to_dict(self) -> dict[str, float]:
        return {
            "forward": self.forward,
            "backward": self.backward,
            "recompute": self.recompute,
            "seq_len": self.seq_len,
            "total": self.total,
        }


def flops_per_token(
    shape: ModelShape, method: str, seq_len: float, gradient_checkpointing: bool = False
) -> FlopsPerToken:
    """The model FLOPs of training on one token of a sequence of ``seq_len`` tokens (module doc)."""
    p = matmul_params(shape, method)
    attn = 4.0 * shape.layers * shape.attn_dim * seq_len  # one forward of scores + weighted sum
    forward = 2.0 * p.n + attn
    backward = 2.0 * p.n + 2.0 * p.trained + 2.0 * attn
    recompute = 2.0 * max(0, p.n - p.head) + attn if gradient_checkpointing else 0.0
    return FlopsPerToken(forward, backward, recompute, float(seq_len))


def _int(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        return None
    return int(v)


def shape_from(params_total: Any, params_trainable: Any, numbers: Mapping[str, Any] | None) -> ModelShape | None:
    """A :class:`ModelShape` from the parameter counts and the architecture numbers (``vocab``,
    ``hidden``, ``layers``, ``attn_dim``, ``tied``: the worker's ``model_shape``, or the keys of
    :class:`fttui.core.models.numbers.ArchNumbers` ``vocab``, ``hidden``, ``layers``, ``q_dim``);
    ``None`` when one is missing. The mixture-of-experts numbers (``experts``, ``top_k``,
    ``expert_inter``, ``sparse_layers``) are optional: a ``model_shape`` without them (a dense
    model, or an event of an older fttui) is counted as dense."""
    if not isinstance(numbers, Mapping):
        return None
    total, trainable = _int(params_total), _int(params_trainable)
    vocab, hidden, layers = _int(numbers.get("vocab")), _int(numbers.get("hidden")), _int(numbers.get("layers"))
    attn = _int(numbers.get("attn_dim") if numbers.get("attn_dim") is not None else numbers.get("q_dim"))
    if total is None or trainable is None or vocab is None or hidden is None or layers is None or attn is None:
        return None
    if total <= 0:
        return None
    moe = [max(0, _int(numbers.get(k)) or 0) for k in ("experts", "top_k", "expert_inter", "sparse_layers")]
    return ModelShape(total, trainable, vocab, hidden, layers, attn, bool(numbers.get("tied")), *moe)
