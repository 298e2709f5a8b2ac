"""A model's own ``config.json``, found without network and without torch or transformers.

A model named by a local folder gives ``<folder>/config.json``; a hub id (``org/name``) gives the
``config.json`` of its snapshot in the local Hugging Face cache, laid out as huggingface_hub
writes it: ``<cache>/models--org--name/refs/main`` holds the commit whose
``snapshots/<commit>/`` is the model (:func:`cached_snapshot`). The cache folder follows
huggingface_hub's rules: ``HF_HUB_CACHE``, else ``HUGGINGFACE_HUB_CACHE``, else
``$HF_HOME/hub``, with ``HF_HOME`` defaulting to ``$XDG_CACHE_HOME/huggingface`` (or
``~/.cache/huggingface``).

:func:`causal_lm_types` lists the ``model_type`` values the installed transformers builds with
``AutoModelForCausalLM``, read from its source text (transformers is never imported here).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Any

__all__ = [
    "ConfigReadError",
    "cached_snapshot",
    "causal_lm_types",
    "download_command",
    "find_config",
    "hub_cache_dir",
    "is_hub_id",
    "read_config",
]

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


class ConfigReadError(ValueError):
    """A config.json that cannot be read (one line)."""


def hub_cache_dir() -> Path:
    """The folder huggingface_hub caches hub repos in (it need not exist)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.path.expandvars(os.path.expanduser(os.environ[var])))
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    return Path(os.path.expandvars(os.path.expanduser(home))) / "hub"


def is_hub_id(value: str) -> bool:
    """``org/name`` or ``name``: what may be a hub repo (not a path that exists locally)."""
    return bool(_HUB_ID.match(value)) and ".." not in value and not value.endswith((".json", ".toml"))


def cached_snapshot(repo_id: str, cache: Path | None = None) -> Path | None:
    """The snapshot folder of a hub model in the local cache: the commit ``refs/main`` names,
    else the newest snapshot holding a ``config.json``; None when the repo is not cached."""
    if not is_hub_id(repo_id):
        return None
    repo = (cache or hub_cache_dir()) / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    try:
        ref = (repo / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        ref = ""
    if ref and (snapshots / ref / "config.json").is_file():
        return snapshots / ref
    try:
        found = [p for p in snapshots.iterdir() if (p / "config.json").is_file()]
    except OSError:
        return None
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def find_config(name_or_path: str, cache: Path | None = None) -> Path | None:
    """The ``config.json`` of a local model folder (or a config.json file itself), or of a hub id
    in the local cache; None when there is none."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path / "config.json" if (path / "config.json").is_file() else None
    if path.is_file() and path.suffix == ".json":
        return path
    snap = cached_snapshot(name_or_path, cache)
    return snap / "config.json" if snap is not None else None


def read_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON object of a config.json; :class:`ConfigReadError` (one line) when it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise ConfigReadError(f"{path}: cannot be read ({e.strerror or e})") from None
    except ValueError as e:
        raise ConfigReadError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise ConfigReadError(f"{path}: not valid JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise ConfigReadError(f"{path}: not a JSON object")
    return data


def _version(dist: str) -> tuple[int, ...] | None:
    from importlib import metadata

    try:
        text = metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
    return tuple(int(p) for p in re.findall(r"\d+", text)[:2])


def download_command(repo_id: str) -> str:
    """The command that puts a hub model in the local cache with the installed huggingface_hub:
    ``hf download`` (huggingface_hub 0.34 and newer; 1.0 removed ``huggingface-cli``), else
    ``huggingface-cli download``."""
    v = _version("huggingface_hub")
    cli = "huggingface-cli" if v is not None and v < (0, 34) else "hf"
    return f"{cli} download {repo_id}"


@functools.lru_cache(maxsize=1)
def causal_lm_types() -> tuple[str, ...]:
    """The ``model_type`` values of ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` in the installed
    transformers (its source text, not imported); empty when transformers is not installed."""
    try:
        spec = importlib.util.find_spec("transformers")
    except (ImportError, ValueError):
        return ()
    if spec is None or not spec.submodule_search_locations:
        return ()
    src = Path(next(iter(spec.submodule_search_locations))) / "models" / "auto" / "modeling_auto.py"
    try:
        text = src.read_text(encoding="utf-8")
    except OSError:
        return ()
    start = text.find("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = OrderedDict(")
    if start < 0:
        return ()
    end = text.find("\n)\n", start)
    return tuple(dict.fromkeys(re.findall(r'^\s*\("([\w-]+)",', text[start:end], re.M)))
