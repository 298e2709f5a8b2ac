"""Profiles: TOML files describing one fine-tuning run (see docs/architecture.md, "Profiles").

Pure stdlib. The whole schema is the one table :data:`SCHEMA`; loading is

    read TOML -> check keys/types per file -> follow ``extends`` (merge key by key)
    -> apply ``--set`` overrides -> fill defaults, resolve paths and derived values -> cross checks

and every failure is a :class:`~fttui.core.base.errors.ProfileError` naming the file and the key.
"""

from __future__ import annotations

import copy
import difflib
import math
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, NamedTuple

from fttui.core.base import paths
from fttui.core.models.archs import ARCHS
from fttui.core.base.errors import ProfileError, SizeError, did_you_mean
from fttui.core.base.units import parse_size

__all__ = [
    "ALIASES",
    "METHODS",
    "SCHEMA",
    "SUPPORTED_METHODS",
    "Field",
    "ProfileRef",
    "SizeError",
    "apply_overrides",
    "discover",
    "find_profile",
    "load_profile",
    "parse_size",
    "profile_summary",
]

METHODS: tuple[str, ...] = ("full", "full-zero3-offload", "lora", "lora-emb", "qlora", "lora-int8")
#: Methods this build can run. Every name in METHODS is a valid profile value; a method outside
#: this set is rejected as "not supported" (the lead may narrow it).
SUPPORTED_METHODS: set[str] = set(METHODS)

SYNTHETIC = "synthetic"
SYNTHETIC_DEFAULT_SAMPLES = 256
QLORA_DEFAULT_OPTIMIZER = "paged_adamw_32bit"
OVERRIDE = "--set"  # the "file" that override errors name


class Field(NamedTuple):
    """One key of the schema.

    kind: ``str``, ``int``, ``float`` (ints accepted), ``bool``, ``table``, ``modules``
    (a list of names or one string), ``size`` (a size string for :func:`parse_size`, "" = none).
    A default of ``None`` means "not set" (optional, or derived from other keys).
    """

    kind: str
    default: Any
    choices: tuple = ()
    lo: float | None = None
    hi: float | None = None
    hi_open: bool = False
    hint: str = ""


TOP = ""  # the section name of top-level keys in SCHEMA

