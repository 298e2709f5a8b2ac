"""The frozen values of a typed profile (:mod:`fttui.core.profiles.typed`): lists held as
tuples, tables as read-only mappings, and the read access by key that makes a section or the
profile read as the resolved dict does (``prof["train"]["batch_size"]``, ``.get``, ``in``), for
code and tests written against the dict."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from collections.abc import Mapping as MappingABC
from dataclasses import fields
from types import MappingProxyType
from typing import Any


class FrozenList(tuple):
    """A list of the resolved dict, held as a tuple; equal to the list it was too (code and
    tests written against the dict compare it with one)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return tuple.__eq__(self, tuple(other)) if isinstance(other, list) else tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__


def freeze(value: Any) -> Any:
    """Lists as tuples and tables as read-only mappings, all the way down."""
    if isinstance(value, (list, tuple)):
        return FrozenList(freeze(v) for v in value)
    if isinstance(value, dict):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    return value


def thaw(value: Any) -> Any:
    """The inverse of :func:`freeze` (a resolved dict holds lists, never tuples)."""
    if isinstance(value, Readable):
        return value.to_dict()
    if isinstance(value, (tuple, list)):
        return [thaw(v) for v in value]
    if isinstance(value, (MappingProxyType, dict)):
        return {k: thaw(v) for k, v in value.items()}
    return value


def names(cls: Any) -> list[str]:
    return list(_fieldnames(cls if isinstance(cls, type) else type(cls)))


@functools.cache
def _fieldnames(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def check_keys(cls: Any, values: Mapping[str, Any], where: str) -> None:
    keys = names(cls)
    missing = [n for n in keys if n not in values]
    unknown = [k for k in values if k not in keys]
    if missing or unknown:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unknown {', '.join(map(str, unknown))}"] if unknown else []
        )
        raise ValueError(f"not a resolved profile: {where}: " + "; ".join(parts))


class Readable:
    """Read access by key, as the resolved dict gives it (``prof["train"]["batch_size"]``,
    ``.get``, ``in``, ``{**prof}``), so that code still written against the dict reads the
    typed object too; the values are the frozen ones (tuples, read-only mappings). Equal to
    another object of its type with equal fields, and to a mapping equal to its ``to_dict()``."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Readable):
            return type(self) is type(other) and all(getattr(self, n) == getattr(other, n) for n in names(self))
        if isinstance(other, MappingABC):
            return self.to_dict() == {k: thaw(v) for k, v in other.items()}
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        same = self.__eq__(other)
        return same if same is NotImplemented else not same

    def __hash__(self) -> int:
        return hash((type(self), *(getattr(self, n) for n in names(self))))

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def __getitem__(self, key: str) -> Any:
        if key not in names(self):
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in names(self) else default

    def __contains__(self, key: object) -> bool:
        return key in names(self)

    def __iter__(self) -> Iterator[str]:
        return iter(names(self))

    def __len__(self) -> int:
        return len(names(self))

    def keys(self) -> list[str]:
        return names(self)

    def items(self) -> list[tuple[str, Any]]:
        return [(n, getattr(self, n)) for n in names(self)]

    def values(self) -> list[Any]:
        return [getattr(self, n) for n in names(self)]


MappingABC.register(Readable)  # isinstance(prof, Mapping): it reads as the resolved dict does


__all__ = ["FrozenList", "Readable", "check_keys", "freeze", "names", "thaw"]
