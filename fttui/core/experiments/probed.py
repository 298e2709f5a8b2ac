"""The probe's stored answer for a setup: the largest micro batch (or sequence length) that
`fttui probe` found to fit the same setup, read from the results store's trial rows. The launch
records it beside the estimate's terms (the ``forecast`` event's ``memory``, ``probe``) so that
an out of memory's explanation can name it as the change that fits
(:mod:`fttui.core.run.row.oomexplain`).

The same setup: the trial rows (``kind`` ``probe``) of the same model, method, sharding,
precision, gradient checkpointing, world size and limits, probing ``batch_size`` at the run's
``max_seq_len`` or ``max_seq_len`` at its micro batch; the latest probe that has such rows
answers, from its clean trials only (a trial that followed an out of memory in its process is a
guide, not an answer). Pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from fttui.core.profiles.typed import Profile
from fttui.core.run.row.row_figures import stated_sharding

__all__ = ["probe_answer"]


def _same(row: Mapping[str, Any], profile: Profile, param: str) -> bool:
    limits = row.get("limits")
    if isinstance(limits, str):
        try:
            limits = json.loads(limits)
        except ValueError:
            return False
    method, sharding = stated_sharding(profile)  # as the trial rows state them
    want = {
        "model": profile.model.name_or_path or profile.model.arch,
        "method": method,
        "sharding": sharding,
        "precision": profile.train.precision,
        "world_size": profile.world_size(),
    }
    if any(row.get(k) != v for k, v in want.items()):
        return False
    if bool(row.get("gradient_checkpointing")) != bool(profile.train.gradient_checkpointing):
        return False
    if not isinstance(limits, Mapping) and limits is not None:
        return False
    if {k: v for k, v in (limits or {}).items() if v} != {k: v for k, v in profile.limits.to_dict().items() if v}:
        return False  # the probe ran under another cap
    other = (
        ("max_seq_len", profile.data.max_seq_len) if param == "batch_size" else ("batch_size", profile.train.batch_size)
    )
    return row.get(other[0]) == other[1]


def probe_answer(profile: Profile, rows: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """``{"param", "largest_fit", "smallest_oom", "probe_id"}`` of the latest probe of this setup
    (``largest_fit`` ``None`` when nothing fitted), or ``None`` when no probe of it is stored."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        param = r.get("param")
        if r.get("kind") != "probe" or param not in ("batch_size", "max_seq_len") or r.get("clean") in (0, False):
            continue
        if _same(r, profile, str(param)):
            groups.setdefault((str(r.get("group_id") or ""), str(param)), []).append(r)
    if not groups:
        return None
    (probe_id, param), trials = max(groups.items(), key=lambda kv: max(str(r.get("ended_at") or "") for r in kv[1]))
    fits = [int(r[param]) for r in trials if r.get("status") == "fit" and isinstance(r.get(param), int)]
    ooms = [int(r[param]) for r in trials if r.get("status") == "oom" and isinstance(r.get(param), int)]
    return {
        "param": param,
        "largest_fit": max(fits, default=None),
        "smallest_oom": min(ooms, default=None),
        "probe_id": probe_id or None,
    }