#: section -> key -> Field. The only description of what a profile may contain.
SCHEMA: dict[str, dict[str, Field]] = {
    TOP: {
        "description": Field("str", ""),
        "extends": Field("str", None),
        "method": Field("str", "lora", METHODS),
    },
    "model": {
        "name_or_path": Field("str", None),
        "init": Field("str", "pretrained", ("pretrained", "random")),
        "arch": Field("str", None),
        "config": Field("str", None),
        "arch_config": Field("table", {}),
        "arch_name": Field("str", None),  # set by resolution: the fttui.core.models.archs entry
        "trust_remote_code": Field("bool", False),
        "tokenizer": Field("str", None),
        "attn_implementation": Field("str", "sdpa", ("eager", "sdpa", "flash_attention_2")),
    },
    "data": {
        "source": Field("str", SYNTHETIC),
        "name": Field("str", None),
        "format": Field("str", "auto", ("auto", "instruction", "chat")),
        "max_seq_len": Field("int", 512, lo=1, hint="tokens per sample; use 1 or more"),
        "num_samples": Field("int", 0, lo=0, hint="0 means all samples of the file"),
        "pad_to_max": Field("bool", False),
    },
    "train": {
        "batch_size": Field("int", 1, lo=1, hint="micro batch per device; use 1 or more"),
        "grad_accum": Field("int", 1, lo=1, hint="gradient accumulation steps; use 1 or more"),
        "epochs": Field("float", 1.0, lo=0, hint="epochs must be >= 0; set max_steps > 0 instead"),
        "max_steps": Field("int", -1, hint="-1 or 0 = use epochs"),
        "lr": Field("float", 2e-4, lo=0, hint="learning rate, e.g. 2e-4"),
        "precision": Field("str", "fp32", ("fp32", "fp16", "bf16")),
        "gradient_checkpointing": Field("bool", False),
        "optimizer": Field("str", None),
        "lr_scheduler": Field("str", "linear"),
        "warmup_ratio": Field("float", 0.0, lo=0, hi=1, hint="a fraction of the steps, 0 to 1"),
        "weight_decay": Field("float", 0.0, lo=0, hint="use 0 or more, e.g. 0.01"),
        "seed": Field("int", 42),
        "warmup_exclude_steps": Field("int", 1, lo=0, hint="steps left out of steady rates; 0 or more"),
    },
    "lora": {
        "r": Field("int", 8, lo=1, hint="LoRA rank, e.g. 8 or 16"),
        "alpha": Field("int", 16, lo=1, hint="LoRA alpha, e.g. twice the rank"),
        "dropout": Field("float", 0.05, lo=0, hi=1, hi_open=True, hint="a probability: 0 or more and below 1"),
        "target_modules": Field("modules", ["q_proj", "v_proj"]),
    },
    "quant": {
        "type": Field("str", "nf4", ("nf4", "fp4")),
        "double_quant": Field("bool", True),
        # "peft": peft's prepare_model_for_kbit_training (every weight that is not quantised,
        # embeddings, norms and output layer, cast to fp32: an fp32 residual stream);
        # "none": they stay in the compute dtype (smaller activations; what scripts that skip
        # that call run)
        "prepare": Field("str", "peft", ("peft", "none")),
    },
    "zero3": {
        "offload_optimizer": Field("bool", True),
        "offload_params": Field("bool", True),
        "pin_memory": Field("bool", True),
    },
    "devices": {
        "gpus": Field("int", 1, lo=0, hint="GPUs (one process each) per node; 0 = CPU"),
        "cpu_processes": Field("int", 1, lo=1, hint="processes per node when gpus = 0 (CPU ranks)"),
        "nodes": Field("int", 1, lo=1, hint="number of machines; use 1 or more"),
        "node_rank": Field("int", 0, lo=0, hint="this machine's index, from 0 to nodes - 1"),
        "main_addr": Field("str", "127.0.0.1"),
        "main_port": Field("int", 29500, lo=1, hi=65535, hint="a TCP port, 1 to 65535"),
        "launcher": Field("str", "auto", ("auto", "python", "torchrun", "accelerate", "deepspeed")),
    },
    "limits": {
        "gpu_memory": Field("size", ""),
        "host_memory": Field("size", ""),
    },
    "monitor": {
        "stall_timeout_s": Field("float", 0.0, lo=0, hint="seconds without a step before a run is flagged stalled; 0 = never"),
    },
}

SECTIONS: tuple[str, ...] = tuple(s for s in SCHEMA if s != TOP)

#: short ``--set`` names
ALIASES: dict[str, str] = {
    "batch_size": "train.batch_size",
    "grad_accum": "train.grad_accum",
    "max_seq_len": "data.max_seq_len",
    "num_samples": "data.num_samples",
    "max_steps": "train.max_steps",
    "epochs": "train.epochs",
    "lr": "train.lr",
    "precision": "train.precision",
    "gpus": "devices.gpus",
    "cpu_processes": "devices.cpu_processes",
}

#: keys that may hold a path; relative ones are taken from the folder of the file that set them
PATH_KEYS = ("model.name_or_path", "model.tokenizer", "model.config", "data.source")

#: top-level keys of a resolved profile that are not schema keys
META_KEYS = ("name", "source", "origin", "derived", "overrides")

_KIND_WORDS = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "table": "a table",
    "modules": "a list of module names or a string",
    "size": "a size string",
}


def _dotted(section: str, key: str) -> str:
    return f"{section}.{key}" if section else key


ALL_KEYS: tuple[str, ...] = tuple(_dotted(s, k) for s, keys in SCHEMA.items() for k in keys)


# --------------------------------------------------------------------------------------------
# small helpers


