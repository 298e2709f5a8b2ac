"""Dense peak FLOP rates per card and training precision: the denominator of MFU.

Keyed by the card's name as NVML reports it (``nvmlDeviceGetName``: ``NVIDIA H100 80GB HBM3``,
``Tesla T4``, ...); a lookup ignores case, the ``NVIDIA`` / ``Tesla`` / ``GeForce`` words, spaces
and hyphens. Figures are NVIDIA's published peaks at boost clock, dense (no 2:4 sparsity: a
datasheet's starred "with sparsity" figure is halved), in TFLOPS; each entry names its source
(docs/performance.md has the table). ``fp32`` is the non-tensor FP32 rate: fttui leaves TF32 off
(PyTorch's default), so fp32 training runs its matmuls there. ``fp16`` / ``bf16`` are the tensor
core rates with FP32 accumulation (what PyTorch's half matmuls use; the GeForce cards' FP16
accumulation rate is twice that and not what training runs). ``None``: the card has no such
hardware path (bf16 before Ampere): no peak, so no MFU. An unknown card has no peak either:
never a guessed figure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from types import MappingProxyType

from fttui.core.base.errors import FttuiError

__all__ = ["Peak", "PEAKS", "peak_tflops", "find_peak", "PRECISIONS"]

PRECISIONS = ("fp32", "fp16", "bf16")


@dataclass(frozen=True)
class Peak:
    """One card: dense TFLOPS per training precision, and where the figures come from."""

    name: str  # the NVML name
    fp32: float
    fp16: float | None
    bf16: float | None
    source: str

    def tflops(self, precision: str | None) -> float | None:
        return getattr(self, precision) if precision in PRECISIONS else None


_H100 = "NVIDIA H100 Tensor Core GPU datasheet (sparsity figures halved)"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (sparsity figures halved)"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet"
_V100 = "NVIDIA V100 Tensor Core GPU datasheet"

_TABLE = (
    Peak("NVIDIA H100 80GB HBM3", 67.0, 989.4, 989.4, _H100 + ", SXM5"),
    Peak("NVIDIA H100 PCIe", 51.0, 756.0, 756.0, _H100 + ", PCIe"),
    Peak("NVIDIA H100 NVL", 60.0, 835.5, 835.5, _H100 + ", NVL"),
    Peak("NVIDIA H200", 67.0, 989.4, 989.4, _H200 + ", SXM"),
    Peak("NVIDIA H200 NVL", 60.0, 835.5, 835.5, _H200 + ", NVL"),
    Peak("NVIDIA A100-SXM4-40GB", 19.5, 312.0, 312.0, _A100),
    Peak("NVIDIA A100-SXM4-80GB", 19.5, 312.0, 312.0, _A100),
    Peak("NVIDIA A100-PCIE-40GB", 19.5, 312.0, 312.0, _A100),
    Peak("NVIDIA A100 80GB PCIe", 19.5, 312.0, 312.0, _A100),
    Peak("NVIDIA A10", 31.2, 125.0, 125.0, "NVIDIA A10 Tensor Core GPU datasheet (sparsity figures halved)"),
    Peak("NVIDIA A40", 37.4, 149.7, 149.7, "NVIDIA A40 datasheet (sparsity figures halved)"),
    Peak("NVIDIA L4", 30.3, 121.0, 121.0, "NVIDIA L4 Tensor Core GPU datasheet (sparsity figures halved)"),
    Peak("NVIDIA L40", 90.5, 181.05, 181.05, "NVIDIA L40 datasheet (sparsity figures halved)"),
    Peak("NVIDIA L40S", 91.6, 362.05, 362.05, "NVIDIA L40S datasheet (sparsity figures halved)"),
    Peak("NVIDIA RTX A6000", 38.7, 154.8, 154.8, "NVIDIA RTX A6000 datasheet (sparsity figures halved)"),
    Peak(
        "NVIDIA GeForce RTX 4090",
        82.6,
        165.2,
        165.2,
        "NVIDIA Ada GPU architecture whitepaper, appendix A (FP16/BF16 tensor, FP32 accumulate, dense)",
    ),
    Peak(
        "NVIDIA GeForce RTX 3090",
        35.6,
        71.0,
        71.0,
        "NVIDIA Ampere GA102 GPU architecture whitepaper, appendix A (FP16/BF16 tensor, FP32 accumulate, dense)",
    ),
    Peak("Tesla V100-SXM2-16GB", 15.7, 125.0, None, _V100 + ", SXM2"),
    Peak("Tesla V100-SXM2-32GB", 15.7, 125.0, None, _V100 + ", SXM2"),
    Peak("Tesla V100-PCIE-16GB", 14.0, 112.0, None, _V100 + ", PCIe"),
    Peak("Tesla V100-PCIE-32GB", 14.0, 112.0, None, _V100 + ", PCIe"),
    Peak("Tesla T4", 8.1, 65.0, None, "NVIDIA T4 Tensor Core GPU datasheet (FP16 mixed precision)"),
)


def _key(name: str) -> str:
    s = name.lower()
    s = re.sub(r"\b(nvidia|tesla|geforce)\b", " ", s)
    return re.sub(r"[\s_-]+", "", s)


#: The table, by NVML name.
PEAKS = MappingProxyType({p.name: p for p in _TABLE})
_BY_KEY = MappingProxyType({_key(p.name): p for p in _TABLE})


def find_peak(name: str | None) -> Peak | None:
    """The table's entry for a card named ``name`` (NVML's name), or ``None``."""
    if not isinstance(name, str) or not name.strip():
        return None
    return PEAKS.get(name) or _BY_KEY.get(_key(name))


def cards_matching(name: str) -> list[str]:
    """The table's cards (NVML names) whose name holds ``name`` as a user shortens it (``H100``,
    ``4090``, ``a100 80gb``; case, spaces, hyphens and the vendor words do not matter); the one
    card when ``name`` is a full name."""
    exact = find_peak(name)
    if exact is not None:
        return [exact.name]
    key = _key(name)
    return [p.name for p in _TABLE if key and key in _key(p.name)]


def card_named(name: str, flag: str = "--card", stored: Iterable[str] = ()) -> str:
    """The card a user names (``--card``): the table's full name when ``name`` is one or is
    short for exactly one (``4090``, ``h100 pcie``) or for several of one peak rate (``A100``: its
    SXM and PCIe cards, the first in the table); FttuiError in one line when it is short for
    several of different rates (``H100``: three, 756 to 989 bf16 TFLOPS: a forecast would pick one
    silently). A name the table does not hold is a card of ``stored`` (the cards of
    the store's rows, by the same lookup: timed from those rows only), else FttuiError in one line
    listing the cards fttui knows (it was timed at no rate, or a CPU's)."""
    known = cards_matching(name)
    rates = {tuple(PEAKS[n].tflops(p) for p in PRECISIONS) for n in known if n in PEAKS}
    if len(known) > 1 and len(rates) == 1:  # A100: its variants train at one peak rate
        return known[0]
    if len(known) > 1:
        shown = ", ".join(short_name(n) for n in known)
        raise FttuiError(
            f"{flag} {name}: {len(known)} cards fttui knows match it ({shown}) at different peak rates; name one"
        )
    if known:
        return known[0]
    rows = sorted({str(c) for c in stored if isinstance(c, str) and c.strip() and c != "cpu"})
    of_rows = [c for c in rows if _key(c) == _key(name)]
    if of_rows:
        return of_rows[0]
    listed = ", ".join(short_name(n) for n in PEAKS)
    ran = f"; cards of stored rows: {', '.join(rows)}" if rows else ""
    raise FttuiError(f"{flag} {name}: fttui knows no card of that name (the peak rates it knows: {listed}{ran})")


def short_name(name: str) -> str:
    """A card's name without the vendor words (``H100 80GB HBM3``, ``RTX 4090``, ``T4``)."""
    return name.removeprefix("NVIDIA ").removeprefix("GeForce ").removeprefix("Tesla ")


def peak_tflops(name: str | None, precision: str | None) -> float | None:
    """Dense peak TFLOPS of card ``name`` at training ``precision`` (``fp32``, ``fp16``,
    ``bf16``); ``None`` for an unknown card or precision, or a precision the card has no hardware
    path for."""
    p = find_peak(name)
    return None if p is None else p.tflops(precision)
