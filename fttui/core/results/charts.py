"""PNG charts of a report (matplotlib, Agg canvas, no display needed).

The chart *data* is computed by :mod:`fttui.core.results.report` (pure); this module only draws it.
matplotlib is imported inside :func:`render`, never at import time, and only through the Agg
canvas (no ``pyplot``, so no global backend state is touched).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fttui.core.base.inert import inert
from fttui.core.results.tables import csv_lines

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# Colour-blind-safe palette (Okabe-Ito), then matplotlib's defaults for more groups.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
OOM_COLOUR = "#C0392B"


@dataclass
class Bar:
    """One bar: a row (or one card of a row, in the memory chart)."""

    label: str
    value: float | None  # None: nothing to draw (OOM, no figure)
    group: str = ""
    note: str = ""  # text drawn at the end of the bar ("OOM", "no price", ...)
    capacity: float | None = None  # memory chart: the card's (or host's) total memory, value's unit
    oom: bool = False
    run_id: str = ""


@dataclass
class ChartSpec:
    name: str  # file stem: NAME.png and NAME.csv
    title: str
    xlabel: str
    bars: list[Bar] = field(default_factory=list)
    kind: str = "bars"  # bars | memory
    capacity_label: str = "card memory"  # memory chart: the legend's name of the capacity line
    reference: float | None = None  # a vertical line (the baseline's 1.0 in the relative chart)
    reference_label: str = ""
    group_label: str = ""  # legend title
    value_format: str = "{:.3g}"
    footnote: str = ""
    group_order: list[str] = field(default_factory=list)  # colour order, shared by a report's charts

    def csv_rows(self) -> list[list[str]]:
        head = ["label", "group", "value", "note", "run_id"]
        if self.kind == "memory":
            head.insert(3, "capacity")
        out = [head]
        for b in self.bars:
            cells = [b.label, b.group, "" if b.value is None else f"{b.value:.6g}", b.note, b.run_id]
            if self.kind == "memory":
                cells.insert(3, "" if b.capacity is None else f"{b.capacity:.6g}")
            out.append(cells)
        return out


def write_csv(spec: ChartSpec, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(csv_lines(spec.csv_rows()), encoding="utf-8")
    return path


def _colours(groups: list[str], order: list[str]) -> dict[str, str]:
    """Colour of each group: by its place in ``order`` (the same in every chart of a report)."""
    order = list(dict.fromkeys([*order, *groups]))
    present = set(groups)
    return {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(order) if g in present}


def render(spec: ChartSpec, path: str | Path) -> Path:
    """Draw ``spec`` as a horizontal bar chart into the PNG file ``path``. Labels come from rows
    (model and profile names): ``$`` is never read as mathtext and control characters are shown
    as their escapes (:func:`fttui.core.base.inert.inert`)."""
    from matplotlib import rc_context

    with rc_context({"text.parse_math": False, "text.usetex": False}):
        figure(spec).savefig(Path(path), format="png")
    return Path(path)


def figure(spec: ChartSpec) -> Figure:
    """The matplotlib figure of ``spec`` (on an Agg canvas), drawn, not saved."""
    from matplotlib.artist import Artist
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    bars = spec.bars
    n = max(1, len(bars))
    fig = Figure(figsize=(10, 1.6 + 0.36 * n), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colours = _colours([b.group for b in bars], spec.group_order)
    ys = list(range(len(bars)))[::-1]  # first bar on top
    values = [b.value or 0.0 for b in bars]
    caps = [b.capacity or 0.0 for b in bars]
    top = max([*values, *caps, spec.reference or 0.0, 1e-9])
    for y, b in zip(ys, bars):
        colour = OOM_COLOUR if b.oom else colours[b.group]
        if b.value is not None:
            ax.barh(
                y,
                b.value,
                height=0.7,
                color=colour,
                alpha=0.55 if b.oom else 0.9,
                hatch="//" if b.oom else None,
                edgecolor=colour if b.oom else "none",
            )
        text = spec.value_format.format(b.value) if b.value is not None else ""
        if spec.kind == "memory" and text and b.capacity:
            text += f" of {b.capacity:.0f}"
        if b.note:
            text = f"{text}  {b.note}".strip()
        if text:
            end = max(b.value or 0.0, b.capacity or 0.0 if spec.kind == "memory" else 0.0)
            ax.text(
                end + top * 0.012,
                y,
                inert(text),
                va="center",
                ha="left",
                fontsize=8,
                color=OOM_COLOUR if b.oom else "#222222",
            )
        if spec.kind == "memory" and b.capacity:
            ax.vlines(b.capacity, y - 0.45, y + 0.45, colors="#222222", linewidth=2)
    if spec.reference is not None:
        ax.axvline(spec.reference, color="#555555", linestyle="--", linewidth=1)
    ax.set_yticks(ys, [inert(b.label) for b in bars], fontsize=8)
    ax.set_xlabel(spec.xlabel)
    fig.suptitle(inert(spec.title), x=0.01, ha="left", fontsize=11)
    ax.set_xlim(0, top * 1.22)
    ax.set_ylim(-0.7, len(bars) - 0.3)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    handles: list[Artist] = [Patch(color=c, label=inert(g)) for g, c in colours.items() if g]
    if any(b.oom for b in bars):
        handles.append(Patch(facecolor=OOM_COLOUR, alpha=0.55, hatch="//", label="out of memory"))
    if spec.kind == "memory" and any(b.capacity for b in bars):
        handles.append(Line2D([], [], color="#222222", linewidth=2, label=spec.capacity_label))
    if spec.reference is not None and spec.reference_label:
        handles.append(Line2D([], [], color="#555555", linestyle="--", label=spec.reference_label))
    if handles:
        ax.legend(
            handles=handles,
            title=inert(spec.group_label) or None,
            fontsize=8,
            title_fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            frameon=False,
        )
    if not bars:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center")
    if spec.footnote:
        fig.text(0.01, 0.005, inert(spec.footnote), fontsize=7, color="#555555", ha="left", va="bottom")
    return fig
