"""Reading profile files: TOML text to checked values, and the ``extends`` chain merged.

:func:`load_chain` reads one ``.toml`` file, checks every key and value against the schema
(unknown keys and sections get a "did you mean" hint), follows ``extends`` to the parent
profile (a name or a path, relative to the child's folder; cycles and self-references are
errors) and merges key by key, the child winning. It also returns, per dotted key, the file
that set it, so later messages and relative paths name the right file.
"""

from __future__ import annotations

import copy
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fttui.core.base import bounded
from fttui.core.base.errors import ProfileError, did_you_mean
from fttui.core.profiles.discovery import candidates, display, looks_like_path, safe_resolve, unknown_profile_hint
from fttui.core.profiles.schema import SCHEMA, SECTION_ALIASES, SECTIONS, TOP, dotted
from fttui.core.profiles.values import check_value, type_word


def _read_toml(path: Path) -> dict[str, Any]:
    disp = display(path)
    try:
        text = bounded.read_text(path, bounded.MAX_CONFIG_BYTES)
    except FileNotFoundError:
        raise ProfileError(disp, None, "profile file not found") from None
    except ValueError as exc:  # /dev/zero, a pipe, a huge file
        raise ProfileError(disp, None, str(exc)) from None
    except IsADirectoryError:
        raise ProfileError(
            disp, None, "is a folder, not a profile file", "give a .toml file or a profile name"
        ) from None
    except UnicodeDecodeError:
        raise ProfileError(disp, None, "not UTF-8 text", "save the file as UTF-8") from None
    except OSError as exc:
        raise ProfileError(disp, None, f"cannot read the file: {exc.strerror or exc}") from None
    try:
        doc = tomllib.loads(text)
        bounded.check_tree(doc)
        return doc
    except RecursionError:  # arrays or tables inside each other thousands deep (issue 36)
        raise ProfileError(disp, None, "invalid TOML: values nested too deeply", "no setting nests") from None
    except ValueError as exc:
        if not isinstance(exc, tomllib.TOMLDecodeError):
            raise ProfileError(disp, None, str(exc)) from None
        message = str(exc)
        key = None
        match = re.search(r"\s*\(at line (\d+), column (\d+)\)", message)
        if match:
            key = f"line {match.group(1)}"
            message = message[: match.start()] + message[match.end() :]
            message = message.replace("Illegal character '\\n'", "a line ends inside a string")
        elif "end of document" in message:
            key = f"line {text.count(chr(10)) + (0 if text.endswith(chr(10)) else 1)}"
            message = re.sub(r"\s*\(at end of document\)", " at the end of the file", message)
        raise ProfileError(
            disp, key, f"invalid TOML: {message.strip()}",
            "check the quotes, brackets and '=' on that line; strings need double quotes",
        ) from None  # fmt: skip


def normalize(data: Mapping[str, Any], file: str) -> dict[str, dict[str, Any]]:
    """Check a profile's keys and value types; returns {section: {key: value}} (TOP for top-level)."""
    out: dict[str, dict[str, Any]] = {TOP: {}}
    for name, value in data.items():
        if name in SECTION_ALIASES and isinstance(value, dict):  # [zero3] is [deepspeed]
            new = SECTION_ALIASES[name]
            if isinstance(data.get(new), dict):
                raise ProfileError(
                    file,
                    f"[{name}]",
                    f"[{name}] is the old name of [{new}] and both are given",
                    f"move its keys under [{new}]",
                )
            name = new
        if name in SCHEMA[TOP]:
            out[TOP][name] = check_value(TOP, name, value, file)
            continue
        if name in SECTIONS:
            if not isinstance(value, dict):
                raise ProfileError(
                    file, name, f"must be a table, got {type_word(value)}", f"write the keys under a [{name}] header"
                )
            section = out.setdefault(name, {})
            for key, item in value.items():
                if key not in SCHEMA[name]:
                    raise ProfileError(file, f"{name}.{key}", "unknown key", _unknown_key_hint(name, key))
                section[key] = check_value(name, key, item, file)
            continue
        if isinstance(value, dict):
            hint = did_you_mean(name, SECTIONS) or "sections: " + ", ".join(SECTIONS)
            raise ProfileError(file, f"[{name}]", "unknown section", hint)
        raise ProfileError(file, name, "unknown key", _unknown_key_hint(TOP, name))
    return out


