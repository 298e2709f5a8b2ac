"""The run screen's panels: each one a widget that draws itself from the run's snapshot.

Textual's reactive idiom: every panel has a ``snapshot`` var (bound to ``RunScreen.snap`` with
``data_bind``) and a ``watch_snapshot`` that redraws it, so the screen only assigns the new
``RunSnapshot``. The status bar also watches the facts only the screen knows (the run directory
is gone, the supervisor is lost, a cancel was asked); the GPU panels watch ``area`` (the screen's
size) to choose between cards and one line per GPU. Display only: the status text is
fttui.core.run.fold.status.status_line's, the figures are the snapshot's.

GPUs: when the run's CUDA_VISIBLE_DEVICES names cards (the sample's ``visible``), those come
first, marked ``*run``, and show run / device / total memory; the other cards follow, unmarked.
Each card's last line is its headroom (``free``, total minus device used) and, on the run's
cards, MFU and the allocator's retries (fttui.core.run.fold.perf, docs/performance.md): ``MFU 41%
free 18.7 GB  retries 0``, red with ``NEAR OOM`` in the card's title when the card is close to an
OOM. In the one-line-per-GPU table, the table's subtitle carries MFU and the warning.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from rich.columns import Columns
from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Grid, Vertical
from textual.geometry import Size
from textual.reactive import var
from textual.widgets import Sparkline, Static

from fttui.core.base import fmt
from fttui.core.base.constants import FINAL_STATUSES
from fttui.core.base.fmt import fraction
from fttui.core.run.fold.snapshot import CardPerf, RunSnapshot
from fttui.core.run.fold.status import RUNNING, status_line
from fttui.core.run.row.row_figures import host_measure_text
from fttui.monitor import GpuInfo, cards_run_first
from fttui.tui.card_insight import estimate_peaks_mb, insight_lines, perf_line, perf_subtitle
from fttui.tui.plain import plain
from fttui.tui.widgets import RUN_MARK, Bar, Panel, bar_style, gb_pair, gpu_card_lines, gpu_row, num

SPARK_POINTS = 120  # history shown in the sparklines (RunState keeps 240)
WIDE_W = 30  # content width from which the throughput and loss lines add their dim extras
MAX_CARDS = 8
CARD_W = 36  # minimum width of one GPU card
CARD_H = 6  # 4 lines + border (compact)
CARD_H_FULL = 9  # + the memory picture, the estimate, the card's speed (fttui.tui.card_insight)
STATUS_KINDS = (RUNNING, *FINAL_STATUSES)


class RunStatusBar(Static):
    """The status line, coloured by its kind (the ``-running``, ``-completed``, ... classes)."""

    snapshot: var[RunSnapshot | None] = var(None)
    gone = var(False)
    lost = var(False)
    cancelling = var(False)

    def _draw(self) -> None:
        line = status_line(self.snapshot, gone=self.gone, lost=self.lost, cancelling=self.cancelling, detail=True)
        self.update(plain(line.text, lines=True, no_wrap=False))  # names errors, the run's messages: inert
        for kind in STATUS_KINDS:
            self.set_class(kind == line.kind, f"-{kind}")

    watch_snapshot = watch_gone = watch_lost = watch_cancelling = _draw


class RunProgress(Static):
    """The progress bar: step, elapsed, ETA, epoch."""

    snapshot: var[RunSnapshot | None] = var(None)

    def watch_snapshot(self, s: RunSnapshot | None) -> None:
        if s is None:
            return
        total = s.total_steps
        step = s.step or 0
        frac = (step / total) if total else None
        label = (
            f"step {step}/{total or '?'}  elapsed {fmt.duration(s.wall_elapsed) or '-'}  "
            f"ETA {fmt.eta(s.eta_s, s.eta_source) or '-'}"
        )
        if s.epoch is not None:
            label += f"  epoch {s.epoch:.2f}"
        self.update(Bar(frac, label, prefix="progress ", style="cyan"))


def _spark(sp: Sparkline, data) -> None:
    new = list(data[-SPARK_POINTS:])
    if list(sp.data or []) != new:
        sp.data = new


class ThroughputPanel(Vertical):
    """Samples/s and tokens/s (steady state) with their sparklines; the whole-run average and the
    padded rate when the panel is ``wide``."""

    snapshot: var[RunSnapshot | None] = var(None)
    wide = var(False)  # the content is at least WIDE_W cells wide (the loss panel follows it)

    def compose(self) -> ComposeResult:
        yield Static(id="sps-text")
        yield Sparkline([], id="sps-spark")
        yield Static(id="tps-text")
        yield Sparkline([], id="tps-spark")

    def on_mount(self) -> None:
        self.border_title = "throughput"
        self.border_subtitle = "steady state"

    def on_resize(self) -> None:
        self.wide = self.content_size.width >= WIDE_W

    def _draw(self) -> None:
        s = self.snapshot
        if s is None:
            return
        avg = f"  avg {num(s.samples_per_s_avg)}" if self.wide else ""
        self.query_one("#sps-text", Static).update(
            Text.assemble(("samples/s ", "bold"), num(s.samples_per_s), (avg, "dim"))
        )
        pad = ""
        if (
            self.wide
            and s.tokens_padded_per_s is not None
            and s.tokens_per_s is not None
            and abs(s.tokens_padded_per_s - s.tokens_per_s) > 0.5
        ):
            pad = f"  padded {num(s.tokens_padded_per_s, 0)}"
        self.query_one("#tps-text", Static).update(
            Text.assemble(("tokens/s ", "bold"), num(s.tokens_per_s, 0), (pad, "dim"))
        )
        _spark(self.query_one("#sps-spark", Sparkline), s.samples_per_s_history)
        _spark(self.query_one("#tps-spark", Sparkline), s.tokens_per_s_history)
        self.border_subtitle = plain(f"slow: {s.why_slow}") if s.why_slow else "steady state"  # core.run.whyslow

    watch_snapshot = watch_wide = _draw


class LossPanel(Vertical):
    """The loss and its sparkline; the minimum when the throughput panel beside it is wide (the
    two read alike)."""

    snapshot: var[RunSnapshot | None] = var(None)
    wide = var(False)

    def __init__(self, width_from: ThroughputPanel, **kwargs) -> None:
        super().__init__(**kwargs)
        self._width_from = width_from

    def compose(self) -> ComposeResult:
        yield Static(id="loss-text")
        yield Sparkline([], id="loss-spark")

    def on_mount(self) -> None:
        self.border_title = "loss"
        self.watch(self._width_from, "wide", self._follow_wide)

    def _follow_wide(self, wide: bool) -> None:
        self.wide = wide

    def _draw(self) -> None:
        s = self.snapshot
        if s is None:
            return
        loss = "-" if s.loss is None else f"{s.loss:.4f}"
        lo = ""
        if s.loss_history and self.wide:
            lo = f"  min {min(s.loss_history):.4f}"
        ev = (("  eval ", "bold"), f"{s.eval_loss:.4f}", (f" @{s.eval_step}", "dim")) if s.eval_loss is not None else ()
        self.query_one("#loss-text", Static).update(Text.assemble(("loss ", "bold"), loss, (lo, "dim"), *ev))
        _spark(self.query_one("#loss-spark", Sparkline), s.loss_history)

    watch_snapshot = watch_wide = _draw


class HostPanel(Panel):
    """Host RAM, swap and the process tree's RSS, now and its peak over the samples (named "tree":
    the row's host figure is another, the ranks' own peaks, labelled in the summary)."""

    snapshot: var[RunSnapshot | None] = var(None)

    def watch_snapshot(self, s: RunSnapshot | None) -> None:
        if s is None:
            return
        h = s.host
        if h is None:
            self.show(Text("no sample yet", style="dim"), key=("none",))
            return
        rf = fraction(h.ram_used_mb, h.ram_total_mb)
        swap = f"swap {gb_pair(h.swap_used_mb, h.swap_total_mb)}" if h.swap_total_mb else "swap none"
        rss = f"tree RSS {fmt.mb(h.tree_rss_mb)}" if h.tree_nprocs != 0 else "tree RSS - (ended)"
        self.show(
            Group(
                Bar(rf, gb_pair(h.ram_used_mb, h.ram_total_mb), prefix="RAM ", style=bar_style(rf)),
                Text(swap, no_wrap=True, overflow="ellipsis"),
                Text(rss, no_wrap=True, overflow="ellipsis"),
                Text(f"tree peak {fmt.mb(s.host_peak_tree_rss_mb)}", no_wrap=True, overflow="ellipsis"),
            ),
            key=(h, s.host_peak_tree_rss_mb),
        )


class Shown(NamedTuple):
    """A card as the panels show it: ``run`` marks it (CUDA_VISIBLE_DEVICES named it), ``slot`` is
    its CUDA device number in the run (the rank whose torch figures are its), ``None`` for a card
    the run does not use."""

    gpu: GpuInfo
    run: bool
    mig: bool
    slot: int | None


def _gpus(s: RunSnapshot | None) -> list[Shown]:
    """The cards to show, the run's first. Without CUDA_VISIBLE_DEVICES every card is the run's
    and none is marked."""
    if s is None or s.gpu is None:
        return []
    named = s.gpu.visible is not None
    out, slot = [], 0
    for c in cards_run_first(s.gpu):
        out.append(Shown(c.gpu, c.run and named, c.mig, slot if c.run else None))
        slot += c.run
    return out


def _rsv(s: RunSnapshot, c: Shown) -> float | None:
    return None if c.slot is None else s.torch_peak_reserved_mb.get(c.slot)


def _perf(s: RunSnapshot, c: Shown) -> CardPerf | None:
    """The run's per-card figures of a card the run uses."""
    if c.slot is None:
        return None
    return next((p for p in s.cards if p.index == c.gpu.index), None)


