"""Sizes and byte counts: the one grammar of a size string, and how bytes are shown."""

from __future__ import annotations

import re
from fractions import Fraction

from fttui.core.base.errors import SizeError, did_you_mean

MIB = 1 << 20
GIB = 1 << 30

_UNITS = {
    "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip
_UNIT_NAMES = ("B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")
_SIZE_HINT = "write a number and a unit, e.g. '24GiB', '512MiB' or '8GB'"


def parse_size(value: str | int) -> int:
    """Bytes in a size: ``"24GiB"``, ``"512 MiB"``, ``"8GB"``, ``"1.5GiB"``, ``"1024"``, ``1024``.

    Units: B; KB/MB/GB/TB (powers of 10); KiB/MiB/GiB/TiB (powers of 2); case-insensitive.
    Raises :class:`SizeError` (a ValueError) with a hint otherwise.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SizeError(f"invalid size {value!r}", _SIZE_HINT)
    if isinstance(value, int):
        if value < 0:
            raise SizeError(f"invalid size {value}: negative", _SIZE_HINT)
        return _bounded(value, str(value))
    text = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)", text)
    if not match:
        raise SizeError(f"invalid size '{value}'", _SIZE_HINT)
    number, unit = match.group(1), match.group(2)
    factor = _UNITS.get(unit.lower() or "b")
    if factor is None:
        letter = unit[:1].upper()
        if unit.lower() in ("k", "m", "g", "t"):
            hint = f"did you mean '{number}{letter}iB' (binary) or '{number}{letter}B' (decimal)?"
        else:
            hint = did_you_mean(unit, _UNIT_NAMES) or f"units: {', '.join(_UNIT_NAMES)}"
        raise SizeError(f"invalid size '{value}': unknown unit '{unit}'", hint)
    return _bounded(int(Fraction(number) * factor), text)


#: the largest size taken: 1 EiB, beyond any machine's memory (a float of more overflowed later)
MAX_SIZE = 1 << 60


def _bounded(n: int, text: str) -> int:
    if n > MAX_SIZE:
        raise SizeError(f"invalid size '{text}': more than 1 EiB", _SIZE_HINT)
    return n


def fmt_bytes(n: float) -> str:
    """``12.3 GiB`` / ``456 MiB``."""
    if abs(n) >= GIB:
        return f"{n / GIB:.2f} GiB"
    return f"{n / MIB:.0f} MiB"


__all__ = ["MIB", "GIB", "SizeError", "parse_size", "fmt_bytes"]
