"""Which cards a CUDA program started here sees: ``CUDA_VISIBLE_DEVICES`` resolved to NVML indices.

CUDA reads the variable as a comma-separated list and stops at the first entry it cannot use, so
``"2,x,3"`` shows card 2 only, ``""`` and ``"-1"`` show none. An entry is

- an index (``2``): the card NVML numbers so (out of range: invalid);
- a UUID (``GPU-8f3c2a71-...``), or its first characters when they name one card only;
- a MIG device: ``MIG-<uuid>`` (the MIG device's own UUID, drivers from R470) or
  ``MIG-GPU-<card uuid>/<gi>/<ci>`` (older drivers); it resolves to the parent card's index and
  the card is recorded as a MIG instance.

UUIDs are matched against the cards given (``GpuInfo.uuid``, ``GpuInfo.mig_uuids``); without
them a UUID or MIG entry cannot be resolved and the answer is ``None`` (every card), as it is
when the variable is unset. A card named twice counts once. Only stdlib.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from fttui.monitor.snapshots import GpuInfo, GpuSnapshot

__all__ = ["CUDA_VISIBLE_ENV", "Card", "Visible", "cards_run_first", "resolve_visible", "run_cards", "visible_indices"]

CUDA_VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class Visible:
    """``indices``: NVML indices in CUDA order, ``None`` for every card (unset, or named by a UUID
    that could not be matched for lack of UUIDs); ``mig``: those of them named through a MIG
    device."""

    indices: tuple[int, ...] | None
    mig: tuple[int, ...] = ()


class _Unresolvable(Exception):
    """A UUID or MIG entry with nothing to match it against."""


def _by_prefix(prefix: str, names: Sequence[tuple[int, str]]) -> int | None:
    """The index of the one name starting with ``prefix`` (case-insensitive); ``None`` when none
    or several do (CUDA refuses an ambiguous prefix)."""
    p = prefix.lower()
    hits = {i for i, name in names if name.lower().startswith(p)}
    return hits.pop() if len(hits) == 1 else None


def _entry(part: str, gpus: Sequence[GpuInfo]) -> tuple[int, bool] | None:
    """(index, is MIG) for one entry; ``None`` when CUDA would stop there."""
    low = part.lower()
    if part.isdigit():  # int() would accept "+1", " 1" and "1_0"; CUDA takes digits only
        n = int(part)
        if gpus and n not in {g.index for g in gpus}:
            return None
        return n, False
    if low.startswith("mig-gpu-"):  # MIG-GPU-<card uuid>/<gi>/<ci>
        cards = [(g.index, g.uuid) for g in gpus if g.uuid]
        if not cards:
            raise _Unresolvable(part)
        uuid, _, rest = part[len("mig-") :].partition("/")
        if not rest or len(uuid) <= len("gpu-"):
            return None
        i = _by_prefix(uuid, cards)
        return None if i is None else (i, True)
    if low.startswith("mig-"):  # MIG-<MIG device uuid>
        migs = [(g.index, u) for g in gpus for u in g.mig_uuids]
        if not migs:
            raise _Unresolvable(part)
        i = _by_prefix(part, migs) if len(part) > len("mig-") else None
        return None if i is None else (i, True)
    if low.startswith("gpu-"):
        cards = [(g.index, g.uuid) for g in gpus if g.uuid]
        if not cards:
            raise _Unresolvable(part)
        i = _by_prefix(part, cards) if len(part) > len("gpu-") else None
        return None if i is None else (i, False)
    return None


def resolve_visible(value: str | None = None, gpus: Sequence[GpuInfo] = ()) -> Visible:
    """``CUDA_VISIBLE_DEVICES`` (``value``, default: this process's environment) as ``Visible``."""
    if value is None:
        value = os.environ.get(CUDA_VISIBLE_ENV)
        if value is None:
            return Visible(None)
    out: list[int] = []
    mig: list[int] = []
    for part in value.split(","):
        try:
            got = _entry(part.strip(), gpus)
        except _Unresolvable:
            return Visible(None)
        if got is None:
            break
        i, is_mig = got
        if i not in out:
            out.append(i)
            if is_mig:
                mig.append(i)
    return Visible(tuple(out), tuple(mig))


def visible_indices(value: str | None = None, gpus: Sequence[GpuInfo] = ()) -> list[int] | None:
    """The NVML indices ``CUDA_VISIBLE_DEVICES`` (or ``value``) names, in CUDA order; ``None`` when
    it is unset (every card visible) or names a UUID none of ``gpus`` can match."""
    idx = resolve_visible(value, gpus).indices
    return None if idx is None else list(idx)


@dataclass(frozen=True)
class Card:
    """One card for a view: ``run`` when the run may use it, ``mig`` when it is through MIG."""

    gpu: GpuInfo
    run: bool
    mig: bool = False


def cards_run_first(snap: GpuSnapshot | None) -> list[Card]:
    """Every card of ``snap``: the visible ones first in CUDA order (``run=True``), then the others
    in NVML order. Every card is the run's when ``snap.visible`` is ``None``."""
    if snap is None or not snap.available:
        return []
    if snap.visible is None:
        return [Card(g, True) for g in snap.gpus]
    by_index = {g.index: g for g in snap.gpus}
    first = [Card(by_index[i], True, i in snap.mig) for i in snap.visible if i in by_index]
    rest = [Card(g, False) for g in snap.gpus if g.index not in snap.visible]
    return first + rest


def run_cards(snap: GpuSnapshot | None) -> list[GpuInfo]:
    """The cards a CUDA program of this snapshot's process sees, in CUDA order (device 0 first)."""
    return [c.gpu for c in cards_run_first(snap) if c.run]
