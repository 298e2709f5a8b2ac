"""What the probe screen shows: its state, the trial table's rows and the boundary panel.

This module owns the probe screen's phases (:class:`ProbeState`, the one source of what the
screen is doing, and the status line each phase shows) and the pure rendering of a probe's
facts: the table's columns and one styled row per trial (fttui.core.experiments.probe.Trial,
the largest clean fit and smallest clean OOM marked), and the highlighted boundary panel of a
finished probe (fttui.core.experiments.probe.ProbeResult). Nothing here touches a widget or a
process; the screen (fttui.tui.probe_screen) puts these texts on screen.
"""

from __future__ import annotations

import enum

from rich.text import Text

from fttui.core.base import fmt
from fttui.core.base.inert import inert
from fttui.tui.plain import plain

COLUMNS = ["", "value", "result", "clean", "load", "GPU MB", "RSS MB", "s/step", "samples/s"]
BOUNDARY_KINDS = ("exact", "inexact", "none")


class ProbeState(enum.StrEnum):
    """The probe screen's phase; its value is also the status line's CSS kind (``-idle``, ...)."""

    IDLE = "idle"  # nothing started yet: the form is being filled
    RUNNING = "running"  # a probe runs in the thread worker
    STOPPED = "stopped"  # stopped by the user (escape, x, quitting): its process was killed
    ERROR = "error"  # bad input, a refused profile, or the probe failed
    DONE = "done"  # finished (or a recorded result): the boundary is shown


def status_line(
    state: ProbeState, *, name: str, probe_id: str, elapsed_s: float, trials: int, log_line: str, error: str, result
) -> str:
    """The status line's text in ``state``."""
    if state is ProbeState.IDLE:
        return (
            f"PROBE {name}: s starts (or enter in a field); fresh = first trial of its process "
            f"(a fit counts only then); clean = no OOM before it"
        )
    if state is ProbeState.RUNNING:
        return f"RUNNING {probe_id}  {fmt.duration(elapsed_s)}  {trials} trial{'s' if trials != 1 else ''}: {log_line}"
    if state is ProbeState.STOPPED:
        return f"STOPPED {probe_id}: the probe process was killed (s starts again)"
    if state is ProbeState.ERROR:
        return f"ERROR: {error}"
    return f"DONE {probe_id}: {len(result.trials)} trials in {fmt.duration(result.wall_s)}"


def trial_cells(t) -> list[str]:
    """The table cells of one trial (fttui.core.experiments.probe.Trial), without the marker column."""
    from fttui.core.experiments.probe import trial_cells as cells

    return cells(t, torch_reserved=False, sep=" ")


def trial_marker(t, result) -> str:
    """``▶`` on the trials that show the boundary of a finished probe: the fresh fit at the
    largest fit and the fresh OOM at the smallest; "" otherwise."""
    if result is None or not t.clean:
        return ""
    if t.status == "fit" and t.fresh and t.value == result.largest_fit:
        return "▶"
    if t.status == "oom" and t.value == result.smallest_oom:
        # the fresh OOM that decided it; a result recorded before OOMs had to be fresh: the clean one
        fresh_oom = any(x.fresh and x.status == "oom" and x.value == t.value for x in result.trials)
        return "▶" if t.fresh or not fresh_oom else ""
    return ""


def trial_row(t, result) -> list[Text]:
    """One table row: the marker and the cells, styled (boundary rows bold, OOM red, trials
    after an OOM dim)."""
    cells = [trial_marker(t, result), *trial_cells(t)]
    style = ""
    if cells[0]:
        style = "bold green" if t.status == "fit" else "bold red"
    elif not t.clean:
        style = "dim"
    elif t.status == "oom":
        style = "red"
    return [plain(c, style) for c in cells]


def table_trials(trials: list, result) -> list:
    """The trials in table order: as they came while running; by value once finished, as the
    CLI prints them."""
    if result is None:
        return list(trials)
    return sorted(trials, key=lambda t: (t.value, t.load))


def boundary_kind(res) -> str:
    """The boundary panel's CSS kind: ``exact``, ``inexact`` or ``none`` (nothing fits)."""
    if res.largest_fit is None:
        return "none"
    return "exact" if res.exact else "inexact"


def boundary_text(res, probe_only_limits: dict | None = None) -> Text:
    """The highlighted boundary panel's text for a finished probe (fttui.core.experiments.probe.ProbeResult).
    ``probe_only_limits``: memory limits the probe ran under that the full run does not get."""
    p = res.param
    out = Text()

    def add(text: str, style: str = "") -> None:  # a recorded probe's texts (its file's): inert
        out.append(inert(text, lines=True), style=style)

    if res.largest_fit is not None:
        add(f"largest {p} that fits: ", style="bold")
        add(f" {res.largest_fit} ", style="bold reverse")
    else:
        add(f"nothing in {res.lo}..{res.hi} fits", style="bold")
    add("   smallest that fails: ", style="bold")
    add("-" if res.smallest_oom is None else str(res.smallest_oom), style="bold")
    add("\n")
    for m in res.mixed:
        add(f"went both ways: {m['value']} (fit {m['fit']}x, OOM {m['oom']}x in fresh processes)\n", style="bold")
    add(
        "exact" if res.exact else ("a band" if res.mixed else "NOT exact"),
        style="bold" if res.exact else "bold underline",
    )
    if res.max_loads:
        add(f"  ·  at most {res.max_loads} loads said up front")
    add(
        f"  ·  {res.model_loads} model load{'s' if res.model_loads != 1 else ''}, "
        f"{len(res.trials)} trial{'s' if len(res.trials) != 1 else ''}, {fmt.duration(res.wall_s)}"
    )
    if getattr(res, "samples", "synthetic") == "data" and res.samples_note:
        add(f"\n{res.samples_note}")
    if res.note:
        add(f"\nnote: {res.note}", style="italic")
    if res.largest_fit is not None:
        add(
            f"\nenter: full run at {p}={res.largest_fit}"
            + (", longest samples first" if getattr(res, "samples", "") == "data" else ""),
            style="bold",
        )
        lim = {k: v for k, v in (probe_only_limits or {}).items() if v}
        if lim:
            shown = ", ".join(f"{k.split('_')[0]} {v}" for k, v in sorted(lim.items()))
            add(f" (under the same budget: {shown})", style="dim")
    return out


__all__ = [
    "COLUMNS",
    "BOUNDARY_KINDS",
    "ProbeState",
    "status_line",
    "trial_cells",
    "trial_marker",
    "trial_row",
    "table_trials",
    "boundary_kind",
    "boundary_text",
]
