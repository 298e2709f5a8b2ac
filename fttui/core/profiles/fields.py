"""The profile settings people change between runs, as the picker's fields: what the user typed
becomes dotted profile overrides (no I/O, no Rich, no Textual)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fttui.core.base.constants import METHODS

if TYPE_CHECKING:  # the app's first frame does without the typed profile
    from fttui.core.profiles.typed import Profile

# The settings people change between runs: (field id, dotted profile key, label).
OVERRIDE_FIELDS: list[tuple[str, str, str]] = [
    ("batch_size", "train.batch_size", "batch"),
    ("grad_accum", "train.grad_accum", "accum"),
    ("max_seq_len", "data.max_seq_len", "seq len"),
    ("gpus", "devices.gpus", "GPUs"),
    ("method", "method", "method"),
]


def profile_value(resolved: Profile, dotted: str) -> Any:
    """``resolved.train.batch_size`` for ``"train.batch_size"`` (None if absent)."""
    cur: Any = resolved
    for part in dotted.split("."):
        cur = getattr(cur, part, None)
    return cur


def field_values(resolved: Profile) -> dict[str, str]:
    """The override fields' current values in a resolved profile, as text."""
    out = {}
    for fid, dotted, _label in OVERRIDE_FIELDS:
        v = profile_value(resolved, dotted)
        out[fid] = "" if v is None else str(v)
    return out


def overrides_from_fields(resolved: Profile, values: Mapping[str, str]) -> dict[str, str]:
    """Dotted overrides (``{"train.batch_size": "16"}``) for the fields whose text differs from
    the resolved profile. Empty fields mean "as in the profile". Values stay text: the profile
    loader parses them (TOML literals) and reports bad ones as one-line errors."""
    base = field_values(resolved)
    out: dict[str, str] = {}
    for fid, dotted, _label in OVERRIDE_FIELDS:
        text = str(values.get(fid, "") or "").strip()
        if text and text != base.get(fid, ""):
            out[dotted] = text
    return out


def effective_batch(resolved: Profile) -> tuple[int, int, int, int]:
    """(micro batch, grad accumulation, processes, effective batch): see
    :meth:`~fttui.core.profiles.typed.Profile.effective_batch`."""
    return resolved.effective_batch()


__all__ = ["OVERRIDE_FIELDS", "METHODS", "profile_value", "field_values", "overrides_from_fields", "effective_batch"]
