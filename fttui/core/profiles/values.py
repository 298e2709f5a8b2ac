"""Checking one profile value: its kind, allowed values, range and size grammar.

:func:`check_value` takes one value of one schema key as a file (or ``--set``) gave it and
returns it normalized (floats as float, sizes stripped, tables and module lists copied), or
raises a :class:`~fttui.core.base.errors.ProfileError` whose hint says how to write it. Also the
small text helpers the messages share (a value as TOML, a type in words, a number without a
needless ``.0``). Sizes follow :func:`fttui.core.base.units.parse_size`.
"""

from __future__ import annotations

import copy
import math
import re
import tomllib
from typing import Any

from fttui.core.base.errors import ProfileError, SizeError, did_you_mean
from fttui.core.base.units import _SIZE_HINT, parse_size  # the hint parse_size gives, for a non-size type
from fttui.core.profiles.schema import METHODS, SCHEMA, Field, dotted
from fttui.core.profiles.trackers import TRACKERS

#: Methods this build can run. Every name in METHODS is a valid profile value; a method outside
#: this set is rejected as "not supported" (the lead may narrow it).
SUPPORTED_METHODS: set[str] = set(METHODS)

_KIND_WORDS = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "table": "a table",
    "modules": "a list of module names or a string",
    "names": "a list of names or a string",
    "size": "a size string",
    "argv": "a list of strings (the program, then its arguments)",
}