def _display(path: str | os.PathLike[str] | None) -> str:
    """A path as the user should read it: relative to the current folder when below it."""
    if path is None:
        return "<profile>"
    if str(path) == OVERRIDE:
        return OVERRIDE
    p = Path(path)
    try:
        rel = os.path.relpath(p, Path.cwd())
    except (ValueError, OSError):
        return str(p)
    if rel == ".." or rel.startswith(".." + os.sep):
        return str(p)
    return rel


def _safe_resolve(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path.absolute()


def _toml_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_literal(v)}" for k, v in value.items()) + "}"
    if value is None:
        return '""'
    return repr(value)


def _short(value: Any, limit: int = 40) -> str:
    text = _toml_literal(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_word(value: Any) -> str:
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


# --------------------------------------------------------------------------------------------
# sizes


# --------------------------------------------------------------------------------------------
# checking one value


def _type_hint(key: str, field: Field, value: Any) -> str:
    if isinstance(value, str) and field.kind in ("int", "float", "bool"):
        try:
            parsed = tomllib.loads(f"v = {value.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            parsed = None
        if parsed is not None and _kind_ok(field.kind, parsed):
            return f"write {value.strip()} without quotes"
    if field.kind == "int" and isinstance(value, float) and value.is_integer():
        return f"write {int(value)} without a decimal point"
    short = key.rsplit(".", 1)[-1]
    if field.kind == "str" and not isinstance(value, (dict, list)):
        return f"put it in double quotes: {short} = \"{_toml_literal(value)}\""
    if field.kind == "size":
        return _SIZE_HINT
    example = field.default if field.default not in (None, "", {}) else None
    if field.kind == "modules":
        return 'e.g. target_modules = ["q_proj", "v_proj"] or "all-linear"'
    if field.kind == "table":
        return f"write it as a table under a [{key}] header"
    if example is not None:
        return f"e.g. {short} = {_toml_literal(example)}"
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
        return (
            isinstance(value, list)
            and bool(value)
            and all(isinstance(v, str) and v.strip() for v in value)
        )
    if kind == "size":
        return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
    raise AssertionError(kind)


def _check_value(section: str, key: str, value: Any, file: str) -> Any:
    """Type, allowed values and range of one value; returns it normalized."""
    field = SCHEMA[section][key]
    dk = _dotted(section, key)
    if not _kind_ok(field.kind, value):
        raise ProfileError(
            file, dk,
            f"expected {_KIND_WORDS[field.kind]}, got {_type_word(value)} {_short(value)}",
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
    elif field.kind in ("table", "modules"):
        value = copy.deepcopy(value)
    if field.choices and value not in field.choices:
        word = {"method": "method", "train.precision": "precision"}.get(dk, "value")
        hint = did_you_mean(value, field.choices) or "one of: " + ", ".join(field.choices)
        raise ProfileError(file, dk, f"unknown {word} '{value}'", hint)
    if dk == "method" and value not in SUPPORTED_METHODS:
        supported = ", ".join(m for m in METHODS if m in SUPPORTED_METHODS)
        raise ProfileError(file, dk, f"method '{value}' is not supported by this build",
                           f"supported: {supported}")
    if field.lo is not None and value < field.lo:
        raise ProfileError(file, dk, f"must be >= {_num(field.lo)}, got {_num(value)}",
                           field.hint or f"use a value >= {_num(field.lo)}")
    if field.hi is not None and (value >= field.hi if field.hi_open else value > field.hi):
        op = "<" if field.hi_open else "<="
        raise ProfileError(file, dk, f"must be {op} {_num(field.hi)}, got {_num(value)}",
                           field.hint or f"use a value {op} {_num(field.hi)}")
    return value


def _num(x: float) -> str:
    return str(int(x)) if isinstance(x, float) and x.is_integer() and abs(x) < 1e15 else str(x)


# --------------------------------------------------------------------------------------------
# reading files


def _read_toml(path: Path) -> dict[str, Any]:
    disp = _display(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError(disp, None, "profile file not found") from None
    except IsADirectoryError:
        raise ProfileError(disp, None, "is a folder, not a profile file",
                           "give a .toml file or a profile name") from None
    except UnicodeDecodeError:
        raise ProfileError(disp, None, "not UTF-8 text", "save the file as UTF-8") from None
    except OSError as exc:
        raise ProfileError(disp, None, f"cannot read the file: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        key = None
        match = re.search(r"\s*\(at line (\d+), column (\d+)\)", message)
        if match:
            key = f"line {match.group(1)}"
            message = message[: match.start()] + message[match.end():]
            message = message.replace("Illegal character '\\n'", "a line ends inside a string")
        elif "end of document" in message:
            key = f"line {text.count(chr(10)) + (0 if text.endswith(chr(10)) else 1)}"
            message = re.sub(r"\s*\(at end of document\)", " at the end of the file", message)
        raise ProfileError(
            disp, key, f"invalid TOML: {message.strip()}",
            "check the quotes, brackets and '=' on that line; strings need double quotes",
        ) from None  # fmt: skip


def _normalize(data: Mapping[str, Any], file: str) -> dict[str, dict[str, Any]]:
    """Check a profile's keys and value types; returns {section: {key: value}} (TOP for top-level)."""
    out: dict[str, dict[str, Any]] = {TOP: {}}
    for name, value in data.items():
        if name in SCHEMA[TOP]:
            out[TOP][name] = _check_value(TOP, name, value, file)
            continue
        if name in SECTIONS:
            if not isinstance(value, dict):
                raise ProfileError(file, name, f"must be a table, got {_type_word(value)}",
                                   f"write the keys under a [{name}] header")
            section = out.setdefault(name, {})
            for key, item in value.items():
                if key not in SCHEMA[name]:
                    raise ProfileError(file, f"{name}.{key}", "unknown key",
                                       _unknown_key_hint(name, key))
                section[key] = _check_value(name, key, item, file)
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
        near = did_you_mean(key, [_dotted(s, k) for s in SECTIONS for k in SCHEMA[s]] + list(SECTIONS))
        if near:
            return near
        return "top-level keys: " + ", ".join(SCHEMA[TOP]) + "; sections: " + ", ".join(SECTIONS)
    return f"keys of [{section}]: " + ", ".join(SCHEMA[section])


# --------------------------------------------------------------------------------------------
# discovery


@dataclass(frozen=True)
class ProfileRef:
    """A profile file found by :func:`discover`; origin is ``project``, ``user`` or ``bundled``."""

    name: str
    path: Path
    origin: str


def _search_dirs() -> list[tuple[Path, str]]:
    bundled = paths.bundled_profiles_dir()
    bundled_resolved = _safe_resolve(bundled)
    candidates = [
        (Path.cwd() / "profiles", "project"),
        (paths.user_profiles_dir(), "user"),
        (bundled, "bundled"),
    ]
    out: list[tuple[Path, str]] = []
    seen: set[Path] = set()
    for folder, origin in candidates:
        resolved = _safe_resolve(folder)
        if resolved in seen:
            continue
        seen.add(resolved)
        out.append((folder, "bundled" if resolved == bundled_resolved else origin))
    return out


def _candidates() -> Iterator[ProfileRef]:
    """Every profile file in discovery order, shadowed ones included."""
    for folder, origin in _search_dirs():
        try:
            files = sorted(folder.glob("*.toml"))
        except OSError:
            continue
        for file in files:
            if file.is_file() and not file.name.startswith("."):
                yield ProfileRef(file.stem, file, origin)


def discover() -> list[ProfileRef]:
    """Profiles by name (sorted); for a name found in several places the first folder wins:
    ``./profiles``, then the user profile folder, then the bundled profiles."""
    names: set[str] = set()
    files: set[Path] = set()
    refs: list[ProfileRef] = []
    for ref in _candidates():
        resolved = _safe_resolve(ref.path)
        if ref.name in names or resolved in files:
            continue
        names.add(ref.name)
        files.add(resolved)
        refs.append(ref)
    return sorted(refs, key=lambda r: r.name)


def _unknown_profile_hint(name: str, extra: Iterable[str] = ()) -> str:
    known = sorted({r.name for r in discover()} | set(extra))
    near = did_you_mean(name, known)
    if near:
        return near
    if known:
        return "available: " + ", ".join(known)
    return "no profiles found; `fttui profiles` lists where they are looked up"


def find_profile(name: str) -> ProfileRef:
    """The profile called ``name`` per :func:`discover`; ProfileError with a hint if none."""
    for ref in discover():
        if ref.name == name:
            return ref
    raise ProfileError(None, None, f"unknown profile '{name}'", _unknown_profile_hint(name))


def _looks_like_path(text: str) -> bool:
    return text.endswith(".toml") or "/" in text or os.sep in text


def _origin_of(path: Path) -> str:
    resolved = _safe_resolve(path)
    for ref in _candidates():
        if _safe_resolve(ref.path) == resolved:
            return ref.origin
    return "path"


# --------------------------------------------------------------------------------------------
# extends and merging


def _merge(base: dict, top: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _resolve_extends(target: str, child: Path) -> Path:
    child_resolved = _safe_resolve(child)
    disp = _display(child)
    if _looks_like_path(target):
        path = Path(target).expanduser()
        if not path.is_absolute():
            path = child.parent / path
        if not path.is_file():
            raise ProfileError(disp, "extends", f"profile file not found: {target}",
                               f"paths are relative to {_display(child.parent)}")
        return path
    sibling = child.parent / f"{target}.toml"
    if sibling.is_file() and _safe_resolve(sibling) != child_resolved:
        return sibling
    itself = sibling.is_file()
    for ref in _candidates():
        if ref.name != target:
            continue
        if _safe_resolve(ref.path) == child_resolved:
            itself = True
            continue
        return ref.path
    if itself:
        raise ProfileError(disp, "extends", f"profile '{target}' extends itself",
                           "remove the 'extends' line or name another profile")
    siblings = [p.stem for p in child.parent.glob("*.toml") if _safe_resolve(p) != child_resolved]
    raise ProfileError(disp, "extends", f"unknown profile '{target}'",
                       _unknown_profile_hint(target, siblings))


def _load_chain(path: Path, stack: tuple[Path, ...] = ()) -> tuple[dict, dict]:
    """Raw (merged, checked) values and, per dotted key, the file that set it."""
    resolved = _safe_resolve(path)
    raw = _normalize(_read_toml(path), _display(path))
    origins = {_dotted(s, k): path for s, keys in raw.items() for k in keys}
    target = raw[TOP].get("extends")
    if not target:
        return raw, origins
    parent = _resolve_extends(target, path)
    chain = stack + (resolved,)
    parent_resolved = _safe_resolve(parent)
    if parent_resolved in chain:
        names = [p.stem for p in chain[chain.index(parent_resolved):]] + [parent.stem]
        raise ProfileError(_display(path), "extends",
                           "profiles extend each other in a cycle: " + " -> ".join(names),
                           "remove one of the 'extends' lines")
    parent_raw, parent_origins = _load_chain(parent, chain)
    merged = _merge(parent_raw, raw)
    merged[TOP]["extends"] = target
    return merged, {**parent_origins, **origins}


# --------------------------------------------------------------------------------------------
# overrides


def _parse_literal(text: str, field: Field | None) -> Any:
    """A ``--set`` value: a TOML literal, else the text itself (strings need no quotes)."""
    stripped = text.strip()
    value: Any = stripped
    if stripped and "\n" not in stripped:
        try:
            value = tomllib.loads(f"v = {stripped}")["v"]
        except tomllib.TOMLDecodeError:
            value = stripped
    if field is not None:
        if field.kind == "str" and not isinstance(value, str):
            value = stripped
        elif field.kind == "size" and not isinstance(value, (str, int)):
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
            raise ProfileError(OVERRIDE, str(entry), "expected KEY=VALUE",
                               "e.g. --set train.batch_size=8 or --set lr=1e-4")
        key, _, value = entry.partition("=")
        items.append((key, value, True))
    return items


def _override_key(key: str) -> tuple[str, str, str | None]:
    """(section, key, sub-key of a table) for a --set key; ProfileError if unknown."""
    key = key.strip()
    dotted = ALIASES.get(key, key)
    parts = dotted.split(".")
    if len(parts) == 1 and parts[0] in SCHEMA[TOP]:
        if parts[0] == "extends":
            raise ProfileError(OVERRIDE, key, "extends cannot be overridden",
                               "load the other profile instead")
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


def _apply(raw: dict, origins: dict, overrides: Any, log: list[str]) -> None:
    for key, value, is_text in _override_items(overrides):
        section, name, sub = _override_key(key)
        field = SCHEMA[section][name]
        dk = _dotted(section, name)
        if is_text:
            text = value
            value = _parse_literal(value, None if sub else field)
        else:
            text = _toml_literal(value)
        section_values = raw.setdefault(section, {})
        if sub is not None:
            table = copy.deepcopy(section_values.get(name) or {})
            table[sub] = value
            section_values[name] = _check_value(section, name, table, OVERRIDE)
            log.append(f"{dk}.{sub}={text.strip()}")
        else:
            section_values[name] = _check_value(section, name, value, OVERRIDE)
            log.append(f"{dk}={text.strip()}")
        origins[dk] = OVERRIDE


# --------------------------------------------------------------------------------------------
# resolving


def _base_dir(origin: Any) -> Path:
    if origin is None or str(origin) == OVERRIDE:
        return Path.cwd()
    return Path(origin).parent


def _local_path(value: str, base: Path) -> Path | None:
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = base / path
    return _safe_resolve(path) if path.exists() else None


def _looks_local(value: str) -> bool:
    return value.startswith(("/", "./", "../", "~")) or value in (".", "..")


def _missing_file_hint(value: str, base: Path, where: str) -> str:
    if not _looks_like_path(value) and not value.endswith(".json"):
        near = did_you_mean(value, [SYNTHETIC])
        if near:
            return near
    found: list[str] = []
    for folder in (base, base / "data"):
        try:
            for pattern in ("*.json", "*.jsonl"):
                found += [os.path.relpath(p, base) for p in folder.glob(pattern)]
        except OSError:
            pass
    near = did_you_mean(value, found)
    if near:
        return near
    return f"relative paths are resolved from {where}; use \"{SYNTHETIC}\" for generated data"


def _finalize(raw: dict, origins: dict, *, name: str, source: str, origin: str, leaf: Any,
              log: list[str]) -> dict[str, Any]:
    def where(dk: str) -> str:
        return _display(origins.get(dk, leaf))

    def explicit(dk: str) -> bool:
        return dk in origins

    resolved: dict[str, Any] = {"name": name, "source": source, "origin": origin}
    for section, fields in SCHEMA.items():
        given = raw.get(section, {})
        values = {k: copy.deepcopy(given[k]) if k in given else copy.deepcopy(f.default)
                  for k, f in fields.items()}
        if section == TOP:
            resolved.update(values)
        else:
            resolved[section] = values
    derived: list[str] = []
    model, data, train, devices = (resolved[s] for s in ("model", "data", "train", "devices"))
    method = resolved["method"]

    # model
    if model["config"] is not None:
        cfg = _local_path(model["config"], _base_dir(origins.get("model.config", leaf)))
        if cfg is not None and cfg.is_dir():
            cfg = cfg / "config.json" if (cfg / "config.json").is_file() else None
        if cfg is None:
            raise ProfileError(where("model.config"), "model.config",
                               f"config file not found: {model['config']}",
                               f"relative paths are resolved from "
                               f"{_display(_base_dir(origins.get('model.config', leaf)))}")
        model["config"] = str(cfg)
    if model["init"] == "random":
        if not model["arch"] and not model["config"]:
            raise ProfileError(where("model.init"), "model.arch",
                               "init = \"random\" needs model.arch or model.config",
                               "e.g. arch = \"llama\" with an [model.arch_config] table")
        if model["name_or_path"] is None:
            model["name_or_path"] = model["arch"] or Path(model["config"]).parent.name
            derived.append("model.name_or_path")
    elif model["name_or_path"] is None or not model["name_or_path"].strip():
        raise ProfileError(_display(leaf), "model.name_or_path", "required",
                           "set a hub id like \"gpt2\" or a local model folder, "
                           "or use init = \"random\" with arch")
    # model.arch may name an fttui.core.models.archs entry ("baichuan2-7b"): it becomes the entry's
    # transformers model_type, arch_config gets the entry's numbers (the profile's keys win) and
    # arch_name keeps the entry. Re-resolving (apply_overrides) keeps it, and drops the numbers
    # of a previous entry that another arch replaces.
    entry, previous = ARCHS.get(model["arch"] or ""), ARCHS.get(model["arch_name"] or "")
    if entry is not None:
        given = {k: v for k, v in model["arch_config"].items()
                 if previous in (None, entry) or (k, v) not in previous.config.items()}
        model.update(arch=entry.model_type, arch_name=entry.name,
                     arch_config={**entry.config_dict(), **given})
    elif previous is None or model["arch"] != previous.model_type:
        model["arch_name"] = None
    if model["arch_name"] and "model.name_or_path" in derived:
        model["name_or_path"] = model["arch_name"]  # the label of a random-init model
    for dk, key in (("model.name_or_path", "name_or_path"), ("model.tokenizer", "tokenizer")):
        value = model[key]
        if value is None or dk in derived or (key == "tokenizer" and value == "byte"):
            continue
        local = _local_path(value, _base_dir(origins.get(dk, leaf)))
        if local is not None:
            model[key] = str(local)
        elif _looks_local(value) and not (key == "name_or_path" and model["init"] == "random"):
            raise ProfileError(where(dk), dk, f"not found: {value}",
                               f"relative paths are resolved from "
                               f"{_display(_base_dir(origins.get(dk, leaf)))}")
    if model["tokenizer"] is None:
        model["tokenizer"] = "byte" if model["init"] == "random" else model["name_or_path"]
        derived.append("model.tokenizer")

    # data
    if data["source"] != SYNTHETIC:
        value = data["source"]
        base = _base_dir(origins.get("data.source", leaf))
        file = _local_path(value, base)
        base_text = "the current folder" if str(origins.get("data.source")) == OVERRIDE \
            else f"the profile's folder {_display(base)}"
        if file is None:
            raise ProfileError(where("data.source"), "data.source", f"data file not found: {value}",
                               _missing_file_hint(value, base, base_text))
        if file.is_dir() or file.suffix.lower() not in (".json", ".jsonl"):
            raise ProfileError(where("data.source"), "data.source",
                               f"not a .json or .jsonl file: {value}",
                               f"give a JSON-lines file or \"{SYNTHETIC}\"")
        data["source"] = str(file)
    if data["name"] is None:
        data["name"] = SYNTHETIC if data["source"] == SYNTHETIC else Path(data["source"]).stem
        derived.append("data.name")
    if data["source"] == SYNTHETIC and data["num_samples"] == 0:
        data["num_samples"] = SYNTHETIC_DEFAULT_SAMPLES
        derived.append("data.num_samples")
    elif not explicit("data.num_samples"):
        derived.append("data.num_samples")

    # train
    if train["optimizer"] is None:
        train["optimizer"] = QLORA_DEFAULT_OPTIMIZER if method == "qlora" else "adamw_torch"
        derived.append("train.optimizer")
    if train["max_steps"] <= 0 and train["epochs"] <= 0:
        raise ProfileError(where("train.epochs"), "train.epochs",
                           f"must be > 0 when max_steps is not set, got {_num(train['epochs'])}",
                           "set epochs > 0 or max_steps > 0")

    # devices
    if devices["node_rank"] >= devices["nodes"]:
        dk = "devices.node_rank" if explicit("devices.node_rank") or not explicit("devices.nodes") \
            else "devices.nodes"
        raise ProfileError(where(dk), "devices.node_rank",
                           f"must be < nodes ({devices['nodes']}), got {devices['node_rank']}",
                           f"node_rank counts from 0, so at most {devices['nodes'] - 1} with {devices['nodes']} nodes")

    resolved["derived"] = sorted(derived)
    resolved["overrides"] = list(log)
    return resolved


# --------------------------------------------------------------------------------------------
# public API


def load_profile(
    name_or_path: str | os.PathLike[str],
    overrides: Iterable[str] | Mapping[str, Any] = (),
) -> dict[str, Any]:
    """Load, merge (``extends``), override and validate a profile; returns the resolved dict.

    ``name_or_path``: a profile name (see :func:`discover`) or a path to a .toml file.
    ``overrides``: ``["train.batch_size=8", "lr=1e-4"]`` (values are TOML literals, else text)
    or a dict ``{"train.batch_size": 8}`` (str values are parsed like the text form).
    """
    if isinstance(name_or_path, os.PathLike) or _looks_like_path(str(name_or_path)):
        path = Path(name_or_path).expanduser()
        if not path.exists():
            raise ProfileError(_display(path), None, "profile file not found",
                               "give a .toml file or a profile name; `fttui profiles` lists them")
        origin = _origin_of(path)
    else:
        ref = find_profile(str(name_or_path))
        path, origin = ref.path, ref.origin
    raw, origins = _load_chain(path)
    log: list[str] = []
    _apply(raw, origins, overrides, log)
    return _finalize(raw, origins, name=path.stem, source=str(path), origin=origin, leaf=path,
                     log=log)


def apply_overrides(
    resolved: Mapping[str, Any],
    overrides: Iterable[str] | Mapping[str, Any],
) -> dict[str, Any]:
    """Apply overrides to an already resolved profile and validate again; returns a new dict.

    Values derived from other keys (listed in ``resolved["derived"]``: the tokenizer, data name,
    qlora optimizer...) are derived again unless overridden themselves.
    """
    derived = set(resolved.get("derived", ()))
    source = str(resolved.get("source") or "")
    leaf: Any = Path(source) if source else None
    data: dict[str, Any] = {}
    for key, value in resolved.items():
        if key in META_KEYS or value is None:
            continue
        if key in SECTIONS and isinstance(value, dict):
            data[key] = {k: v for k, v in value.items()
                         if v is not None and f"{key}.{k}" not in derived}
        else:
            data[key] = value
    raw = _normalize(data, _display(leaf))
    origins = {_dotted(s, k): leaf for s, keys in raw.items() for k in keys}
    log = list(resolved.get("overrides", ()))
    _apply(raw, origins, overrides, log)
    return _finalize(raw, origins, name=str(resolved.get("name", "")), source=source,
                     origin=str(resolved.get("origin", "path")), leaf=leaf, log=log)


def profile_summary(resolved: Mapping[str, Any]) -> dict[str, Any]:
    """The figures ``fttui profiles`` shows for one resolved profile."""
    model, data = resolved["model"], resolved["data"]
    train, devices = resolved["train"], resolved["devices"]
    label = str(model["name_or_path"])
    if os.path.isabs(label):
        label = Path(label).name
    return {
        "name": resolved.get("name", ""),
        "description": resolved.get("description", ""),
        "model": label,
        "method": resolved["method"],
        "batch_size": train["batch_size"],
        "grad_accum": train["grad_accum"],
        "gpus": devices["gpus"],
        "nodes": devices["nodes"],
        "effective_batch": train["batch_size"] * train["grad_accum"]
        * (devices["gpus"] or devices["cpu_processes"]) * devices["nodes"],
        "max_seq_len": data["max_seq_len"],
        "dataset": data["name"],
        "source": resolved.get("source", ""),
        "origin": resolved.get("origin", ""),
    }
