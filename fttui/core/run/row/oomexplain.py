"""An out of memory explained: the training phase it happened in and the estimate's breakdown for
that setup against the budget, in words (the row's ``oom_phase`` and ``oom_explained``).

The phase is the rank's (the ``error`` event's ``phase`` and ``phase_step``: marked in memory by
fttui's Trainer callback, fttui.integrations.hf_info.PHASES). The terms are the launch's estimate
(the ``forecast`` event's ``memory``, :func:`fttui.core.memory.oomterms.oom_terms`) for the
setup that failed: the micro batch that ran and the longest sequence fed, the activations scaled
from the stated micro batch and length (the per-token part by tokens, the attention-matrix part
by the batch and the square of the length). Each phase holds its own terms:

- ``forward``: the static terms (weights, LoRA, quantisation, communication, CUDA context), the
  optimizer states once a step made them, and the activations it builds (the term it names);
- ``backward``: those, with the gradients it writes and the activations; it names the larger;
- ``optimizer``: the static terms, the gradients, the optimizer states (made in the first step:
  the term it names then) and the step's temporaries (named in a later step);
- ``resume-load``: the estimate's resume term (the record's ``resume``, a resume's load peak per
  rank against its training peak, :mod:`fttui.core.memory.resume`) when the launch recorded it;
- ``data``, ``save``, ``eval`` and the startup phases: no term of the estimate.

The budget is the run's limit (``limits.gpu_memory``, or ``limits.host_memory`` for CPU
training: the address space a rank may add above its imported stack), else the card's memory.
The one change that would fit: the probe's stored answer for the same setup when the launch
found one below what failed (the record's ``probe``, :mod:`fttui.core.experiments.probed`: the
largest micro batch, or length, that fitted); else the estimate's: the micro batch
``--on-oom shrink`` would run (:func:`fttui.core.run.launching.oomretry.shrink`, halved until
the activations fit) when the activations are named, with the largest micro batch that fits by
the estimate when that is larger; else the budget the phase needs, and the whole step's when it
is larger (every phase, the optimizer states made: a budget that only gets past the phase fails
in a later one). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fttui.core.base.event_records import ErrorEvent, Event, ForecastEvent
from fttui.core.base.units import MIB, fmt_bytes
from fttui.core.run.launching.oomretry import shrink

__all__ = ["OomExplained", "explain", "oom_error", "forecast_memory", "activations_at", "TERM_WORDS"]

#: the estimate's terms in words (fttui.core.memory.breakdown.COMPONENTS, as a sentence says them)
TERM_WORDS = {  # in the order a sentence lists them
    "weights": "weights",
    "lora": "LoRA parameters and their states",
    "gradients": "gradients",
    "optimizer_states": "optimizer states",
    "step_temporaries": "the optimizer step's temporaries",
    "activations": "activations",
    "quantisation": "quantisation buffers",
    "communication": "communication buffers",
    "cuda_context": "the CUDA context",
}
STATIC = ("weights", "lora", "quantisation", "communication", "cuda_context")
_NO_TERM = {
    "data": "fetching the step's batches",
    "save": "saving a checkpoint",
    "resume-load": "loading the checkpoint resumed from",
    "eval": "evaluating",
}


@dataclass(frozen=True)
class OomExplained:
    phase: str | None  # the error event's phase (None: not told)
    text: str | None  # the sentence (None: not an out of memory)


def oom_error(events: Iterable[Event]) -> ErrorEvent | None:
    """The first ``error`` event of kind ``oom`` (the rank that ran out first)."""
    ooms = [e for e in events if isinstance(e, ErrorEvent) and e.kind == "oom"]
    return min(ooms, key=lambda e: e.t or 0.0, default=None)


def forecast_memory(events: Iterable[Event]) -> Mapping[str, Any] | None:
    """The launch's estimate record (the first ``forecast`` event's ``memory``), if any."""
    ev = next((e for e in events if isinstance(e, ForecastEvent)), None)
    mem = getattr(ev, "memory", None) if ev is not None else None
    return mem if isinstance(mem, Mapping) and isinstance(mem.get("terms"), Mapping) else None


def _num(x: Any) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else 0.0


def activations_at(mem: Mapping[str, Any], micro: int, seq: int) -> float:
    """The estimate's activations at ``micro`` x ``seq``, scaled from the recorded ones at its
    micro batch and length (with the caching allocator's share on a card)."""
    b0, s0 = max(1, int(_num(mem.get("micro_batch")) or 1)), max(1, int(_num(mem.get("max_seq_len")) or 1))
    act, att = _num(mem.get("activations")), _num(mem.get("attention"))
    scaled = (act - att) * (micro * seq) / (b0 * s0) + att * (micro / b0) * (seq / s0) ** 2
    return scaled * (1.0 + _num(mem.get("allocator_fraction")))


def _listed(names: list[str]) -> str:
    words = [TERM_WORDS[n] for n in names]
    if not words:
        return "nothing else"
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def explain(
    events: Iterable[Event],
    micro: int | None,
    accum: int | None,
    max_seq_len: int | None,
    card_bytes: float | None = None,
    earlier: Iterable[Event] = (),
) -> OomExplained:
    """The explanation of the run's out of memory (``OomExplained(None, None)`` when it had none).
    ``micro`` / ``accum``: the micro batch and accumulation that ran; ``max_seq_len``: the
    stated length (when no sequence was fed); ``card_bytes``: the card's memory (the budget
    when no ``limits.gpu_memory`` was set); ``earlier``: the events of the attempt an OOM retry
    continued (its launch recorded the estimate; the terms scale to the micro batch that ran)."""
    events = list(events)
    err = oom_error(events)
    if err is None:
        return OomExplained(None, None)
    phase, step = err.phase, err.phase_step
    seq = err.longest_seq or max_seq_len
    head = phase or "an unmarked phase"
    if phase in ("data", "forward", "backward", "optimizer") and step:
        head = f"{phase} of step {step}"
    elif phase in ("save", "resume-load", "eval") and step is not None:
        head = f"{phase} after step {step}" if phase != "resume-load" else f"{phase} of the checkpoint of step {step}"
    if seq:
        head += f", longest sequence {seq}"
    mem = forecast_memory(events) or forecast_memory(earlier)
    if phase == "resume-load" and mem is not None and isinstance(mem.get("resume"), Mapping):
        return OomExplained(phase, f"{head}: {_resumed(mem, card_bytes)}")
    if phase not in ("forward", "backward", "optimizer"):
        what = _NO_TERM.get(phase or "", "outside a training step")
        return OomExplained(phase, f"{head}: {what}; the estimate has no term for it")
    if mem is None:
        return OomExplained(phase, f"{head}: no estimate was recorded at launch to set against it")
    return OomExplained(phase, f"{head}: {_terms(mem, phase, step or 1, micro, accum, seq, card_bytes)}")


def _resumed(mem: Mapping[str, Any], card_bytes: float | None) -> str:
    """A resume's load against the budget: the estimate's resume term (the record's ``resume``,
    :mod:`fttui.core.memory.resume`)."""
    r = mem["resume"]
    peak, train, above = _num(r.get("peak")), _num(r.get("train_peak")), _num(r.get("above"))
    where = "the lowest rank" if r.get("rank") == "lowest" else "a rank"
    text = f"loading the checkpoint resumed from: {fmt_bytes(peak)} predicted on {where}"
    text += (
        f", {fmt_bytes(above)} above its training peak"
        if above > 0
        else f", below its training peak ({fmt_bytes(train)})"
    )
    budget, what = mem.get("budget"), mem.get("budget_what")
    if not budget and card_bytes:
        budget, what = card_bytes, f"the card's {fmt_bytes(card_bytes)}"
    if budget:
        text += f" (of {what})"
    if r.get("rank") == "lowest":  # the record of an fttui before FSDP's checkpoints were sharded
        text += "; the FSDP full state dict reads every rank's optimizer states there"
    return text


def _terms(
    mem: Mapping[str, Any],
    phase: str,
    step: int,
    micro: int | None,
    accum: int | None,
    seq: int | None,
    card_bytes: float | None,
) -> str:
    terms = {k: _num(v) for k, v in mem["terms"].items()}
    b = int(micro or _num(mem.get("micro_batch")) or 1)
    s = int(seq or _num(mem.get("max_seq_len")) or 1)
    act = activations_at(mem, b, s)
    later = step > 1  # the optimizer states exist once the first step made them
    held = {k: terms.get(k, 0.0) for k in STATIC}
    if phase == "forward":
        held.update(optimizer_states=terms.get("optimizer_states", 0.0) if later else 0.0, activations=act)
        named = "activations"
    elif phase == "backward":
        held.update(optimizer_states=terms.get("optimizer_states", 0.0) if later else 0.0)
        held.update(gradients=terms.get("gradients", 0.0), activations=act)
        named = "gradients" if held["gradients"] > act else "activations"
    else:
        held.update(gradients=terms.get("gradients", 0.0), optimizer_states=terms.get("optimizer_states", 0.0))
        held["step_temporaries"] = _num(mem.get("step_temporaries"))
        named = "optimizer_states" if not later and held["optimizer_states"] > 0 else "step_temporaries"
    held = {k: v for k, v in held.items() if v > 0 or k == named}
    others = sorted((k for k in held if k != named), key=list(TERM_WORDS).index)
    budget, what = mem.get("budget"), mem.get("budget_what")
    if not budget and card_bytes:
        budget, what = card_bytes, f"the card's {fmt_bytes(card_bytes)}"
    need = held[named]
    if not budget:
        return (
            f"{TERM_WORDS[named]} {fmt_bytes(need)} predicted beside {fmt_bytes(sum(held.values()) - need)} of "
            f"{_listed(others)}; no budget known to set them against"
        )
    left = float(budget) - (sum(held.values()) - need)
    text = (
        f"{TERM_WORDS[named]} {fmt_bytes(need)} predicted where {fmt_bytes(max(0.0, left))} were left "
        f"after {_listed(others)} (of {what})"
    )
    if need <= left:  # the estimate was wrong here: a probe of this setup still answers
        probed = _probed(mem, b, s)
        return text + "; the estimate expected it to fit" + (f"; {probed}" if probed else "")
    whole = sum(terms.get(k, 0.0) for k in (*STATIC, "gradients", "optimizer_states")) + max(
        act, _num(mem.get("step_temporaries"))
    )
    return text + "; " + _change(mem, named, b, accum, s, left, sum(held.values()), whole)


def _probed(mem: Mapping[str, Any], micro: int, seq: int) -> str | None:
    """The probe's stored answer for this setup (the record's ``probe``,
    :func:`fttui.core.experiments.probed.probe_answer`) when it is below what failed."""
    p = mem.get("probe")
    if not isinstance(p, Mapping) or p.get("param") not in ("batch_size", "max_seq_len"):
        return None
    fit, failed = p.get("largest_fit"), micro if p["param"] == "batch_size" else seq
    which = f"probe {p['probe_id']}" if p.get("probe_id") else "the probe"
    if not isinstance(fit, int) or isinstance(fit, bool):
        return f"{which} of this setup found no {'micro batch' if p['param'] == 'batch_size' else 'length'} that fits"
    if fit >= failed:
        return None  # the probe fitted more than failed here (a longer real batch, another state): not an answer
    if p["param"] == "batch_size":
        return f"micro batch {fit} fits by {which} of this setup (the largest that fitted)"
    return f"data.max_seq_len {fit} fits by {which} of this setup (the longest that fitted)"


def _largest_micro(mem: Mapping[str, Any], micro: int, seq: int, left: float) -> int | None:
    """The largest micro batch below ``micro`` whose activations fit ``left`` by the estimate."""
    return next((b for b in range(micro - 1, 0, -1) if activations_at(mem, b, seq) <= left), None)


def _change(
    mem: Mapping[str, Any],
    named: str,
    micro: int,
    accum: int | None,
    seq: int,
    left: float,
    need: float,
    whole: float,
) -> str:
    """The one change that fits: the probe's stored answer for this setup when it has one, else
    the estimate's (the micro batch --on-oom shrink would run, and the largest that fits when it
    is larger; for a term other than the activations, the budget the phase needs and, when larger,
    the budget the whole step needs: every phase, with the optimizer states made)."""
    probed = _probed(mem, micro, seq)
    if probed is not None:
        return probed
    if named == "activations":
        m, a = micro, int(accum or 1)
        largest = _largest_micro(mem, micro, seq, left)
        while True:
            s = shrink(m, a)
            if s is None:
                break
            m, a = s.new_micro, s.new_accum
            act = activations_at(mem, m, seq)
            if act <= left:
                text = (
                    f"micro batch {m} x accumulation {a} would fit by the estimate (activations "
                    f"{fmt_bytes(act)}), as --on-oom shrink would run it"
                )
                if largest is not None and largest > m:
                    text += (
                        f"; the largest micro batch that fits by the estimate is {largest} (activations "
                        f"{fmt_bytes(activations_at(mem, largest, seq))})"
                    )
                return text
        ckpt = "" if mem.get("gradient_checkpointing") else " or train.gradient_checkpointing = true"
        return (
            f"even micro batch 1 would not fit by the estimate (activations {fmt_bytes(activations_at(mem, 1, seq))}): "
            f"a shorter data.max_seq_len{ckpt}"
        )
    for_phase, for_step = fmt_bytes(-(-need // MIB) * MIB), fmt_bytes(-(-whole // MIB) * MIB)
    if whole > need and for_step != for_phase:  # a budget that only gets past this phase fails in a later one
        return f"a budget of {for_phase} would fit this phase by the estimate, {for_step} the whole step"
    return f"a budget of {for_phase} would fit this phase by the estimate"
