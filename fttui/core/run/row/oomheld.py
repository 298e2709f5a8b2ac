"""What held a card's memory at its out of memory: the allocator's snapshot summarised, side by
side with the estimate's terms (the row's ``oom_held``).

Reads ``memory_snapshot.pickle`` and ``memory_tensors.json`` (:mod:`fttui.core.run.files.memsnap`,
written by the worker at a CUDA out of memory, :mod:`fttui.worker.allochist`). Every live block
(``state`` ``active_allocated`` or ``active_awaiting_free``) is classed, first rule that holds:

1. tensor identity: a parameter's, gradient's or optimizer state's storage starts inside the
   block: that tensor's term (``weights``, ``gradients``, ``optimizer_states``, the LoRA term);
2. its frames (the stack that allocated it, innermost first): a frame of the optimizer's step
   (``torch/optim/``, a ``step`` in an optimizer file) is ``step_temporaries``; a frame of the
   autograd engine (``torch/autograd/``, a ``backward``, C++ ``autograd::Engine``) is
   ``backward`` (activation gradients and the backward's temporaries); a module's ``forward``
   (``torch/nn/modules/``, ``transformers/models/``, ``peft/tuners/``) is ``activations``;
3. frames none of these name: ``other``; no frames (allocated while the history was off):
   ``unrecorded``.

The estimate's activations (scaled to the micro batch and longest sequence that ran, without the
allocator's share: the snapshot counts blocks, not the cache) stand beside ``activations`` plus
``backward``. An allocation site is the innermost frame outside torch's own files (else the
innermost Python frame, else the innermost frame's name), named by file name, line and function.
Pure, stdlib only.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fttui.core.base.event_records import Event
from fttui.core.base.units import fmt_bytes
from fttui.core.run.files.memsnap import TensorRanges, read_snapshot, read_tensor_ranges
from fttui.core.run.files.rundir import RunDir
from fttui.core.run.row.oomexplain import TERM_WORDS, activations_at, forecast_memory, oom_error

__all__ = ["Held", "summarise", "frame_class", "site_of", "held_text", "oom_held", "LIVE", "CATEGORY_WORDS"]

LIVE = ("active_allocated", "active_awaiting_free")
#: the categories in words, in the order a sentence lists them
CATEGORY_WORDS = {
    **{k: v for k, v in TERM_WORDS.items() if k in ("weights", "lora", "gradients", "optimizer_states")},
    "activations": "activations",
    "backward": "the backward's tensors",
    "step_temporaries": TERM_WORDS["step_temporaries"],
    "other": "other allocations",
    "unrecorded": "allocations made while the history was off",
}
_TOP_SITES = 5


@dataclass(frozen=True)
class Held:
    """A snapshot summarised: live bytes by category, the largest allocation sites
    (``(site, category, bytes, blocks)``), the reserved bytes and the request that failed."""

    by_category: dict[str, int]
    sites: tuple[tuple[str, str, int, int], ...]
    live: int
    reserved: int
    oom_request: int | None = None
    oom_free: int | None = None
    classed_by_identity: int = 0
    notes: tuple[str, ...] = field(default=())


def _frames(raw: Any) -> list[tuple[str, str, int]]:
    out = []
    for f in raw if isinstance(raw, list) else ():
        if isinstance(f, Mapping):
            line = f.get("line")
            out.append((str(f.get("filename") or ""), str(f.get("name") or ""), line if isinstance(line, int) else 0))
    return out


def _norm(path: str) -> str:
    return path.replace("\\", "/")


def frame_class(frames: Iterable[tuple[str, str, int]]) -> str | None:
    """The category a block's frames give (rule 2 of the module's list), ``None`` for none."""
    pairs = [(_norm(fn), nm) for fn, nm, _ in frames]
    if any("/torch/optim/" in fn or (nm == "step" and "optim" in fn.lower()) for fn, nm in pairs):
        return "step_temporaries"
    if any(
        "/torch/autograd/" in fn or nm in ("backward", "_engine_run_backward") or "autograd::Engine" in nm
        for fn, nm in pairs
    ):
        return "backward"
    if any(
        nm == "forward" or any(k in fn for k in ("/torch/nn/modules/", "/transformers/models/", "/peft/tuners/"))
        for fn, nm in pairs
    ):
        return "activations"
    return None


def site_of(frames: list[tuple[str, str, int]]) -> str:
    """The allocation site: ``file.py:LINE name`` of the innermost frame outside torch (else the
    innermost Python frame, else the innermost C++ frame past ATen's and c10's)."""
    py = [f for f in frames if f[0].endswith(".py")]
    own = [f for f in py if "/torch/" not in _norm(f[0])]
    cxx = [f for f in frames if not f[1].startswith(("at::", "c10::", "??"))]  # past the allocation itself
    pick = own[0] if own else py[0] if py else cxx[0] if cxx else frames[0] if frames else None
    if pick is None:
        return "(no frames)"
    fn, nm, line = pick
    return f"{os.path.basename(fn)}:{line} {nm}" if fn.endswith(".py") else (nm or "?")[:80]


def summarise(snapshot: Mapping[str, Any], tensors: TensorRanges | None) -> Held:
    """The snapshot's live blocks by category and site (the module's rules)."""
    starts = [r[0] for r in tensors.ranges] if tensors is not None else []
    ranges = tensors.ranges if tensors is not None else ()
    by: dict[str, int] = {}
    sites: dict[tuple[str, str], list[int]] = {}
    live = reserved = by_identity = 0
    for seg in snapshot.get("segments") or ():
        if not isinstance(seg, Mapping):
            continue
        reserved += int(seg.get("total_size") or 0)
        for b in seg.get("blocks") or ():
            if not isinstance(b, Mapping) or b.get("state") not in LIVE:
                continue
            addr, size = int(b.get("address") or 0), int(b.get("size") or 0)
            frames = _frames(b.get("frames"))
            cat = None
            i = bisect.bisect_left(starts, addr)
            if i < len(starts) and starts[i] < addr + size:
                cat = ranges[i][2]
                by_identity += size
            cat = cat or frame_class(frames) or ("other" if frames else "unrecorded")
            by[cat] = by.get(cat, 0) + size
            live += size
            got = sites.setdefault((site_of(frames), cat), [0, 0])
            got[0] += size
            got[1] += 1
    request = free = None
    for trace in snapshot.get("device_traces") or ():
        for e in trace if isinstance(trace, list) else ():
            if isinstance(e, Mapping) and e.get("action") == "oom":
                request, free = e.get("size"), e.get("device_free")
    top = sorted(((s, c, v[0], v[1]) for (s, c), v in sites.items() if s != "(no frames)"), key=lambda x: -x[2])
    return Held(
        by_category=by,
        sites=tuple(top[:_TOP_SITES]),
        live=live,
        reserved=reserved,
        oom_request=request if isinstance(request, int) else None,
        oom_free=free if isinstance(free, int) else None,
        classed_by_identity=by_identity,
    )


def estimate_beside(mem: Mapping[str, Any] | None, micro: int | None, seq: int | None) -> dict[str, float]:
    """The estimate's bytes for each category (``activations`` stands for the forward and the
    backward together), from the launch's ``forecast`` record; ``{}`` without one."""
    if mem is None or not isinstance(mem.get("terms"), Mapping):
        return {}
    terms = mem["terms"]
    out = {k: float(terms.get(k) or 0) for k in ("weights", "lora", "gradients", "optimizer_states")}
    b = int(micro or mem.get("micro_batch") or 1)
    s = int(seq or mem.get("max_seq_len") or 1)
    out["activations"] = activations_at({**mem, "allocator_fraction": 0.0}, b, s)
    out["step_temporaries"] = float(mem.get("step_temporaries") or 0)
    return out


