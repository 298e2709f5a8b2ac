"""The sharding kinds: how a run's model, gradients and optimizer states are spread over ranks
(profile key ``sharding``, orthogonal to ``method``), each declared once in :data:`KINDS`.

Everything else about a kind is read off its entry: its family (one process per card / DDP,
DeepSpeed ZeRO, PyTorch FSDP), its ZeRO stage, whether it offloads to the host, whether it needs
CUDA, the launchers that run it, the methods it runs, its label in tables, the pip extra it
needs, and the method name that meant it before ``sharding`` was a key of its own
(``full-zero3-offload``). Adding a kind: an entry here, the worker's config for it
(``fttui.worker.sharding``) and, when its memory is not one of an existing family's, the memory
model's term (``fttui.core.memory.sharding``); docs/architecture.md, "Sharding kinds".

Stdlib only; its one fttui import is the method registry (``fttui.core.base.methods``, stdlib
only too): ``fttui.integrations.hf_info`` loads this file by path into a Python where fttui may not
be installed, and this file then loads the registry beside it by path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict, overload

try:
    from fttui.core.base import methods as _methods
except ImportError:  # loaded by path where fttui is not installed: the method registry by path too
    import importlib.util as _util
    import os as _os
    import sys as _sys

    _spec = _util.spec_from_file_location(
        "_fttui_methods", _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "methods.py")
    )
    if _spec is None or _spec.loader is None:
        raise ImportError("fttui's method registry (methods.py) is not beside shardings.py") from None
    _methods = _util.module_from_spec(_spec)
    _sys.modules[_spec.name] = _methods
    _spec.loader.exec_module(_methods)

Method = _methods.Method
MethodKind = _methods.MethodKind

#: families: one process per card (DDP when several), DeepSpeed ZeRO, PyTorch FSDP
DDP, DEEPSPEED, FSDP = "ddp", "deepspeed", "fsdp"

# The methods each kind runs (docs/launchers.md, "Which method with which sharding"), read off
# the method registry. ZeRO-2 partitions only what trains (gradients, optimizer states), so the
# frozen, quantised base of the k-bit methods is left as it is. ZeRO-3 and FSDP shard the
# parameters themselves: the libraries do that for 4-bit weights when they are stored in a float
# dtype (bnb_4bit_quant_storage, which the worker sets to the compute dtype;
# fttui.worker.model_config), so the 4-bit method runs there (not with ZeRO-3's parameter
# offload); 8-bit weights cannot be sharded.
_EVERY_METHOD: tuple[Method, ...] = tuple(_methods.KINDS)
_UNQUANTISED: tuple[Method, ...] = tuple(m for m, k in _methods.KINDS.items() if not k.quantised)
_FOUR_BIT: tuple[Method, ...] = tuple(m for m, k in _methods.KINDS.items() if k.bits in (None, 4))


@dataclass(frozen=True)
class Sharding:
    """One sharding kind.

    ``stage``: the ZeRO stage (DeepSpeed), 0 for the others. ``offload``: states go to the host
    (DeepSpeed: the optimizer states, for stage 3 the parameters too, as ``[deepspeed]`` says;
    FSDP: parameters, gradients and optimizer states). ``launchers``: the launchers that run it,
    the first being what ``devices.launcher = "auto"`` picks (empty: any, by process count).
    ``methods``: the methods it runs. ``label``: its name in tables (``fmt.method_label``).
    ``extra`` / ``packages``: the pip extra of fttui it needs and that extra's import names.
    ``legacy_method``: a method name that meant ``full`` under this kind before schema 5."""

    name: str
    family: str
    stage: int = 0
    offload: bool = False
    needs_cuda: bool = False
    launchers: tuple[str, ...] = ()
    methods: tuple[Method, ...] = _EVERY_METHOD
    label: str = ""
    extra: str | None = None
    packages: tuple[str, ...] = ()
    legacy_method: str | None = None

    @property
    def sharded(self) -> bool:
        """States are spread over the ranks (any kind but one process per card)."""
        return self.family != DDP

    @property
    def deepspeed(self) -> bool:
        return self.family == DEEPSPEED

    @property
    def fsdp(self) -> bool:
        return self.family == FSDP

    @property
    def steps_plain_tensors(self) -> bool:
        """The optimizer steps plain tensors. FSDP2 hands it its shards as DTensors, which
        bitsandbytes' optimizers (``paged_adamw_32bit``, ``adamw_bnb_8bit``...) cannot step: their
        update op has no DTensor sharding rule (NotImplementedError at the first step, seen on an
        H100 and on CPU ranks). DeepSpeed steps flat plain tensors."""
        return self.family != FSDP

    @property
    def zero3(self) -> bool:
        """DeepSpeed ZeRO stage 3 (parameters partitioned), with or without offload."""
        return self.family == DEEPSPEED and self.stage == 3

    def without_offload(self) -> Sharding:
        """The same family and stage on the card (the hint when offloading is not possible)."""
        return next(
            (k for k in KINDS.values() if k.family == self.family and k.stage == self.stage and not k.offload), self
        )

    def __str__(self) -> str:
        return self.name


class _ZeroFields(TypedDict):
    """The fields the DeepSpeed ZeRO kinds share (``Sharding(..., **_ZERO)``), typed as
    :class:`Sharding`'s; their methods differ by stage, so each kind gives its own."""

    family: str
    launchers: tuple[str, ...]
    extra: str | None
    packages: tuple[str, ...]