def gpu_layout(n: int, area: Size, full: bool = False) -> tuple[str, int, int]:
    """(mode, columns, rows) for ``n`` GPUs on a screen of ``area``: "full" cards in a grid for a
    few GPUs where they fit and there is more to show (``full``: a memory picture, a card's speed),
    "cards" (compact: without those lines) where only those fit, "table" (one line each) when
    neither does, "none" without GPUs."""
    width, height = area.width or 80, area.height or 24
    cols = max(1, min(n or 1, width // CARD_W, 4))
    rows = math.ceil(max(n, 1) / cols)
    mode = (
        "none"
        if n == 0
        else (
            "full"
            if full and n <= MAX_CARDS and rows * CARD_H_FULL <= height - 17
            else "cards"
            if n <= MAX_CARDS and rows * CARD_H <= max(CARD_H, height - 17)
            else "table"
        )
    )
    if n == 0:
        cols, rows = 1, 1
    return mode, cols, rows


class GpuGrid(Grid):
    """One card per GPU (memory bar, peaks, util/power/temp), or one card saying why there is none;
    hidden when the GPUs are shown as a table."""

    snapshot: var[RunSnapshot | None] = var(None)
    area = var(Size(0, 0), init=False)  # the screen's size; laid out again when it changes

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._count = -1
        self._mode = ""
        self._estimate: tuple[float, ...] | None = None  # the estimate's peak per card (MB), made once

    async def watch_snapshot(self, s: RunSnapshot | None) -> None:
        if s is not None:
            await self._layout(force=False)

    async def watch_area(self) -> None:
        await self._layout(force=True)

    async def _layout(self, force: bool) -> None:
        gpus = _gpus(self.snapshot)
        n = len(gpus)
        more = self.snapshot is not None and (
            bool(self.snapshot.rank_memory) or any(c.gpu.sm_clock_mhz is not None or c.gpu.throttle for c in gpus)
        )
        mode, cols, rows = gpu_layout(n, self.area, full=more)
        if force or n != self._count or mode != self._mode:
            changed = n != self._count or mode != self._mode
            self._count, self._mode = n, mode
            self.styles.grid_size_columns = cols
            self.styles.height = rows * {"cards": CARD_H, "full": CARD_H_FULL}.get(mode, 3)
            if changed:
                await self.remove_children()
                if mode in ("cards", "full"):
                    await self.mount_all([Panel(id=f"gpu-{i}", classes="gpu-card") for i in range(n)])
                elif mode == "none":
                    await self.mount(Panel(id="gpu-none", title="GPU", classes="gpu-card"))
            self.display = mode in ("cards", "full", "none")
        if self.snapshot is not None:
            self._fill(self.snapshot, gpus)

    def _fill(self, s: RunSnapshot, gpus: list) -> None:
        if self._mode == "none":
            reason = "-"
            if s.gpu is not None:
                reason = s.gpu.reason or "no GPU visible"
            elif s.samples_seen == 0:
                reason = "no resource sample yet"
            for w in self.query("#gpu-none").results(Panel):
                w.show(plain(f"none: {reason}", no_wrap=True, overflow="ellipsis"), key=reason)
            return
        if self._mode not in ("cards", "full"):
            return
        peaks, proc = s.gpu_peak_used_mb, s.gpu_peak_proc_mb
        if self._mode == "full" and self._estimate is None:
            self._estimate = estimate_peaks_mb(s.config) or ()
        estimates = self._estimate or ()
        for i, c in enumerate(gpus):
            g = c.gpu
            perf = _perf(s, c)
            near = perf is not None and perf.near_oom
            for w in self.query(f"#gpu-{i}").results(Panel):
                title = plain(f"GPU {g.index}" + (f" {RUN_MARK}" if c.run else "") + (" MIG" if c.mig else ""))
                if near:
                    title.append(" ").append("NEAR OOM", "bold red")
                w.border_title = title
                w.border_subtitle = plain(g.name)  # NVML's, or a fake GPU file's: inert
                w.set_class(c.run, "-run")
                w.set_class(near, "-near-oom")
                est = estimates[c.slot] if c.slot is not None and c.slot < len(estimates) else None
                more = insight_lines(s, g, c.slot, est) if self._mode == "full" else []
                w.show(
                    Group(
                        *gpu_card_lines(g, peaks.get(g.index), _rsv(s, c), run=c.run, run_peak_mb=proc.get(g.index)),
                        *more,
                        perf_line(g, perf),
                    ),
                    key=(c, peaks.get(g.index), _rsv(s, c), proc.get(g.index), perf, *map(str, more)),
                )


class GpuTable(Panel):
    """One line per GPU, shown instead of the cards when they do not fit."""

    snapshot: var[RunSnapshot | None] = var(None)
    area = var(Size(0, 0))  # the screen's size

    def on_mount(self) -> None:
        self.display = False

    def _draw(self) -> None:
        gpus = _gpus(self.snapshot)
        mode = gpu_layout(len(gpus), self.area)[0]
        self.display = mode == "table"
        s = self.snapshot
        if mode != "table" or s is None:  # no snapshot: no card, so no table
            return
        self.styles.height = len(gpus) + 2
        self.border_subtitle = plain(perf_subtitle(s))
        peaks, proc = s.gpu_peak_used_mb, s.gpu_peak_proc_mb
        self.show(
            Group(
                *[
                    gpu_row(c.gpu, peaks.get(c.gpu.index), _rsv(s, c), run=c.run, run_peak_mb=proc.get(c.gpu.index))
                    for c in gpus
                ]
            ),
            key=(
                tuple(gpus),
                tuple(sorted(peaks.items())),
                tuple(sorted(proc.items())),
                tuple(sorted(s.torch_peak_reserved_mb.items())),
            ),
        )

    watch_snapshot = watch_area = _draw


class RunSummary(Panel):
    """The summary row once the run ended (hidden until then); ``row`` is row.json's object, or
    ``None`` when the run has no row."""

    row: var[dict | None] = var(None, init=False, always_update=True)

    def on_mount(self) -> None:
        self.display = False

    def watch_row(self, row: dict | None) -> None:
        from fttui.core.results.tables import reference_table

        if not isinstance(row, dict):
            self.show(Text("no summary row", style="dim"))
        else:
            headers, body = reference_table([row])
            skip = ("model", "dataset", "status", "grad_accum", "max_seq_len")
            # row.json's texts (a model, a data label, a GPU name) anyone could have written: inert
            cells = [
                Text.assemble((f"{h} ", "bold"), plain(v or "-")) for h, v in zip(headers, body[0]) if h not in skip
            ]
            self.border_title = plain(summary_title(row))
            # what the host figure is (the host panel's "tree peak" is another one)
            what = host_measure_text(row.get("host_measure"))
            shown = what and row.get("peak_host_rss_mb") is not None
            self.border_subtitle = plain(f"host_rss_mb: {what}") if shown else ""
            # the error is in the status line already; an out of memory's phase and the estimate's
            # term that grew are not (fttui.core.run.row.oomexplain)
            columns = Columns(cells, padding=(0, 2))
            why = row.get("oom_explained")
            held = row.get("oom_held")  # a CUDA one's snapshot (fttui.core.run.row.oomheld)
            if why:
                head = Text("out of memory in the ", style="bold red")
                more = [Text.assemble(("held: ", "bold"), plain(str(held)))] if held else []
                self.show(Group(columns, Text.assemble(head, plain(str(why))), *more))
            else:
                self.show(columns)
        self.display = True


def summary_title(row: dict) -> str:
    """``summary: tiny-llama on alpaca, steps 20/20, wall 00:12``: only what the row knows (no
    "on ?" for synthetic data, no steps for a command that reported none)."""
    parts = [
        f"summary: {row.get('model') or row.get('profile') or 'run'}"
        + (f" on {row['dataset']}" if row.get("dataset") else "")
    ]
    if row.get("steps") is not None:
        parts.append(f"steps {row['steps']}/{row.get('total_steps') or '?'}")
    parts.append(f"wall {fmt.duration(row.get('wall_s')) or '-'}")
    return ", ".join(parts)
