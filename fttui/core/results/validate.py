"""Every value a row holds checked against its declared figure (:data:`fttui.core.results.columns.FIGURES`):
an imported row is refused in one line naming the row and the field (issue 28); a row the
supervisor received from events is stored with a mistyped value made harmless, never lost.

Text, in a text column or anywhere inside a JSON one, holds no character a terminal would obey
(ESC, BEL, carriage return, direction overrides: :mod:`fttui.core.base.inert`): an imported row
that carries one is refused; a received row is stored with each written as its escape (issue 36)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from fttui.core.base import bounded
from fttui.core.base.inert import control_chars, inert
from fttui.core.results.columns import BY_NAME

#: SQLite's integers are 64-bit.
MAX_INT = 2**63 - 1


def _strings(value: Any) -> list[str]:
    """Every string in a JSON value, keys included (the tree is already bounded)."""
    out, todo = [], [value]
    while todo:
        node = todo.pop()
        if isinstance(node, str):
            out.append(node)
        elif isinstance(node, dict):
            todo.extend(node.keys())
            todo.extend(node.values())
        elif isinstance(node, (list, tuple)):
            todo.extend(node)
    return out


def _controls(value: Any) -> str | None:
    found = [c for s in _strings(value) for c in control_chars(s)]
    if not found:
        return None
    return (
        f"carries control characters ({', '.join(dict.fromkeys(found))}) that a terminal would obey; "
        "remove them from the export"
    )


def _inert_tree(value: Any) -> Any:
    if isinstance(value, str):
        return inert(value, lines=True)
    if isinstance(value, dict):
        return {inert(k, lines=True) if isinstance(k, str) else k: _inert_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_inert_tree(v) for v in value]
    return value


def check_value(name: str, value: Any) -> tuple[Any, str | None]:
    """``(value as stored, None)`` or ``(None, what is wrong)`` for one column."""
    fig = BY_NAME.get(name)
    if fig is None or value is None:
        return value, None
    if fig.json:
        try:
            bounded.check_tree(value, max_nodes=100_000)
        except ValueError as e:
            return None, str(e)
        bad = _controls(value)
        return (None, bad) if bad else (value, None)
    kind = fig.sql.split()[0]
    if kind == "INTEGER":
        if isinstance(value, bool):
            return int(value), None
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if not isinstance(value, int):
            return None, f"expected an integer, got {json.dumps(value, default=str)[:40]}"
        if abs(value) > MAX_INT:
            return None, f"integer {str(value)[:24]}... out of range"
        return value, None
    if kind == "REAL":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None, f"expected a number, got {json.dumps(value, default=str)[:40]}"
        try:
            finite = math.isfinite(float(value))
        except OverflowError:  # an integer too large for a float (10**400)
            finite = False
        if not finite:
            return None, f"{str(value)[:24]} is not a finite number"
        return float(value), None
    if not isinstance(value, str):
        return None, f"expected text, got {json.dumps(value, default=str)[:40]}"
    bad = _controls(value)
    return (None, bad) if bad else (value, None)


def check_row(row: Mapping[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The row with its values as stored (``true`` -> 1) and its problems, by field."""
    out, problems = {}, []
    for k, v in row.items():
        out[k], problem = check_value(k, v)
        if problem:
            problems.append((k, problem))
    return out, problems


def coerce_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A received row made storable: a text column given something else keeps it as JSON text,
    a number that is not one is left empty, a character a terminal would obey is written as its
    escape (the row itself is never lost)."""
    out = {}
    for k, v in row.items():
        fig = BY_NAME.get(k)
        if fig is not None and (fig.json or fig.sql.startswith("TEXT")):
            try:
                bounded.check_tree(v, max_nodes=100_000)
                v = _inert_tree(v)
            except ValueError:
                pass  # refused below as it comes
        good, problem = check_value(k, v)
        fig = BY_NAME.get(k)
        if problem and fig is not None and not fig.json and fig.sql.startswith("TEXT"):
            good = json.dumps(v, default=str, sort_keys=True)
        out[k] = good
    return out


__all__ = ["MAX_INT", "check_value", "check_row", "coerce_row"]
