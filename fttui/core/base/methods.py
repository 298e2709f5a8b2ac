"""The fine-tuning methods (profile key ``method``), each declared once in :data:`KINDS`.

:class:`Method` names them, typed (a ``StrEnum``: ``Method.QLORA == "qlora"``, and a checker
catches ``Method.QLORAA``); :class:`MethodKind` is what a method is: whether LoRA adapters train
beside a frozen base, whether copies of the input embedding and the output layer train, the bits
bitsandbytes quantises the frozen base to, the default optimizer it asks for, its label in
tables and the pip extra it needs. Code asks an entry (``kind.full``, ``kind.quantised``,
``kind.trains_embeddings``) and never compares a method's name; profiles (TOML), ``profile.json``, the
results store and the start event keep the plain names. Which sharding kinds run which method:
:mod:`fttui.core.base.shardings`, whose ``methods`` are read off these entries.

Stdlib only and no fttui import: ``fttui.core.base.shardings`` (and with it
``fttui.integrations.hf_info``) loads this file by path into a Python where fttui may not be
installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Method(StrEnum):
    """A method's name, as a profile writes it."""

    FULL = "full"
    LORA = "lora"
    LORA_EMB = "lora-emb"
    QLORA = "qlora"
    LORA_INT8 = "lora-int8"

    @property
    def kind(self) -> MethodKind:
        """Its entry of :data:`KINDS`."""
        return KINDS[self]


@dataclass(frozen=True)
class MethodKind:
    """One method.

    ``adapters``: LoRA adapters train beside the frozen base (peft); without them every
    parameter trains (full fine-tuning). ``embeddings``: trainable copies of the input embedding
    and the output layer train beside the adapters (peft's ``modules_to_save``).
    ``bits``: the frozen base's linear layers are quantised by bitsandbytes to this many bits
    (4: NF4 / FP4, the ``[quant]`` settings; 8: LLM.int8()), ``None``: not quantised.
    ``optimizer``: the ``train.optimizer`` it defaults to where the sharding's optimizer steps
    plain tensors (``None``: torch's AdamW). ``label``: its name in tables (``fmt.method_label``).
    ``extra`` / ``packages``: the pip extra of fttui it needs and that extra's import names."""

    name: Method
    adapters: bool = True
    embeddings: bool = False
    bits: int | None = None
    optimizer: str | None = None
    label: str = ""
    extra: str | None = None
    packages: tuple[str, ...] = ()

    @property
    def full(self) -> bool:
        """Full fine-tuning: every parameter trains (no adapters)."""
        return not self.adapters

    @property
    def trains_embeddings(self) -> bool:
        """The input embedding and the output layer train: full fine-tuning, or the adapters'
        trainable copies of them."""
        return self.full or self.embeddings

    @property
    def quantised(self) -> bool:
        """The frozen base is quantised by bitsandbytes (a k-bit method)."""
        return self.bits is not None

    def __str__(self) -> str:
        return self.name.value


#: the pip extra of the k-bit methods, and its import names
_KBIT_EXTRA, _KBIT_PACKAGES = "qlora", ("bitsandbytes",)

#: every method, in the order the views list them; :data:`DEFAULT` is the profile's default
KINDS: dict[Method, MethodKind] = {
    k.name: k
    for k in (
        MethodKind(Method.FULL, adapters=False, label="full"),
        MethodKind(Method.LORA, label="lora"),
        MethodKind(Method.LORA_EMB, embeddings=True, label="lora (+emb)"),
        MethodKind(
            Method.QLORA,
            bits=4,
            optimizer="paged_adamw_32bit",
            label="qlora",
            extra=_KBIT_EXTRA,
            packages=_KBIT_PACKAGES,
        ),
        MethodKind(Method.LORA_INT8, bits=8, label="lora (int8)", extra=_KBIT_EXTRA, packages=_KBIT_PACKAGES),
    )
}

#: the method a profile that names none runs
DEFAULT: MethodKind = KINDS[Method.LORA]
#: every method's name, in :data:`KINDS` order (plain strings)
NAMES: tuple[str, ...] = tuple(m.value for m in KINDS)


def find(name: str | None) -> MethodKind | None:
    """The method named ``name``; ``None`` for an unknown name (or none)."""
    try:
        return KINDS[Method(name)] if name else None
    except ValueError:
        return None


def get(name: str | None) -> MethodKind:
    """The method named ``name``; KeyError for an unknown name (or none)."""
    kind = find(name)
    if kind is None:
        raise KeyError(name)
    return kind


def quantised_to(bits: int | None) -> MethodKind | None:
    """The method that trains a base quantised by bitsandbytes to ``bits`` bits (a checkpoint
    stored that way, a model loaded so); ``None`` for none."""
    return next((k for k in KINDS.values() if bits is not None and k.bits == bits), None)


__all__ = ["DEFAULT", "KINDS", "NAMES", "Method", "MethodKind", "find", "get", "quantised_to"]
