"""The picker's memory verdict: the estimate of a resolved profile next to the visible cards (or
``limits.gpu_memory``), its time forecast, and the results-store rows that calibrate both. Pure of the screen: the
picker shows what ``memory_verdict`` returns; the memory estimator is imported when first used,
after the picker's first frame."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.text import Text

from fttui.core.base.errors import FttuiError
from fttui.tui.plain import plain

if TYPE_CHECKING:  # the picker's first frame does without the typed profile
    from fttui.core.profiles.typed import Profile


@dataclass
class MemoryVerdict:
    """The estimate of a profile against the visible cards, as the picker shows it."""

    text: Text
    fits: bool | None  # None: nothing to compare with (CPU profile, no GPU, no estimate)
    question: str = ""  # the launch confirmation when predicted not to fit
    detail: str = ""


def memory_verdict(resolved: Profile, gpu_snap, rows: list[dict]) -> MemoryVerdict:
    """Predicted peak memory of ``resolved`` (calibrated from the store ``rows`` when some match)
    next to the visible cards of ``gpu_snap`` (or ``limits.gpu_memory`` when set). Never raises:
    a profile the estimator cannot express gives its one-line message."""
    from fttui.core.memory import MIB, calibration_from_store, estimate, fmt_bytes

    head = ("estimate: ", "bold")
    try:
        cal = calibration_from_store(resolved, rows) if rows else None
    except (FttuiError, KeyError, TypeError, ValueError, ZeroDivisionError):  # a row the fit cannot use
        cal = None  # fall back to the formula
    try:
        e = estimate(resolved, cal)
    except (FttuiError, KeyError, TypeError, ValueError) as ex:  # EstimateError, or a field it trips on
        msg = (str(ex).strip().splitlines() or [type(ex).__name__])[0]
        return MemoryVerdict(Text.assemble(head, plain(f"not available: {msg}")), None)  # may name the model
    source = f"calibrated from {cal.rows} row{'s' if cal.rows != 1 else ''}" if cal else "formula"
    host = fmt_bytes(e.host_peak_bytes)
    if not e.gpu_peak_bytes:
        return MemoryVerdict(Text.assemble(head, f"host peak {host} ({source})\n", "CPU profile: no GPU budget"), None)
    peaks = e.gpu_peak_bytes
    n = len(peaks)
    line1 = Text.assemble(
        head, f"GPU {fmt_bytes(max(peaks))} per card" + (f" x{n}" if n > 1 else "") + f", host peak {host} ({source})\n"
    )
    limit = None

    limit_text = resolved.limits.gpu_memory or ""
    if limit_text:
        from fttui.core.profiles import parse_size

        try:
            limit = parse_size(limit_text)
        except ValueError:
            limit = None
    from fttui.monitor import run_cards

    cards = run_cards(gpu_snap)  # the cards CUDA_VISIBLE_DEVICES leaves the run, in CUDA order
    # (peak, budget, what the budget is) per card of the run that has one
    budgets: list[tuple[int, int, str]] = []
    for i, peak in enumerate(peaks):
        card = cards[i] if i < len(cards) else None
        total = int(card.mem_total_mb * MIB) if card is not None and card.mem_total_mb else None
        if limit is not None and (total is None or limit < total):
            budgets.append((peak, limit, "limits.gpu_memory"))
        elif card is not None and total is not None:
            budgets.append((peak, total, f"GPU {card.index}"))
    missing = f"; {n} GPUs asked, {len(cards)} visible" if cards and n > len(cards) else ""
    if not budgets:
        return MemoryVerdict(line1 + Text("no GPU visible: no card to compare with"), None)
    from fttui.core.memory.hostfit import host_check

    host_fit = host_check(resolved)  # an offloading sharding: the host's peak against what is available
    if host_fit is not None and not host_fit.fits:
        over_host = Text.assemble(("does NOT fit the host", "bold reverse"), plain(f" ({host_fit.message})"))
        return MemoryVerdict(
            line1 + over_host, False, "the host would run out of memory: launch anyway? y / n", host_fit.message
        )
    if host_fit is not None and host_fit.warning:
        line1 += plain(f"host: {host_fit.warning}", "yellow") + Text("\n")
    over = [b for b in budgets if b[0] > b[1]]
    if over:
        peak, budget, what = over[0]
        line2 = Text.assemble(
            ("does NOT fit", "bold reverse"), f" (predicted {fmt_bytes(peak)} of {fmt_bytes(budget)}, {what}){missing}"
        )
        has = (
            f"the limit (limits.gpu_memory) is {fmt_bytes(budget)}"
            if what == "limits.gpu_memory"
            else f"the card has {fmt_bytes(budget)}"
        )
        question = f"predicted {fmt_bytes(peak)} per card, {has}: launch anyway? y / n"
        detail = f"{resolved.name or 'this profile'} ({source}): the run would likely stop with CUDA out of memory."
        return MemoryVerdict(line1 + line2, False, question, detail)
    peak, budget, what = min(budgets, key=lambda b: b[1] - b[0])
    line2 = Text.assemble(("fits", "bold"), f" (predicted {fmt_bytes(peak)} of {fmt_bytes(budget)}, {what}){missing}")
    return MemoryVerdict(line1 + line2, True)


def forecast_line(resolved: Profile, gpu_snap, rows: list[dict]) -> Text | None:
    """The time forecast of ``resolved`` beside its memory estimate (``fttui estimate``'s
    ``time:`` line: the store's ``rows``, the data's cached lengths, the first visible card);
    None when it cannot be made (a command profile, a model without numbers)."""
    from fttui.core.experiments.forecast import NO_CARD, RANKS_CPU
    from fttui.core.experiments.quick_forecast import quick_forecast
    from fttui.core.memory import estimate

    try:
        card = RANKS_CPU

        if int(resolved.devices.gpus or 0):
            from fttui.monitor import run_cards

            cards = run_cards(gpu_snap)
            card = str(cards[0].name) if cards and cards[0].name else NO_CARD
        fc = quick_forecast(resolved, estimate(resolved), rows, card)
    except (FttuiError, KeyError, TypeError, ValueError, OSError, ZeroDivisionError):
        return None
    return Text.assemble(("time: ", "bold"), plain(fc.words()))  # names the card (NVML's, a fake GPU file's)


def read_store_rows() -> list[dict]:
    """The results-store rows (for calibrating the estimate); none when there is no store yet (it
    is not created here) or it cannot be read."""
    import sqlite3  # here, not at the top: the picker is the first frame

    from fttui.core.base import paths

    try:
        if not paths.store_path().exists():
            return []
        from fttui.core.results.store import Store

        with Store() as store:
            return store.rows()
    except (FttuiError, OSError, sqlite3.Error):  # an unreadable store only costs the calibration
        return []


__all__ = ["MemoryVerdict", "forecast_line", "memory_verdict", "read_store_rows"]
