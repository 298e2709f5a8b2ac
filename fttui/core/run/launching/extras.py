"""Which optional part of fttui a run needs (the extras of ``pyproject.toml``), checked before
launch: the app, the results and the estimate need no training stack, so an installation without
``[train]`` is valid until a run is launched on this machine.

Checks look for the packages (``importlib.util.find_spec``) without importing them: the check
costs milliseconds and never loads torch.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from fttui.core.base import methods, shardings
from fttui.core.base.errors import FttuiError
from fttui.core.models.prequant import PREQUANT_METHODS

#: extra -> the import names it provides.
EXTRAS: dict[str, tuple[str, ...]] = {
    "train": ("torch", "transformers", "peft", "accelerate"),
    **{k.extra: k.packages for k in methods.KINDS.values() if k.extra},  # the k-bit methods' extra
    # GPTQ / AWQ checkpoints trained as stored: transformers' GPTQ loader needs optimum, both
    # loaders GPT-QModel's kernels (and peft finds GPT-QModel only beside optimum)
    "gptq": ("gptqmodel", "optimum"),
    **{k.extra: k.packages for k in shardings.KINDS.values() if k.extra},  # the sharding kinds' extras
}


class MissingExtraError(FttuiError):
    """A run needs packages of an extra that is not installed."""


def needed_extras(method: str, sharding: str | None = None, *, prequant: str | None = None) -> list[str]:
    """The extras a run of ``method`` under ``sharding`` (none when not given) needs on the
    machine that trains; ``prequant``: the stored quantisation of its checkpoint (``gptq``,
    ``awq``: :func:`fttui.core.models.prequant.checkpoint_quant`), when it has one."""
    out = ["train"]
    entry = shardings.method_of(method)
    if entry is not None and entry.extra:
        out.append(entry.extra)
    if prequant in PREQUANT_METHODS:
        out.append("gptq")
    kind = shardings.find(shardings.of(method, sharding)[1])
    if kind is not None and kind.extra and kind.extra not in out:
        out.append(kind.extra)
    return out


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def uninstalled_shardings(installed: Callable[[str], bool] | None = None) -> dict[str, str]:
    """The sharding kinds this installation cannot run (their extra's packages are missing), each
    with the words that say why and what to install."""
    installed = installed or _installed
    out = {}
    for kind in shardings.KINDS.values():
        missing = [p for p in kind.packages if not installed(p)]
        if missing:
            out[kind.name] = f"{', '.join(missing)} not installed: pip install 'fttui[{kind.extra}]'"
    return out


def missing_extra(
    method: str,
    sharding: str | None = None,
    *,
    prequant: str | None = None,
    installed: Callable[[str], bool] | None = None,
) -> tuple[str, list[str]] | None:
    """The first extra the run needs whose packages are not all installed, with those packages."""
    installed = installed or _installed
    for extra in needed_extras(method, sharding, prequant=prequant):
        missing = [p for p in EXTRAS[extra] if not installed(p)]
        if missing:
            return extra, missing
    return None


def check_extras(
    method: str,
    sharding: str | None = None,
    *,
    prequant: str | None = None,
    installed: Callable[[str], bool] | None = None,
) -> None:
    """Raise :class:`MissingExtraError` naming the extra to install when a package is missing."""
    found = missing_extra(method, sharding, prequant=prequant, installed=installed)
    if found:
        extra, missing = found
        what = f"method {method}" + (
            f" with sharding {sharding}" if (shardings.find(sharding) or shardings.NONE).sharded else ""
        )
        raise MissingExtraError(
            f"{what} needs fttui[{extra}] ({', '.join(missing)} not installed): pip install 'fttui[{extra}]'"
        )


__all__ = ["EXTRAS", "MissingExtraError", "needed_extras", "missing_extra", "check_extras", "uninstalled_shardings"]