class _FsdpFields(TypedDict):
    """The fields the FSDP kinds share (``Sharding(..., **_FSDP)``), typed as :class:`Sharding`'s."""

    family: str
    launchers: tuple[str, ...]
    methods: tuple[Method, ...]


_ZERO: _ZeroFields = {
    "family": DEEPSPEED,
    "launchers": ("deepspeed", "torchrun"),
    "extra": "zero3",
    "packages": ("deepspeed",),
}
_FSDP: _FsdpFields = {"family": FSDP, "launchers": ("torchrun", "accelerate"), "methods": _FOUR_BIT}

#: every kind, in the order the views list them; the first is the default (no sharding)
KINDS: dict[str, Sharding] = {
    k.name: k
    for k in (
        Sharding("none", DDP),
        Sharding("zero2", stage=2, label="ZeRO-2", **_ZERO),
        Sharding("zero2-offload", stage=2, offload=True, label="ZeRO-2 offload", **_ZERO),
        Sharding("zero3", stage=3, methods=_FOUR_BIT, label="ZeRO-3", **_ZERO),
        Sharding(
            "zero3-offload",
            stage=3,
            offload=True,
            methods=_UNQUANTISED,
            label="ZeRO-3 offload",
            legacy_method="full-zero3-offload",
            **_ZERO,
        ),
        Sharding("fsdp", label="FSDP", **_FSDP),
        Sharding("fsdp-offload", offload=True, needs_cuda=True, label="FSDP offload", **_FSDP),
    )
}

#: the kind of a run that shards nothing (the profile's default)
NONE: Sharding = next(iter(KINDS.values()))
#: every kind's name, in :data:`KINDS` order (the schema's choices)
NAMES: tuple[str, ...] = tuple(KINDS)
#: legacy method name -> the kind it meant (its method is ``full``)
LEGACY_METHODS: dict[str, Sharding] = {k.legacy_method: k for k in KINDS.values() if k.legacy_method}
#: the old name of the ``[deepspeed]`` table (profiles and ``profile.json`` written before sharding)
LEGACY_SECTION = "zero3"


def get(name: str | None) -> Sharding:
    """The kind named ``name`` (``None`` or ``""``: no sharding); KeyError for an unknown one."""
    return KINDS[name] if name else NONE


def find(name: str | None) -> Sharding | None:
    """The kind named ``name``, ``None`` for an unknown one (``None`` / ``""``: no sharding)."""
    return KINDS.get(name) if name else NONE


def names(family: str | None = None) -> tuple[str, ...]:
    """The kinds' names, those of one family when ``family`` is given."""
    return tuple(k.name for k in KINDS.values() if family is None or k.family == family)


@overload
def of(method: str, sharding: str | None) -> tuple[str, str]: ...
@overload
def of(method: str | None, sharding: str | None) -> tuple[str | None, str]: ...
def of(method: str | None, sharding: str | None) -> tuple[str | None, str]:
    """(method, sharding) with a legacy method normalised: ``full-zero3-offload`` is ``full``
    under ``zero3-offload`` (a sharding given as well, other than none, is kept); ``sharding``
    missing (a ``profile.json`` or row written before it) is none."""
    legacy = LEGACY_METHODS.get(method or "")
    if legacy is not None:
        return Method.FULL.value, sharding if sharding and sharding != NONE.name else legacy.name
    return method, sharding or NONE.name


def method_of(name: str | None) -> MethodKind | None:
    """The method registry's entry of a method name, a legacy one (``full-zero3-offload``) read
    as its method (``full``); ``None`` for an unknown name (or none)."""
    return _methods.find(of(name, None)[0])


def asked(profile: object) -> Sharding | None:
    """The kind a resolved profile (a mapping, or anything with ``method`` and ``sharding``
    attributes) asks for, its legacy method read as its kind; ``None`` for an unknown name."""
    get_ = profile.get if isinstance(profile, Mapping) else (lambda k: getattr(profile, k, None))
    return find(of(get_("method"), get_("sharding"))[1])


def from_engine(family: str, stage: int = 0, offload: bool = False) -> Sharding | None:
    """The kind a read-back engine or wrapper is running (DeepSpeed's ZeRO stage and offload, an
    FSDP wrapper and its offload policy); ``None`` when no kind matches it."""
    if family == DDP:
        return NONE
    return next(
        (
            k
            for k in KINDS.values()
            if k.family == family and k.offload == bool(offload) and (family != DEEPSPEED or k.stage == stage)
        ),
        None,
    )


#: optimizer names (transformers' ``optim``) that are bitsandbytes' own
BNB_OPTIMIZER_MARKS = ("bnb", "8bit", "paged")


def bnb_optimizer(optimizer: str | None) -> bool:
    """``optimizer`` is one of bitsandbytes' (``paged_adamw_32bit``, ``adamw_bnb_8bit``...)."""
    return any(m in (optimizer or "") for m in BNB_OPTIMIZER_MARKS)


def runs_with(method: str) -> tuple[str, ...]:
    """The kinds that run ``method``."""
    return tuple(k.name for k in KINDS.values() if method in k.methods)


__all__ = [
    "BNB_OPTIMIZER_MARKS",
    "DDP",
    "DEEPSPEED",
    "FSDP",
    "KINDS",
    "LEGACY_METHODS",
    "LEGACY_SECTION",
    "Method",
    "MethodKind",
    "NAMES",
    "NONE",
    "Sharding",
    "asked",
    "bnb_optimizer",
    "find",
    "from_engine",
    "get",
    "method_of",
    "names",
    "of",
    "runs_with",
]
