"""Resolving a profile: checked values to the complete dict a run reads.

    read TOML -> check keys/types per file -> follow ``extends`` (merge key by key)
    -> apply ``--set`` overrides -> fill defaults, resolve paths and derived values -> cross checks

:func:`load_profile` does all of it for a profile name or file; :func:`apply_overrides` applies
more overrides to an already resolved profile (derived values are derived again). Both return
the typed, frozen :class:`~fttui.core.profiles.typed.Profile`; its dict (``to_dict()``, what
``profile.json`` holds) has every schema key plus the meta keys ``name``, ``source``,
``origin``, ``derived`` and ``overrides``; every failure is a
:class:`~fttui.core.base.errors.ProfileError` naming the file and the key.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fttui.core.base import shardings
from fttui.core.base.errors import ProfileError, did_you_mean
from fttui.core.models.archs import ARCHS
from fttui.core.profiles.discovery import check_name, display, find_profile, looks_like_path, origin_of, safe_resolve
from fttui.core.profiles.files import load_chain, normalize
from fttui.core.profiles.modelsrc import attach_config, check_arch
from fttui.core.profiles.overrides import apply_overrides_to
from fttui.core.profiles.schema import (
    META_KEYS,
    OVERRIDE,
    SCHEMA,
    SECTIONS,
    SYNTHETIC,
    SYNTHETIC_DEFAULT_SAMPLES,
    TOP,
    default_optimizer,
    dotted,
)
from fttui.core.profiles.typed import Profile
from fttui.core.profiles.values import num


def _base_dir(origin: Any) -> Path:
    if origin is None or str(origin) == OVERRIDE:
        return Path.cwd()
    return Path(origin).parent


def _local_path(value: str, base: Path) -> Path | None:
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = base / path
    return safe_resolve(path) if path.exists() else None


def _looks_local(value: str) -> bool:
    return value.startswith(("/", "./", "../", "~")) or value in (".", "..")


def _missing_file_hint(value: str, base: Path, where: str) -> str:
    if not looks_like_path(value) and not value.endswith(".json"):
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
    return f'relative paths are resolved from {where}; use "{SYNTHETIC}" for generated data'


def _finalize(
    raw: dict, origins: dict, *, name: str, source: str, origin: str, leaf: Any, log: list[str]
) -> dict[str, Any]:
    def where(dk: str) -> str:
        return display(origins.get(dk, leaf))

    def explicit(dk: str) -> bool:
        return dk in origins

    resolved: dict[str, Any] = {"name": name, "source": source, "origin": origin}
    for section, fields in SCHEMA.items():
        given = raw.get(section, {})
        values = {k: copy.deepcopy(given[k]) if k in given else copy.deepcopy(f.default) for k, f in fields.items()}
        if section == TOP:
            resolved.update(values)
        else:
            resolved[section] = values
    derived: list[str] = []
    model, data, train, devices = (resolved[s] for s in ("model", "data", "train", "devices"))
    command = resolved["command"]
    if command["cwd"] is not None:
        folder = _local_path(command["cwd"], _base_dir(origins.get("command.cwd", leaf)))
        if folder is None or not folder.is_dir():
            raise ProfileError(
                where("command.cwd"),
                "command.cwd",
                f"folder not found: {command['cwd']}",
                f"relative paths are resolved from {display(_base_dir(origins.get('command.cwd', leaf)))}",
            )
        command["cwd"] = str(folder)
    _resolve_sharding(resolved, lambda dk: where(dk if explicit(dk) or dk != "sharding" else "method"))
    method = resolved["method"]

    # model
    if model["config"] is not None:
        cfg = _local_path(model["config"], _base_dir(origins.get("model.config", leaf)))
        if cfg is not None and cfg.is_dir():
            cfg = cfg / "config.json" if (cfg / "config.json").is_file() else None
        if cfg is None:
            raise ProfileError(
                where("model.config"),
                "model.config",
                f"config file not found: {model['config']}",
                f"relative paths are resolved from {display(_base_dir(origins.get('model.config', leaf)))}",
            )
        model["config"] = str(cfg)
    check_arch(model["arch"], where("model.arch"))
    if (
        model["init"] != "random"
        and (model["name_or_path"] is None or not model["name_or_path"].strip())
        and command["argv"] is None
    ):  # a command brings its own model
        raise ProfileError(
            display(leaf),
            "model.name_or_path",
            "required",
            'set a hub id like "gpt2" or a local model folder, or use init = "random" with arch',
        )
    # model.arch may name an fttui.core.models.archs entry ("baichuan2-7b"): it becomes the entry's
    # transformers model_type, arch_config gets the entry's numbers (the profile's keys win) and
    # arch_name keeps the entry. Re-resolving (apply_overrides) keeps it, and drops the numbers
    # of a previous entry that another arch replaces.
    entry, previous = ARCHS.get(model["arch"] or ""), ARCHS.get(model["arch_name"] or "")
    if entry is not None:
        given = {
            k: v
            for k, v in model["arch_config"].items()
            if previous in (None, entry) or (k, v) not in previous.config.items()
        }
        model.update(arch=entry.model_type, arch_name=entry.name, arch_config={**entry.config_dict(), **given})
    elif previous is None or model["arch"] != previous.model_type:
        model["arch_name"] = None
    for dk, key in (("model.name_or_path", "name_or_path"), ("model.tokenizer", "tokenizer")):
        value = model[key]
        if value is None or dk in derived or (key == "tokenizer" and value == "byte"):
            continue
        local = _local_path(value, _base_dir(origins.get(dk, leaf)))
        if local is not None:
            model[key] = str(local)
        elif _looks_local(value) and not (key == "name_or_path" and model["init"] == "random"):
            raise ProfileError(
                where(dk),
                dk,
                f"not found: {value}",
                f"relative paths are resolved from {display(_base_dir(origins.get(dk, leaf)))}",
            )
    # the model's own config.json (a local folder or a cached hub id) -> model.config, checked
    # against model.arch
    attach_config(model, derived, where)
    if model["init"] == "random":
        if not model["arch"] and not model["config"]:
            raise ProfileError(
                where("model.init"),
                "model.arch",
                'init = "random" needs model.arch, model.config or a model folder '
                "(or cached hub id) as model.name_or_path",
                'e.g. arch = "llama" with an [model.arch_config] table',
            )
        if model["name_or_path"] is None:
            # the label of a random-init model
            model["name_or_path"] = model["arch_name"] or model["arch"] or Path(model["config"]).parent.name
            derived.append("model.name_or_path")
    if model["tokenizer"] is None:
        model["tokenizer"] = "byte" if model["init"] == "random" else model["name_or_path"]
        derived.append("model.tokenizer")

    # data
    if data["source"] != SYNTHETIC:
        value = data["source"]
        base = _base_dir(origins.get("data.source", leaf))
        file = _local_path(value, base)
        base_text = (
            "the current folder"
            if str(origins.get("data.source")) == OVERRIDE
            else f"the profile's folder {display(base)}"
        )
        if file is None:
            raise ProfileError(
                where("data.source"),
                "data.source",
                f"data file not found: {value}",
                _missing_file_hint(value, base, base_text),
            )
        if file.is_dir() or file.suffix.lower() not in (".json", ".jsonl"):
            raise ProfileError(
                where("data.source"),
                "data.source",
                f"not a .json or .jsonl file: {value}",
                f'give a JSON-lines file or "{SYNTHETIC}"',
            )
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
        train["optimizer"] = default_optimizer(method, resolved["sharding"])
        derived.append("train.optimizer")
    kind = shardings.get(resolved["sharding"])
    if shardings.bnb_optimizer(train["optimizer"]) and not kind.steps_plain_tensors:
        raise ProfileError(
            where("train.optimizer"),
            "train.optimizer",
            f"{train['optimizer']} is a bitsandbytes optimizer, which cannot step the sharded "
            f"(DTensor) parameters of sharding {kind}",
            f'use train.optimizer = "adamw_torch" (the default under {kind}), or sharding zero3',
        )
    if train["max_steps"] <= 0 and train["epochs"] <= 0:
        raise ProfileError(
            where("train.epochs"),
            "train.epochs",
            f"must be > 0 when max_steps is not set, got {num(train['epochs'])}",
            "set epochs > 0 or max_steps > 0",
        )

    # devices
    if devices["node_rank"] >= devices["nodes"]:
        dk = "devices.node_rank" if explicit("devices.node_rank") or not explicit("devices.nodes") else "devices.nodes"
        raise ProfileError(
            where(dk),
            "devices.node_rank",
            f"must be < nodes ({devices['nodes']}), got {devices['node_rank']}",
            f"node_rank counts from 0, so at most {devices['nodes'] - 1} with {devices['nodes']} nodes",
        )

    resolved["derived"] = sorted(derived)
    resolved["overrides"] = list(log)
    return resolved


def _resolve_sharding(resolved: dict[str, Any], where: Any) -> None:
    """A legacy method (``full-zero3-offload``) is method ``full`` under its sharding kind (a
    sharding given explicitly, other than none, wins); then the pair must be one the libraries
    run (the kind's ``methods``, :mod:`fttui.core.base.shardings`), and an offloading ZeRO kind
    must offload something."""
    resolved["method"], resolved["sharding"] = shardings.of(resolved["method"], resolved["sharding"])
    method, kind = resolved["method"], shardings.get(resolved["sharding"])
    if method not in kind.methods:
        raise ProfileError(
            where("sharding"),
            "sharding",
            f"method {method} cannot run with sharding {kind}",
            f"sharding {kind} runs {', '.join(kind.methods)}; "
            f"method {method} runs with sharding {', '.join(shardings.runs_with(method))} (docs/launchers.md)",
        )
    ds = resolved["deepspeed"]
    if kind.offload and kind.deepspeed:
        moved = ds["offload_optimizer"] or (kind.zero3 and ds["offload_params"])
        if not moved:
            what = (
                "deepspeed.offload_optimizer and deepspeed.offload_params are both false"
                if kind.zero3
                else "deepspeed.offload_optimizer is false"
            )
            raise ProfileError(
                where("deepspeed.offload_optimizer"),
                "deepspeed.offload_optimizer",
                f"sharding {kind} offloads nothing: {what}",
                f'use sharding = "{kind.without_offload()}", or set offload_optimizer = true',
            )


def load_profile(
    name_or_path: str | os.PathLike[str],
    overrides: Iterable[str] | Mapping[str, Any] = (),
) -> Profile:
    """Load, merge (``extends``), override and validate a profile; returns the resolved,
    typed, frozen :class:`~fttui.core.profiles.typed.Profile` (``.to_dict()`` is the resolved
    dict that ``profile.json`` holds).

    ``name_or_path``: a profile name (see :func:`discover`) or a path to a .toml file.
    ``overrides``: ``["train.batch_size=8", "lr=1e-4"]`` (values are TOML literals, else text)
    or a dict ``{"train.batch_size": 8}`` (str values are parsed like the text form).
    """
    if isinstance(name_or_path, os.PathLike) or looks_like_path(str(name_or_path)):
        path = Path(name_or_path).expanduser()
        if not path.exists():
            raise ProfileError(
                display(path),
                None,
                "profile file not found",
                "give a .toml file or a profile name; `fttui profiles` lists them",
            )
        origin = origin_of(path)
    else:
        ref = find_profile(str(name_or_path))
        path, origin = ref.path, ref.origin
    check_name(path)
    raw, origins = load_chain(path)
    log: list[str] = []
    apply_overrides_to(raw, origins, overrides, log)
    return Profile.from_dict(
        _finalize(raw, origins, name=path.stem, source=str(path), origin=origin, leaf=path, log=log)
    )


def apply_overrides(
    resolved: Profile,
    overrides: Iterable[str] | Mapping[str, Any],
) -> Profile:
    """Apply overrides to an already resolved profile and validate again; returns a new Profile.

    Values derived from other keys (listed in ``resolved.derived``: the tokenizer, data name,
    qlora optimizer...) are derived again unless overridden themselves.
    """
    derived = set(resolved.derived)
    source = str(resolved.source or "")
    leaf: Any = Path(source) if source else None
    data: dict[str, Any] = {}
    for key, value in resolved.to_dict().items():  # resolved again from its dict, as a file is
        if key in META_KEYS or value is None:
            continue
        if key in SECTIONS and isinstance(value, dict):
            data[key] = {k: v for k, v in value.items() if v is not None and f"{key}.{k}" not in derived}
        else:
            data[key] = value
    raw = normalize(data, display(leaf))
    origins = {dotted(s, k): leaf for s, keys in raw.items() for k in keys}
    log = list(resolved.overrides)
    apply_overrides_to(raw, origins, overrides, log)
    return Profile.from_dict(
        _finalize(
            raw,
            origins,
            name=str(resolved.name),
            source=source,
            origin=str(resolved.origin),
            leaf=leaf,
            log=log,
        )
    )


__all__ = ["apply_overrides", "load_profile"]
