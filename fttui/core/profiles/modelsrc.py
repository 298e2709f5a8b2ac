"""Resolution of where a profile's model architecture comes from (no torch, no network).

:func:`check_arch` refuses a ``model.arch`` that is neither an
:data:`~fttui.core.models.archs.ARCHS` entry nor a decoder ``model_type`` transformers knows.
:func:`attach_config` finds the model's own ``config.json`` (a local folder, or a hub id in the
local Hugging Face cache), records it as ``model.config`` (a derived value: re-derived when
``model.name_or_path`` changes) and refuses a model whose config disagrees with ``model.arch``:
a Mistral folder on a Llama-2 profile is a one-line error, never an estimate with Llama-2's
numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fttui.core.base.errors import ProfileError, did_you_mean
from fttui.core.models.archs import ARCHS, Arch
from fttui.core.models.hfconfig import ConfigReadError, causal_lm_types, find_config, read_config
from fttui.core.models.layouts import FAMILIES, LayoutError, layout
from fttui.core.models.numbers import config_numbers

__all__ = ["attach_config", "check_arch", "known_arch_text"]

#: numbers that must agree between a model's config.json and the ARCHS entry model.arch names
_SIZES = ("vocab", "hidden", "layers", "heads", "kv_heads", "head_dim", "dense_inter", "experts")


def known_arch_text() -> str:
    """What ``model.arch`` accepts, in one line."""
    types = causal_lm_types()
    more = (
        f"or any of the {len(types)} causal-LM model_types of the installed transformers"
        if types
        else "or a transformers model_type"
    )
    return (
        f"built-in: {', '.join(ARCHS)}; transformers model_types the estimator lays out exactly: "
        f"{', '.join(FAMILIES)}; {more}"
    )


def check_arch(arch: str | None, where: str) -> None:
    """A ``model.arch`` that names nothing known is a :class:`ProfileError` listing what is known."""
    if not arch or arch in ARCHS or arch in FAMILIES:
        return
    types = causal_lm_types()
    if arch in {a.model_type for a in ARCHS.values()} or arch in types:
        return
    near = did_you_mean(arch, [*ARCHS, *FAMILIES, *types])
    raise ProfileError(
        where, "model.arch", f"unknown architecture {arch!r}", (f"{near} " if near else "") + known_arch_text()
    )


def _config_type(path: str, where: str, key: str) -> tuple[str, dict[str, Any], bool]:
    """(model_type, numbers, remote): remote = the config names its own code (``auto_map``) for
    a model_type transformers does not build."""
    try:
        raw = read_config(path)
    except ConfigReadError as e:
        raise ProfileError(where, key, str(e), "point it at a model folder saved with save_pretrained") from None
    if not raw.get("model_type") and not isinstance(raw.get("text_config"), dict):
        return "", raw, False
    model_type, cfg = config_numbers(raw)
    return model_type, cfg, bool(raw.get("auto_map")) and not _native(model_type)


def _native(model_type: str) -> bool:
    """transformers builds this model_type itself (no remote code), as far as is known."""
    return model_type in FAMILIES or not causal_lm_types() or model_type in causal_lm_types()


def _disagreement(entry: Arch, model_type: str, cfg: dict[str, Any]) -> str | None:
    """The first size where a config of the entry's ``model_type`` differs from the entry."""
    try:
        mine, theirs = layout(model_type, cfg), layout(entry.model_type, entry.config_dict())
    except LayoutError:
        return None  # too few numbers to compare: the estimator reports what is missing
    for size in _SIZES:
        if getattr(mine, size) != getattr(theirs, size):
            return f"{size} {getattr(mine, size)} where {entry.name} has {getattr(theirs, size)}"
    return None


def attach_config(model: dict[str, Any], derived: list[str], where: Callable[[str], str]) -> None:
    """Set ``model.config`` to the config.json of ``model.name_or_path`` (a local folder or a
    cached hub id) when the profile gives none, and check it against ``model.arch``."""
    explicit = model["config"] is not None
    name = model["name_or_path"]
    if not explicit and name and "model.name_or_path" not in derived:
        found = find_config(str(name))
        if found is not None:
            model["config"] = str(found)
            derived.append("model.config")
    if model["config"] is None:
        return
    key = "model.config" if explicit else "model.name_or_path"
    model_type, cfg, remote = _config_type(model["config"], where(key), key)
    if not model_type:
        return  # a config without model_type takes model.arch (the worker requires one of them)
    entry = ARCHS.get(model["arch_name"] or "")
    what = model["config"] if explicit else name
    if remote and model["arch"] and entry is None and not explicit:
        # a remote-code model mapped onto a native model.arch (+ arch_config), as the ARCHS
        # entries map theirs: the arch's numbers stand
        model["config"] = None
        derived.remove("model.config")
        return
    if entry is not None:
        if model_type not in entry.own_model_types:
            _mismatch(what, model_type, f"{entry.name} ({entry.model_type})", where(key), key)
        if model_type != entry.model_type:
            # the remote-code original an entry maps: the entry's numbers stand
            if not explicit:
                model["config"] = None
                derived.remove("model.config")
            return
        differs = _disagreement(entry, model_type, cfg)
        if differs:
            raise ProfileError(
                where(key),
                key,
                f"{what} is not {entry.name}: its config.json has {differs}",
                f'set model.arch = "{model_type}" to take the model\'s own numbers, or point '
                f"{key} at a {entry.name} model",
            )
    elif model["arch"] and model["arch"] != model_type:
        _mismatch(what, model_type, str(model["arch"]), where(key), key)
    if model["init"] == "random" and not _native(model_type):
        raise ProfileError(
            where(key),
            key,
            f"{what}: model_type {model_type} is not a causal LM the installed "
            "transformers builds, so it cannot be random-initialised from its config",
            'use init = "pretrained" (with trust_remote_code if it needs its own code), or '
            "a model.arch entry that maps it (docs/architectures.md)",
        )


def _mismatch(what: Any, model_type: str, arch: str, file: str, key: str) -> None:
    maps = [a.name for a in ARCHS.values() if a.hub_model_type == model_type]
    alt = f'model.arch = "{maps[0]}"' if maps else f'model.arch = "{model_type}"'
    raise ProfileError(
        file,
        key,
        f"{what} is a {model_type} model (its config.json) but model.arch is {arch}",
        f"set {alt} or leave model.arch out: the model's config.json gives the numbers",
    )
