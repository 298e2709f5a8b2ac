"""Price tables: what one card of each GPU costs, for throughput per price unit.

Owns :class:`Prices` (name matching: exact, else the longest price name inside the GPU name,
else a price name containing it) and :func:`load_prices` (TOML or CSV files, with an optional
unit). Errors are one-line :class:`fttui.core.base.errors.FttuiError`.
"""

from __future__ import annotations

import csv
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fttui.core.base.errors import FttuiError
from fttui.core.results.rows import gpu_name, num

__all__ = ["Prices", "load_prices", "price_value"]


@dataclass
class Prices:
    """GPU name -> price of one card (any unit the user chooses; ``unit`` labels it)."""

    table: dict[str, float]
    unit: str = ""
    source: str = ""

    def price_of(self, gpu: str | None) -> float | None:
        """Price of one card: exact name, else the longest price name contained in ``gpu``, else
        a price name that contains ``gpu``; case-insensitive, spaces collapsed. None: no price."""
        if not gpu:
            return None
        g = " ".join(str(gpu).casefold().split())
        norm = {" ".join(k.casefold().split()): v for k, v in self.table.items()}
        if g in norm:
            return norm[g]
        inside = [k for k in norm if k and k in g]
        if inside:
            return norm[max(inside, key=len)]
        around = [k for k in norm if g in k]
        if around and g != "cpu":
            return norm[min(around, key=len)]
        return None

    def row_price(self, row: Mapping) -> float | None:
        """The price of the row's cards: per-card price x num_gpus (1 for CPU rows)."""
        p = self.price_of(gpu_name(row))
        if p is None:
            return None
        return p * max(1, int(row.get("num_gpus") or 0))


def price_value(file: str, key: str, v: Any) -> float:
    x = num(v) if not isinstance(v, str) else num(v.replace(",", ""))
    if x is None or x <= 0:
        raise FttuiError(f"{file}: {key}: price must be a positive number, got {v!r}")
    return x


def load_prices(path: str | Path) -> Prices:
    """A price table: TOML (``"RTX 4090" = 1.6`` lines, optionally under ``[prices]``, and an
    optional ``unit = "..."``) or CSV (columns ``gpu`` and ``price``, optional ``unit``; without a
    header, the first two columns)."""
    p = Path(path)
    if not p.is_file():
        raise FttuiError(f"{p}: price table not found")
    table: dict[str, float] = {}
    unit = ""
    if p.suffix.lower() == ".toml":
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise FttuiError(f"{p}: not valid TOML: {e}") from None
        unit = str(data.pop("unit", "") or "")
        section = data.pop("prices", None)
        if isinstance(section, dict):
            unit = str(section.pop("unit", unit) or unit)
            data.update(section)
        for k, v in data.items():
            if isinstance(v, dict):
                raise FttuiError(f'{p}: [{k}]: unexpected table (write "GPU name" = price lines)')
            table[k] = price_value(str(p), k, v)
    elif p.suffix.lower() == ".csv":
        with open(p, newline="", encoding="utf-8") as f:
            lines = [r for r in csv.reader(f) if r and any(c.strip() for c in r)]
        if not lines:
            raise FttuiError(f"{p}: empty price table")
        head = [c.strip().casefold() for c in lines[0]]
        gi, pi, ui = 0, 1, None
        if len(head) < 2 or num(head[1].replace(",", "")) is None:
            lines = lines[1:]
            gi = next((i for i, h in enumerate(head) if h in ("gpu", "name", "gpu_name", "card")), 0)
            pi = next((i for i, h in enumerate(head) if h.startswith("price")), 1)
            ui = next((i for i, h in enumerate(head) if h in ("unit", "currency")), None)
        for n, r in enumerate(lines, start=2 if ui is not None or gi or pi != 1 else 1):
            if len(r) <= max(gi, pi):
                raise FttuiError(f"{p}: line {n}: expected GPU,PRICE")
            table[r[gi].strip()] = price_value(str(p), r[gi].strip(), r[pi].strip())
            if ui is not None and len(r) > ui and r[ui].strip():
                unit = r[ui].strip()
    else:
        raise FttuiError(f"{p}: a price table must be a .toml or .csv file")
    if not table:
        raise FttuiError(f"{p}: no prices in the file")
    return Prices(table, unit, str(p))
