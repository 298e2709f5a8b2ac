"""Plain-text formatting shared by the CLI, the app and the reports (no Rich, no Textual)."""

from __future__ import annotations

import math
import os

from fttui.core.base import methods, shardings


def duration(seconds: float | None) -> str:
    """H:MM:SS above an hour, MM:SS below, as the reference tables write durations."""
    if not isinstance(seconds, (int, float)) or math.isnan(seconds):
        return ""
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def eta(seconds: float | None, source: str | None = None) -> str:
    """A run's time left: :func:`duration`, marked ``(forecast)`` while it is the launch's forecast
    rather than the measured rate; ``""`` when unknown."""
    text = duration(seconds)
    return f"{text} (forecast)" if text and source == "forecast" else text


def num(x: float | None, nd: int = 3) -> str:
    if x is None:
        return ""
    if abs(x) >= 1000:
        return f"{x:,.{max(0, nd - 2)}f}"
    return f"{x:.{nd}f}"


def mb(x: float | None) -> str:
    """Memory in MB as the tables show it, or GB above 10 GB in the live view."""
    if x is None:
        return "-"
    if x >= 10240:
        return f"{x / 1024:.1f} GB"
    return f"{x:.0f} MB"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}%"


#: method -> its label (the registry's), in the registry's order
METHOD_LABELS = {k.name.value: k.label for k in methods.KINDS.values()}

#: sharding kind -> its label (the registry's), in the registry's order
SHARDING_LABELS = {k.name: k.label for k in shardings.KINDS.values()}


def sharding_label(sharding: str | None) -> str:
    """``ZeRO-3 offload`` for ``zero3-offload``; empty for none (one process per card, DDP)."""
    if not sharding:
        return ""
    kind = shardings.find(sharding)
    return sharding if kind is None else kind.label


def method_label(method: str | None, sharding: str | None = None, *, optimizer: str | None = None) -> str:
    """A method as the tables write it, with the sharding that ran when there is one:
    ``full (ZeRO-3 offload)``, ``lora (+emb, FSDP)``, ``qlora (paged)``."""
    if method is None:
        return ""
    if method in shardings.LEGACY_METHODS:  # the stored name of full + ZeRO-3 offload before schema 5
        method, sharding = methods.Method.FULL.value, sharding or shardings.LEGACY_METHODS[method].name
    kind = methods.find(method)
    label = method if kind is None else kind.label
    if kind is not None and kind.optimizer and optimizer and optimizer.startswith("paged"):
        label = f"{kind.label} (paged)"  # qlora's paged AdamW
    extra = sharding_label(sharding)
    if not extra:
        return label
    return f"{label[:-1]}, {extra})" if label.endswith(")") else f"{label} ({extra})"


def rel_path(path: str | os.PathLike[str]) -> str:
    """A path relative to the current folder when it can be, as given otherwise."""
    try:
        return os.path.relpath(path)
    except ValueError:
        return os.fspath(path)


def fraction(used: float | None, total: float | None) -> float | None:
    if used is None or not total or total <= 0:
        return None
    return max(0.0, min(1.0, used / total))