def held_text(held: Held, beside: Mapping[str, float]) -> str:
    """The sentence: live and reserved bytes, each category with the estimate's term beside it,
    the largest sites."""
    head = f"{fmt_bytes(held.live)} live in {fmt_bytes(held.reserved)} reserved"
    if held.oom_request is not None:
        head += f", {fmt_bytes(held.oom_request)} asked for"
        if held.oom_free is not None:
            head += f" with {fmt_bytes(held.oom_free)} free on the card"
    parts = []
    by = held.by_category
    for cat in CATEGORY_WORDS:
        if cat == "backward":  # said with the forward's
            continue
        got = by.get(cat, 0) + (by.get("backward", 0) if cat == "activations" else 0)
        if not got and not beside.get(cat):
            continue
        text = f"{CATEGORY_WORDS[cat]} {fmt_bytes(got)}"
        notes = []
        if cat == "activations" and by.get("backward"):
            notes.append(f"forward {fmt_bytes(by.get('activations', 0))} + backward {fmt_bytes(by['backward'])}")
        if cat in beside:
            notes.append(f"estimate {fmt_bytes(beside[cat])}")
        parts.append(text + (f" ({'; '.join(notes)})" if notes else ""))
    sites = "; ".join(f"{fmt_bytes(v)} {s} ({c}, {n} blocks)" for s, c, v, n in held.sites)
    return f"{head}: " + ", ".join(parts) + (f"; largest sites: {sites}" if sites else "")


def oom_held(
    rd: RunDir, events: Iterable[Event], micro: int | None, seq: int | None, earlier: Iterable[Event] = ()
) -> str | None:
    """The row's ``oom_held``: the run directory's snapshot summarised beside the launch's
    estimate (at the micro batch that ran and the longest sequence the failed step fed, else
    ``seq``); ``None`` without a snapshot (no CUDA out of memory, or none was saved)."""
    snap = read_snapshot(rd.snapshot_path)
    if snap is None:
        return None
    held = summarise(snap, read_tensor_ranges(rd.tensors_path))
    events = list(events)
    err = oom_error(events)
    seq = (err.longest_seq if err is not None else None) or seq
    mem = forecast_memory(events) or forecast_memory(earlier)
    return held_text(held, estimate_beside(mem, micro, seq))