def _unknown_key_hint(section: str, key: str) -> str:
    if section == TOP and key == "name":
        return "a profile's name is its file name"
    homes = [s for s in SECTIONS if key in SCHEMA[s] and s != section]
    if homes:
        return f"'{key}' belongs in [{homes[0]}]" if section else f"put it under [{homes[0]}]"
    near = did_you_mean(key, SCHEMA[section])
    if near:
        return near
    if section == TOP:
        near = did_you_mean(key, [dotted(s, k) for s in SECTIONS for k in SCHEMA[s]] + list(SECTIONS))
        if near:
            return near
        return "top-level keys: " + ", ".join(SCHEMA[TOP]) + "; sections: " + ", ".join(SECTIONS)
    return f"keys of [{section}]: " + ", ".join(SCHEMA[section])


def _merge(base: dict, top: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _resolve_extends(target: str, child: Path) -> Path:
    child_resolved = safe_resolve(child)
    disp = display(child)
    if looks_like_path(target):
        path = Path(target).expanduser()
        if not path.is_absolute():
            path = child.parent / path
        if not path.is_file():
            raise ProfileError(
                disp, "extends", f"profile file not found: {target}", f"paths are relative to {display(child.parent)}"
            )
        return path
    sibling = child.parent / f"{target}.toml"
    if sibling.is_file() and safe_resolve(sibling) != child_resolved:
        return sibling
    itself = sibling.is_file()
    for ref in candidates():
        if ref.name != target:
            continue
        if safe_resolve(ref.path) == child_resolved:
            itself = True
            continue
        return ref.path
    if itself:
        raise ProfileError(
            disp, "extends", f"profile '{target}' extends itself", "remove the 'extends' line or name another profile"
        )
    siblings = [p.stem for p in child.parent.glob("*.toml") if safe_resolve(p) != child_resolved]
    raise ProfileError(disp, "extends", f"unknown profile '{target}'", unknown_profile_hint(target, siblings))


#: profiles one may stack with ``extends`` (a handful in practice)
MAX_EXTENDS = 32


def load_chain(path: Path, stack: tuple[Path, ...] = ()) -> tuple[dict, dict]:
    """Raw (merged, checked) values and, per dotted key, the file that set it."""
    resolved = safe_resolve(path)
    raw = normalize(_read_toml(path), display(path))
    origins = {dotted(s, k): path for s, keys in raw.items() for k in keys}
    target = raw[TOP].get("extends")
    if not target:
        return raw, origins
    if len(stack) >= MAX_EXTENDS:  # each level is a frame of this function (a 1000-long chain hit the limit)
        raise ProfileError(
            display(path), "extends", f"a chain of more than {MAX_EXTENDS} profiles", "extend a profile nearer the base"
        )
    parent = _resolve_extends(target, path)
    chain = stack + (resolved,)
    parent_resolved = safe_resolve(parent)
    if parent_resolved in chain:
        names = [p.stem for p in chain[chain.index(parent_resolved) :]] + [parent.stem]
        raise ProfileError(
            display(path),
            "extends",
            "profiles extend each other in a cycle: " + " -> ".join(names),
            "remove one of the 'extends' lines",
        )
    parent_raw, parent_origins = load_chain(parent, chain)
    merged = _merge(parent_raw, raw)
    merged[TOP]["extends"] = target
    return merged, {**parent_origins, **origins}


__all__ = ["load_chain", "normalize"]
