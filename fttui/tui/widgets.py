"""Widgets and Rich renderables shared by the screens.

Everything here is display only: it turns snapshots (fttui.core.run.fold.snapshot.RunSnapshot,
fttui.monitor.GpuSnapshot) into text. Bars are drawn with block characters so they read
without colour (NO_COLOR). Names (a card's, a driver's) and labels come from outside: they are
shown inert, never as markup (fttui.tui.plain, issue 36).
"""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.widget import Widget
from textual.widgets import Static

from fttui.core.base import fmt
from fttui.core.base.fmt import fraction
from fttui.core.base.inert import inert
from fttui.core.run.fold.insight import power_text
from fttui.tui.plain import plain

FULL, EMPTY = "█", "░"
OTHERS = "▒"  # the part of a card's memory bar held by processes that are not the run's
RUN_MARK = "*run"  # after a card's name: one of the run's cards (CUDA_VISIBLE_DEVICES names it)


class Bar:
    """A horizontal bar filling the width it is given, followed by a label.

    ``Bar(0.4, "9.8/24.0 GB")`` renders ``████░░░░░░ 9.8/24.0 GB`` at any width. With ``inner``
    (a fraction up to ``frac``) the bar's first part is full blocks up to ``inner`` and shaded
    blocks from there to ``frac``: ``██▒▒░░░░░░`` (the run's memory, then other processes').
    """

    def __init__(
        self,
        frac: float | None,
        label: str = "",
        prefix: str = "",
        style: str = "",
        max_bar: int = 40,
        inner: float | None = None,
    ) -> None:
        self.frac = frac
        self.label = inert(label)  # drawn as a segment: no control character reaches the terminal
        self.prefix = prefix
        self.style = style
        self.max_bar = max_bar
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        fixed = len(self.prefix) + (len(self.label) + 1 if self.label else 0)
        bar_w = max(0, min(self.max_bar, width - fixed))
        if self.prefix:
            yield Segment(self.prefix, Style(bold=True))
        if bar_w:
            if self.frac is None:
                yield Segment("·" * bar_w, Style(dim=True))
            else:
                n = int(round(self.frac * bar_w))
                style = Style.parse(self.style) if self.style else Style()
                k = n if self.inner is None else min(n, int(round(self.inner * bar_w)))
                yield Segment(FULL * k, style)
                if n > k:
                    yield Segment(OTHERS * (n - k), style)
                yield Segment(EMPTY * (bar_w - n), Style(dim=True))
        if self.label:
            yield Segment((" " if bar_w or self.prefix else "") + self.label)
        yield Segment.line()


def bar_style(frac: float | None) -> str:
    if frac is None:
        return ""
    if frac >= 0.95:
        return "red"
    if frac >= 0.8:
        return "yellow"
    return "green"


def gb_pair(used: float | None, total: float | None) -> str:
    """``9.8/24.0 GB`` (GB above 1 GB total, else MB)."""
    if used is None and total is None:
        return "-"
    if total is not None and total >= 1024:
        u = "-" if used is None else f"{used / 1024:.1f}"
        return f"{u}/{total / 1024:.1f} GB"
    u = "-" if used is None else f"{used:.0f}"
    t = "-" if total is None else f"{total:.0f}"
    return f"{u}/{t} MB"


def num(x: float | None, nd: int = 2) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{nd}f}"


def run_dev_total(run: float | None, used: float | None, total: float | None) -> str:
    """``run 6.0 dev 18.1/40.0 GB``: the run's own memory, the card's used (as nvidia-smi shows
    it) and its total, in GB above 1 GB total, else MB."""
    if total is not None and total >= 1024:
        r = "-" if run is None else f"{run / 1024:.1f}"
        return f"run {r} dev {gb_pair(used, total)}"
    r = "-" if run is None else f"{run:.0f}"
    return f"run {r} dev {gb_pair(used, total)}"


def _mem_bar(g, run: bool, prefix: str = "") -> Bar:
    frac = fraction(g.mem_used_mb, g.mem_total_mb)
    if not run:
        return Bar(frac, gb_pair(g.mem_used_mb, g.mem_total_mb), prefix=prefix, style=bar_style(frac))
    inner = fraction(g.proc_mem_mb, g.mem_total_mb)
    return Bar(frac, run_dev_total(g.proc_mem_mb, g.mem_used_mb, g.mem_total_mb), style=bar_style(frac), inner=inner)


def gpu_card_lines(
    g, peak_mb: float | None, reserved_mb: float | None, *, run: bool = False, run_peak_mb: float | None = None
) -> list:
    """Body of one GPU card: memory bar, peaks, util/power/temp. ``run``: one of the run's cards,
    named by CUDA_VISIBLE_DEVICES: the bar says run / device / total (``run 9.6 dev 21.3/40.0 GB``,
    the run's part full, other processes' shaded) and the peaks run/device (``peak 9.6/21.3 GB``)."""
    peak = f"peak {fmt.mb(peak_mb)}"
    if run:  # run/device, as the bar's label orders them
        peak = f"peak {gb_pair(run_peak_mb, peak_mb)}"
    if reserved_mb is not None:
        peak += f"  {'rsv' if run else 'torch rsv'} {fmt.mb(reserved_mb)}"
    extra = [
        f"util {fmt.pct(g.util_pct)}",
        power_text(g),  # against the card's cap when NVML gives it
        "-" if g.temp_c is None else f"{g.temp_c:.0f}°C",
    ]
    return [
        _mem_bar(g, run, prefix="mem "),
        Text(peak, no_wrap=True, overflow="ellipsis"),
        Text("  ".join(extra), no_wrap=True, overflow="ellipsis"),
    ]


