"""Profiles from other tools' training configs: ``--from FILE.yaml`` (LLaMA-Factory, axolotl).

:func:`read_config` reads the YAML (PyYAML, imported here only), tells which tool wrote it and
maps it (:mod:`.llamafactory`, :mod:`.axolotl`) into :class:`~.common.Mapped`: profile data,
the keys that do not map (each with its reason) and notes. :func:`profile_toml` writes that as a
profile file (``fttui profiles --from``); :func:`load_config_profile` resolves it like a profile
file, ``--set`` overrides included (``fttui run/estimate/probe/sweep --from``). A key neither the
tool nor the Trainer knows, contradictory settings and a missing DeepSpeed JSON are one-line
:class:`~fttui.core.base.errors.ProfileError` naming the YAML and the key.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from fttui.core.base import bounded
from fttui.core.base.errors import ProfileError
from fttui.core.base.inert import inert
from fttui.core.profiles.discovery import check_name, display
from fttui.core.profiles.files import normalize
from fttui.core.profiles.foreign.axolotl import read_axolotl
from fttui.core.profiles.foreign.common import Mapped
from fttui.core.profiles.foreign.llamafactory import read_llamafactory
from fttui.core.profiles.overrides import apply_overrides_to
from fttui.core.profiles.resolve import _finalize
from fttui.core.profiles.schema import SCHEMA, TOP, dotted
from fttui.core.profiles.typed import ModelSettings, Profile
from fttui.core.profiles.values import toml_literal

__all__ = ["Mapped", "ORIGIN", "load_config_profile", "profile_toml", "read_config", "unmapped_line", "with_overrides"]

#: the ``origin`` of a profile read from another tool's config
ORIGIN = "yaml"

_TOOLS = {"LLaMA-Factory": read_llamafactory, "axolotl": read_axolotl}


def _tool(config: Mapping[str, Any]) -> str | None:
    if "model_name_or_path" in config or "finetuning_type" in config:
        return "LLaMA-Factory"
    if "base_model" in config:
        return "axolotl"
    return None


def read_config(path: str | os.PathLike[str]) -> Mapped:
    """Read and map a LLaMA-Factory or axolotl YAML (ProfileError, one line, when it cannot be)."""
    p = Path(path).expanduser()
    where = display(p)
    if not p.is_file():
        raise ProfileError(where, None, "config file not found", "give a LLaMA-Factory or axolotl .yaml file")
    check_name(p)  # the file's stem is the profile's name
    try:
        import yaml
    except ImportError:  # pragma: no cover - PyYAML is a dependency of fttui
        raise ProfileError(where, None, "reading YAML needs PyYAML", "pip install pyyaml") from None
    try:
        config = yaml.safe_load(bounded.read_text(p, bounded.MAX_CONFIG_BYTES))
        bounded.check_tree(config)  # an alias bomb, .inf
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileError(where, None, f"cannot read: {e}") from None
    except ValueError as e:
        raise ProfileError(where, None, str(e)) from None
    except RecursionError:
        raise ProfileError(where, None, "values nested too deeply; not a training config") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"line {mark.line + 1}: " if mark is not None else ""
        raise ProfileError(where, None, f"{at}not valid YAML ({getattr(e, 'problem', None) or e})") from None
    if not isinstance(config, dict):
        raise ProfileError(where, None, "not a training config (expected key: value lines)")
    tool = _tool(config)
    if tool is None:
        raise ProfileError(
            where,
            None,
            "not a LLaMA-Factory or axolotl training config",
            "LLaMA-Factory configs have model_name_or_path, axolotl configs base_model",
        )
    mapped = Mapped(tool=tool, path=p, config={str(k): v for k, v in config.items()})
    try:
        _TOOLS[tool](mapped)
    except (TypeError, ValueError) as e:  # a value of the wrong type (int("abc"), ...)
        raise ProfileError(where, None, f"a value of the wrong type: {e}") from None
    mapped.data.setdefault("description", f"from the {tool} config {p.name}")
    _stored_quantisation(mapped)
    return mapped


def _stored_quantisation(mapped: Mapped) -> None:
    """A note when the model's checkpoint (found on this machine) stores its weights quantised in
    a way the mapped method does not train (LLaMA-Factory's ``*_awq.yaml`` names an AWQ model and
    no quantisation key): the estimate and the run refuse it in one line, the mapping says so."""
    from fttui.core.models.prequant import refusal

    name = str((mapped.data.get("model") or {}).get("name_or_path") or "")
    beside = mapped.path.parent / name
    model = ModelSettings.from_partial(
        {"init": "pretrained", "name_or_path": str(beside) if name and beside.is_dir() else name}
    )
    stored = refusal(str(mapped.data.get("method")), model)
    if stored is not None:
        mapped.notes.append(f"{stored[0]}: `fttui estimate` and `fttui run` refuse it ({stored[1]})")


def load_config_profile(
    path: str | os.PathLike[str], overrides: Iterable[str] | Mapping[str, Any] = ()
) -> tuple[Profile, Mapped]:
    """The resolved profile of a LLaMA-Factory or axolotl config (checked like a profile file;
    relative paths are taken from the YAML's folder), and the mapping (for its unmapped keys)."""
    mapped = read_config(path)
    raw = normalize(mapped.data, mapped.where)
    origins = {dotted(s, k): mapped.path for s, keys in raw.items() for k in keys}
    log: list[str] = []
    apply_overrides_to(raw, origins, overrides, log)
    resolved = _finalize(
        raw, origins, name=mapped.path.stem, source=str(mapped.path), origin=ORIGIN, leaf=mapped.path, log=log
    )
    return Profile.from_dict(resolved), mapped


def with_overrides(mapped: Mapped, overrides: Iterable[str] | Mapping[str, Any]) -> Mapped:
    """``mapped`` with ``--set`` overrides applied to its profile data (checked as a profile's),
    what ``fttui profiles --from F --set devices.gpus=8`` prints; the overrides are listed in
    the notes, and the GPU-count note goes once the count is given."""
    items = list(overrides.items()) if isinstance(overrides, Mapping) else list(overrides)
    if not items:
        return mapped
    raw = normalize(mapped.data, mapped.where)
    log: list[str] = []
    apply_overrides_to(raw, {}, overrides, log)
    data = {
        k: v for section, values in raw.items() for k, v in (values.items() if section == TOP else [(section, values)])
    }
    notes = [
        n for n in mapped.notes if not (n == mapped.gpu_note and any(x.startswith(("devices.gpus=",)) for x in log))
    ]
    out = replace(mapped, data=data, notes=notes + [f"--set {x}" for x in log])
    return out


def unmapped_line(mapped: Mapped) -> str:
    """One line naming the keys that did not map (empty when all did)."""
    if not mapped.unmapped:
        return ""
    return (
        f"{mapped.where} ({mapped.tool}): not mapped: "
        + ", ".join(k for k, _, _ in mapped.unmapped)
        + " (`fttui profiles --from` says why)"
    )


def profile_toml(mapped: Mapped) -> str:
    """The mapped config as a profile file: the command that runs it, what did not map and why,
    the notes, then the keys in the schema's order."""
    stem = mapped.path.stem
    out = [
        f"# fttui run -p {stem}   (save this file as {stem}.toml in your profiles folder; "
        f"or run the YAML itself: fttui run --from {shlex.quote(str(mapped.path))})",
        f"# From the {mapped.tool} config {mapped.path.name} by `fttui profiles --from`.",
    ]
    if mapped.unmapped:
        out.append("# Not mapped (fttui has no such setting; the run does not follow them):")
        out += [f"#   {k} = {toml_literal(v)}: {why}" for k, v, why in mapped.unmapped]
    if mapped.notes:
        out.append("# Notes:")
        out += [f"#   {n}" for n in mapped.notes]
    out = [inert(line) for line in out]  # a comment stays one line, whatever a key, value or path holds
    out.append("")
    data = mapped.data
    for key in SCHEMA[TOP]:
        if key in data:
            out.append(f"{key} = {toml_literal(data[key])}")
    for section, fields in SCHEMA.items():
        if section == TOP or not isinstance(data.get(section), dict):
            continue
        out += ["", f"[{section}]"]
        out += [f"{k} = {toml_literal(v)}" for k in fields if k in data[section] for v in (data[section][k],)]
    return "\n".join(out) + "\n"
