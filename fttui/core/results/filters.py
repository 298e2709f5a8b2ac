"""``--where KEY=VALUE``: the row filter of `fttui report` (and of anything that takes --where).

Owns :func:`parse_where` (the filters, checked against the store's columns with a did-you-mean
hint) and :func:`filter_rows` (numbers compare as numbers, text without regard to case, ``KEY=``
matches an empty cell). Pure.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fttui.core.base.errors import FttuiError
from fttui.core.results.rows import num
from fttui.core.results.store import COLUMNS

__all__ = ["filter_rows", "parse_where"]


def _coerce(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "yes", "on"):
        return 1
    if low in ("false", "no", "off"):
        return 0
    try:
        return float(text)
    except ValueError:
        return None


def _matches(value: Any, want: str) -> bool:
    if want == "":
        return value is None or value == "" or value == []
    if value is None:
        return False
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True) == want or any(
            str(v) == want for v in (value if isinstance(value, list) else [])
        )
    num_want = _coerce(want)
    if num_want is not None and (isinstance(value, (int, float))):
        return float(value) == num_want
    if num_want is not None and num(value) is not None:
        return num(value) == num_want
    return str(value).casefold() == want.casefold()


def parse_where(where: Iterable[str], columns: Iterable[str] | None = None) -> dict[str, list[str]]:
    """``["gpu=RTX 4090", "batch_size=2"]`` -> ``{"gpu": ["RTX 4090"], "batch_size": ["2"]}``."""
    known = set(COLUMNS) | set(columns or ())
    out: dict[str, list[str]] = {}
    for spec in where or ():
        key, sep, value = spec.partition("=")
        key = key.strip()
        if not sep or not key:
            raise FttuiError(f"--where {spec!r}: expected KEY=VALUE, e.g. method=lora")
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else " (see `fttui results --format json` for the columns)"
            raise FttuiError(f"--where {spec!r}: unknown column {key!r}{hint}")
        out.setdefault(key, []).append(value.strip())
    return out


def filter_rows(rows: Sequence[Mapping], where: Iterable[str] | None) -> list[dict]:
    """Rows whose columns equal the ``KEY=VALUE`` filters: numbers compare as numbers, text
    without regard to case, ``KEY=`` matches an empty cell. Different keys must all match; a key
    given twice matches either value. An unknown column is a one-line :class:`FttuiError`."""
    table = [dict(r) for r in rows]
    conds = parse_where(where or (), {k for r in table for k in r})
    return [r for r in table if all(any(_matches(r.get(k), v) for v in vals) for k, vals in conds.items())]
