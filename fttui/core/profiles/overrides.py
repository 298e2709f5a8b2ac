"""``--set`` overrides: ``KEY=VALUE`` text (or a dict) applied on top of a profile's values.

A key is dotted (``train.batch_size``), an alias (``lr``) or a key of a table
(``model.arch_config.hidden_size``); a value is a TOML literal, else the text itself, so strings
need no quotes and ``q_proj,v_proj`` is a module list. Each value is checked like a file's, the
errors name ``--set``, and :func:`apply_overrides_to` logs what was set (``resolved["overrides"]``).
"""

from __future__ import annotations

import copy
import difflib
import os
import tomllib
from collections.abc import Iterable, Mapping
from typing import Any

from fttui.core.base.errors import ProfileError, did_you_mean
from fttui.core.profiles.schema import (
    ALIASES,
    ALL_KEYS,
    OVERRIDE,
    SCHEMA,
    SECTION_ALIASES,
    SECTIONS,
    TOP,
    Field,
    dotted,
)
from fttui.core.profiles.values import check_value, toml_literal


def _parse_literal(text: str, field: Field | None) -> Any:
    """A ``--set`` value: a TOML literal, else the text itself (strings need no quotes)."""
    stripped = text.strip()
    value: Any = stripped
    if stripped and "\n" not in stripped:
        try:
            value = tomllib.loads(f"v = {stripped}")["v"]
        except (tomllib.TOMLDecodeError, RecursionError):  # not a literal: the text (checked below)
            value = stripped
    if field is not None:
        wrong_str = field.kind == "str" and not isinstance(value, str)
        if wrong_str or (field.kind == "size" and not isinstance(value, (str, int))):
            value = stripped
        elif field.kind == "modules" and isinstance(value, str) and "," in value:
            value = [part.strip() for part in value.split(",") if part.strip()]
    return value


def _override_items(overrides: Iterable[str] | Mapping[str, Any] | None) -> list[tuple[str, Any, bool]]:
    """(key, value, value_is_text) per override."""
    if not overrides:
        return []
    if isinstance(overrides, Mapping):
        return [(str(k), v, isinstance(v, str)) for k, v in overrides.items()]
    if isinstance(overrides, str):
        overrides = [overrides]
    items = []
    for entry in overrides:
        if not isinstance(entry, str) or "=" not in entry:
            raise ProfileError(
                OVERRIDE, str(entry), "expected KEY=VALUE", "e.g. --set train.batch_size=8 or --set lr=1e-4"
            )
        key, _, value = entry.partition("=")
        items.append((key, value, True))
    return items


def _override_key(key: str) -> tuple[str, str, str | None]:
    """(section, key, sub-key of a table) for a --set key; ProfileError if unknown."""
    key = key.strip()
    dotted = ALIASES.get(key, key)
    parts = dotted.split(".")
    parts[0] = SECTION_ALIASES.get(parts[0], parts[0]) if len(parts) > 1 else parts[0]
    if len(parts) == 1 and parts[0] in SCHEMA[TOP]:
        if parts[0] == "extends":
            raise ProfileError(OVERRIDE, key, "extends cannot be overridden", "load the other profile instead")
        return TOP, parts[0], None
    if len(parts) >= 2 and parts[0] in SECTIONS and parts[1] in SCHEMA[parts[0]]:
        field = SCHEMA[parts[0]][parts[1]]
        if len(parts) == 2:
            return parts[0], parts[1], None
        if len(parts) == 3 and field.kind == "table" and parts[2]:
            return parts[0], parts[1], parts[2]
    if len(parts) == 2 and parts[1] and parts[0] in SECTIONS:
        section, name = parts
        homes = [s for s in SECTIONS if name in SCHEMA[s]]
        near = difflib.get_close_matches(name, list(SCHEMA[section]), n=1, cutoff=0.6)
        if homes:
            hint = f"did you mean '{homes[0]}.{name}'?"
        elif near:
            hint = f"did you mean '{section}.{near[0]}'?"
        else:
            hint = f"keys of [{section}]: " + ", ".join(SCHEMA[section])
    else:
        hint = did_you_mean(key, list(ALL_KEYS) + list(ALIASES)) or (
            "use a dotted key like train.batch_size or an alias: " + ", ".join(ALIASES)
        )
    raise ProfileError(OVERRIDE, key, "unknown key", hint)


def apply_overrides_to(raw: dict, origins: dict, overrides: Any, log: list[str]) -> None:
    """Check and set each override in ``raw``; mark ``--set`` as its origin and log it."""
    for key, value, is_text in _override_items(overrides):
        section, name, sub = _override_key(key)
        field = SCHEMA[section][name]
        dk = dotted(section, name)
        if is_text:
            text = value
            value = _parse_literal(value, None if sub else field)
        else:
            text = toml_literal(value)
        section_values = raw.setdefault(section, {})
        if sub is not None:
            table = copy.deepcopy(section_values.get(name) or {})
            table[sub] = value
            section_values[name] = check_value(section, name, table, OVERRIDE)
            log.append(f"{dk}.{sub}={text.strip()}")
        else:
            section_values[name] = check_value(section, name, value, OVERRIDE)
            log.append(f"{dk}={text.strip()}")
        origins[dk] = OVERRIDE


def stated_overrides(log: Iterable[str], resolved: Mapping[str, Any]) -> dict[str, Any]:
    """The ``--set`` values of a resolved profile (its ``overrides`` log) as a profile file states
    them: dotted key (``model.arch_config.hidden_size`` for a key of a table) -> the value as
    ``--set`` parsed it (``model.arch = "qwen-7b"``, not the ``model_type`` it resolved to), except a
    value that resolution made an absolute path (a file named from the folder fttui was started
    in: a relative path in a profile is its folder's), which is written as resolved."""
    out: dict[str, Any] = {}
    for entry in log:
        key, _, text = entry.partition("=")
        section, name, sub = _override_key(key)
        value = _parse_literal(text, None if sub else SCHEMA[section][name])
        if sub is None:
            held = resolved.get(name) if section == TOP else (resolved.get(section) or {}).get(name)
            if isinstance(held, str) and held != value and os.path.isabs(held):
                value = held
        out[dotted(section, name) + (f".{sub}" if sub is not None else "")] = value
    return out


__all__ = ["apply_overrides_to", "stated_overrides"]