def gpu_row(
    g,
    peak_mb: float | None,
    reserved_mb: float | None,
    name_w: int = 0,
    *,
    run: bool = False,
    run_peak_mb: float | None = None,
):
    """One line for one GPU (compact layout for many GPUs); ``run`` as in :func:`gpu_card_lines`,
    marked ``GPU2*``."""
    from rich.table import Table

    t = Table.grid(padding=(0, 1), expand=True)
    t.add_column(no_wrap=True)
    t.add_column(ratio=1, no_wrap=True)
    t.add_column(no_wrap=True)
    # the run's card: peaks run/device ("pk 9.6/21.3 GB"), short, the line is narrow
    tail = "pk " + gb_pair(run_peak_mb, peak_mb) if run else f"pk {fmt.mb(peak_mb)}"
    if reserved_mb is not None:
        tail += f" rsv {fmt.mb(reserved_mb)}"
    tail += f"  {fmt.pct(g.util_pct)}"
    tail += "  -" if g.power_w is None else f" {g.power_w:.0f}W"
    tail += "" if g.temp_c is None else f" {g.temp_c:.0f}°C"
    t.add_row(plain(f"GPU{g.index}" + ("*" if run else ""), "bold"), _mem_bar(g, run), plain(tail))
    return t


def gpu_list_text(gpu) -> Text:
    """The picker's GPU lines: index, name, memory used/total; or the reason there are none."""
    if gpu is None:
        return Text("GPUs: -")
    if not gpu.available:
        return Text.assemble(("GPUs: none", "bold"), plain(f" ({gpu.reason or 'not available'})"))
    if not gpu.gpus:
        return Text.assemble(("GPUs: none", "bold"), " visible")
    from fttui.monitor import cards_run_first

    out = Text()
    named = gpu.visible is not None  # CUDA_VISIBLE_DEVICES names some: those first, marked
    cards = cards_run_first(gpu)
    n_run = sum(c.run for c in cards)
    head = f"GPUs: {n_run} of {len(cards)} visible (CUDA_VISIBLE_DEVICES)" if named else f"GPUs: {len(cards)} visible"
    if gpu.driver:
        head += f" (driver {gpu.driver}" + (f", CUDA {gpu.cuda})" if gpu.cuda else ")")
    out.append(inert(head), style="bold")  # the driver's, the cards' names: NVML's or a fake GPU file's
    for c in cards:
        g = c.gpu
        mark = ("*" if c.run else " ") if named else " "
        out.append(f"\n {mark}{inert(g.index)}  {inert(g.name or '?')}  {gb_pair(g.mem_used_mb, g.mem_total_mb)}")
        if g.util_pct is not None:
            out.append(f"  util {fmt.pct(g.util_pct)}")
    return out


class LogTail(Widget):
    """The last lines of a growing text file, read incrementally (only the new bytes each
    ``poll()``); keeps at most ``max_lines`` lines and shows the newest that fit."""

    DEFAULT_CSS = """
    LogTail { height: 1fr; }
    """

    READ_LIMIT = 256 * 1024  # bytes read per poll at most; older bytes of a burst are skipped

    def __init__(self, path: Path | None = None, max_lines: int = 200, **kwargs) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.lines: deque[str] = deque(maxlen=max_lines)
        self._offset = 0
        self._partial = ""
        self._ino: int | None = None

    def poll(self) -> bool:
        """Read what was appended since the last call; True when there are new lines."""
        if self.path is None:
            return False
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                if st.st_size < self._offset or (self._ino is not None and st.st_ino != self._ino):
                    self._offset, self._partial = 0, ""  # truncated or replaced: start over
                    self.lines.clear()
                self._ino = st.st_ino
                if st.st_size == self._offset:
                    return False
                if st.st_size - self._offset > self.READ_LIMIT:
                    self._offset, self._partial = st.st_size - self.READ_LIMIT, ""
                f.seek(self._offset)
                data = f.read(self.READ_LIMIT)
        except OSError:
            return False
        self._offset += len(data)
        text = self._partial + data.decode("utf-8", "replace")
        parts = text.split("\n")
        self._partial = parts.pop()
        for line in parts:
            if "\r" in line:
                line = line.rstrip("\r").rsplit("\r", 1)[-1]
            self.lines.append(_printable(line))
        if parts:
            self.refresh()
        return bool(parts)

    def render(self) -> Text:
        h = max(1, self.content_size.height)
        shown = list(self.lines)[-h:]
        if not shown:
            return Text("(no output yet)", style="dim")
        return Text("\n".join(shown), no_wrap=True, overflow="ellipsis")


def _printable(line: str) -> str:
    if "\x1b" in line:
        line = Text.from_ansi(line).plain
    return "".join(c if c.isprintable() or c == "\t" else " " for c in line).expandtabs(4)


class Panel(Static):
    """A bordered Static whose content is replaced only when it changes."""

    def __init__(self, *args, title: str = "", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if title:
            self.border_title = title
        self._key: object = object()

    def show(self, renderable, key: object = None) -> None:
        """Update with ``renderable``; skipped when ``key`` equals the previous one."""
        if key is not None and key == self._key:
            return
        self._key = key
        self.update(renderable)
