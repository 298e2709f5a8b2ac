"""Plain-text formatting shared by the CLI, the app and the reports (no Rich, no Textual)."""

from __future__ import annotations

import math
import os


def duration(seconds: float | None) -> str:
    """H:MM:SS above an hour, MM:SS below, as the reference tables write durations."""
    if not isinstance(seconds, (int, float)) or math.isnan(seconds):
        return ""
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


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


METHOD_LABELS = {
    "full": "full",
    "full-zero3-offload": "full (ZeRO-3 offload)",
    "lora": "lora",
    "lora-emb": "lora (+emb)",
    "qlora": "qlora",
    "lora-int8": "lora (int8)",
}


def method_label(method: str | None, optimizer: str | None = None, precision: str | None = None) -> str:
    if method is None:
        return ""
    label = METHOD_LABELS.get(method, method)
    if method == "qlora" and optimizer and optimizer.startswith("paged"):
        label = "qlora (paged)"
    return label


def rel_path(path: str) -> str:
    """A path relative to the current folder when it can be, as given otherwise."""
    try:
        return os.path.relpath(path)
    except ValueError:
        return path


def fraction(used: float | None, total: float | None) -> float | None:
    if used is None or not total or total <= 0:
        return None
    return max(0.0, min(1.0, used / total))