_TOML_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_TOML_SPECIAL = re.compile(r'[\\"\x00-\x1f\x7f]')
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and every control character escaped, so that the
    literal is one line whatever the text holds (a newline in a value would end a comment or a
    key's line and make the rest live TOML: issue 36)."""
    body = _TOML_SPECIAL.sub(lambda m: _TOML_ESCAPES.get(m.group(0)) or f"\\u{ord(m.group(0)):04x}", text)
    return f'"{body}"'


def toml_literal(value: Any) -> str:
    """A value as a TOML literal on one line (``None`` as ``""``), for messages, the overrides
    log and the profiles written by ``fttui profiles --from``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        keys = (k if _BARE_KEY.fullmatch(str(k)) else _toml_string(str(k)) for k in value)
        return "{" + ", ".join(f"{k} = {toml_literal(v)}" for k, v in zip(keys, value.values())) + "}"
    if value is None:
        return '""'
    return repr(value)


def short_literal(value: Any, limit: int = 40) -> str:
    """:func:`toml_literal`, cut to ``limit`` characters."""
    text = toml_literal(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def type_word(value: Any) -> str:
    """What a value is, in words: "an integer", "a table"..."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__


def _type_hint(key: str, field: Field, value: Any) -> str:
    if isinstance(value, str) and field.kind in ("int", "float", "bool"):
        try:
            parsed = tomllib.loads(f"v = {value.strip()}")["v"]
        except (tomllib.TOMLDecodeError, RecursionError):
            parsed = None
        if parsed is not None and _kind_ok(field.kind, parsed):
            return f"write {value.strip()} without quotes"
    if field.kind == "int" and isinstance(value, float) and value.is_integer():
        return f"write {int(value)} without a decimal point"
    short = key.rsplit(".", 1)[-1]
    if field.kind == "str" and not isinstance(value, (dict, list)):
        return f'put it in double quotes: {short} = "{toml_literal(value)}"'
    if field.kind == "size":
        return _SIZE_HINT
    example = field.default if field.default not in (None, "", {}) else None
    if field.kind == "modules":
        return 'e.g. target_modules = ["q_proj", "v_proj"] or "all-linear"'
    if field.kind == "names":
        return f'e.g. {short} = ["tensorboard"] or []'
    if field.kind == "argv":
        return 'e.g. argv = ["python", "train.py", "--epochs", "1"]'
    if field.kind == "table":
        return f"write it as a table under a [{key}] header"
    if example is not None:
        return f"e.g. {short} = {toml_literal(example)}"
    return f"expected {_KIND_WORDS[field.kind]}"


def _kind_ok(kind: str, value: Any) -> bool:
    if kind in ("str",):
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "table":
        return isinstance(value, dict)
    if kind == "modules":
        if isinstance(value, str):
            return bool(value.strip())
        return isinstance(value, list) and bool(value) and all(isinstance(v, str) and v.strip() for v in value)
    if kind == "names":
        return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
    if kind == "size":
        return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
    if kind == "argv":
        return (
            isinstance(value, list)
            and bool(value)
            and all(isinstance(v, str) for v in value)
            and bool(value[0].strip())
        )
    raise AssertionError(kind)


#: the largest whole number a profile takes (seeds are 32-bit; no count or length comes near it)
MAX_INT = 2**32 - 1


def check_value(section: str, key: str, value: Any, file: str) -> Any:
    """Type, allowed values and range of one value; returns it normalized."""
    field = SCHEMA[section][key]
    dk = dotted(section, key)
    if not _kind_ok(field.kind, value):
        raise ProfileError(
            file, dk,
            f"expected {_KIND_WORDS[field.kind]}, got {type_word(value)} {short_literal(value)}",
            _type_hint(dk, field, value),
        )  # fmt: skip
    if field.kind == "float":
        value = float(value)
        if not math.isfinite(value):
            raise ProfileError(file, dk, f"must be a finite number, got {value}", field.hint or None)
    elif field.kind == "size":
        value = str(value).strip()
        if value:
            try:
                parse_size(value)
            except SizeError as exc:
                raise ProfileError(file, dk, exc.message, exc.hint) from None
    elif field.kind in ("table", "modules", "argv"):
        value = copy.deepcopy(value)
    elif field.kind == "names":
        value = _names(file, dk, value)
    if field.choices and value not in field.choices:
        word = {"method": "method", "train.precision": "precision"}.get(dk, "value")
        hint = did_you_mean(value, field.choices) or "one of: " + ", ".join(field.choices)
        raise ProfileError(file, dk, f"unknown {word} '{value}'", hint)
    if dk == "method" and value not in SUPPORTED_METHODS:
        supported = ", ".join(m for m in METHODS if m in SUPPORTED_METHODS)
        raise ProfileError(file, dk, f"method '{value}' is not supported by this build", f"supported: {supported}")
    if field.kind == "int" and abs(value) > MAX_INT:  # a randint or a C integer overflowed in the worker
        raise ProfileError(file, dk, f"must be at most {MAX_INT}, got {short_literal(value)}", None)
    if field.lo is not None and value < field.lo:
        raise ProfileError(
            file, dk, f"must be >= {num(field.lo)}, got {num(value)}", field.hint or f"use a value >= {num(field.lo)}"
        )
    if field.hi is not None and (value >= field.hi if field.hi_open else value > field.hi):
        op = "<" if field.hi_open else "<="
        raise ProfileError(
            file,
            dk,
            f"must be {op} {num(field.hi)}, got {num(value)}",
            field.hint or f"use a value {op} {num(field.hi)}",
        )
    return value


def _names(file: str, dk: str, value: str | list[str]) -> list[str]:
    """A ``names`` value as a list without repeats: one string is a comma-separated list and
    ``"none"`` (transformers' word) or ``""`` an empty one. ``train.report_to`` names trackers
    (:data:`~fttui.core.profiles.trackers.TRACKERS`)."""
    parts = value.split(",") if isinstance(value, str) else value
    names = [p.strip() for p in parts if p.strip()]
    if names == ["none"]:
        names = []
    if dk == "train.report_to":
        for name in names:
            if name not in TRACKERS:
                hint = did_you_mean(name, list(TRACKERS)) or "one of: " + ", ".join(TRACKERS)
                raise ProfileError(file, dk, f"unknown tracker '{name}'", hint)
    return list(dict.fromkeys(names))


def num(x: float) -> str:
    """A number without a needless ``.0``."""
    return str(int(x)) if isinstance(x, float) and x.is_integer() and abs(x) < 1e15 else str(x)


__all__ = ["SUPPORTED_METHODS", "check_value", "num", "short_literal", "toml_literal", "type_word"]
