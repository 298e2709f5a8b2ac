"""The frozen values of a typed profile (:mod:`fttui.core.profiles.typed`): lists held as
tuples, tables as read-only mappings, and what the section dataclasses and the profile share
(:class:`FrozenRecord`: equality, hashing, conversion to the resolved dict). A profile and its
sections are read by attribute only (``prof.train.batch_size``): they are no mappings, so a
line of profile code always knows which shape it holds; the resolved dict exists at the edges
(``to_dict`` / ``from_dict``: TOML resolution, ``profile.json``)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import fields
from enum import Enum
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
    """The inverse of :func:`freeze` (a resolved dict holds lists, never tuples; a name of a
    registry, such as a ``Method``, its plain string)."""
    if isinstance(value, FrozenRecord):
        return value.to_dict()
    if isinstance(value, Enum):
        return value.value
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


class FrozenRecord:
    """A frozen dataclass of profile values (a section, the profile): equal to another object of
    its type with equal fields, hashable, and convertible to its part of the resolved dict. No
    access by key: its fields are its attributes."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenRecord):
            return type(self) is type(other) and all(getattr(self, n) == getattr(other, n) for n in names(self))
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        same = self.__eq__(other)
        return same if same is NotImplemented else not same

    def __hash__(self) -> int:
        return hash((type(self), *(getattr(self, n) for n in names(self))))

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError


__all__ = ["FrozenList", "FrozenRecord", "check_keys", "freeze", "names", "thaw"]
