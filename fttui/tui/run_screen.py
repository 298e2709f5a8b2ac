"""Run screen: live panels of one run, fed by fttui.core.run.watch.RunFollower twice a second."""

from __future__ import annotations

import math

from rich.columns import Columns
from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Header, Sparkline, Static

from fttui.core.base import fmt
from fttui.core.run.rundir import RunDir, read_json
from fttui.core.base.fmt import fraction
from fttui.tui.widgets import Bar, LogTail, Panel, bar_style, gb_pair, gpu_card_lines, gpu_row, num

POLL_S = 0.5
# Between polls, a stat() of events.jsonl this often: a new event (a step, the end, an error)
# is shown at once instead of up to POLL_S later. Resource samples keep the POLL_S pace.
WATCH_S = 0.1
SPARK_POINTS = 120  # history shown in the sparklines (RunState keeps 240)
MAX_CARDS = 8
CARD_W = 36  # minimum width of one GPU card
CARD_H = 5  # 3 lines + border


class RunScreen(Screen):
    BINDINGS = [
        Binding("c", "cancel_run", "Cancel run"),
        Binding("escape", "back", "Back", show=False),
    ]

    def __init__(self, rd: RunDir) -> None:
        super().__init__()
        self.rd = rd
        self.follower = None
        self.snap = None
        self.final: dict | None = None
        self.cancel_requested = False
        self.gone = False
        self.lost = False
        self._gpu_count = -1
        self._gpu_mode = ""
        self._row_shown = False
        self._timer = None
        self._watch_timer = None
        self._events_sig: tuple | None = None
        self._refreshing = False

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="run-status")
        yield Static(id="run-progress")
        yield Grid(id="gpu-grid")
        yield Panel(id="gpu-table", title="GPUs")
        with Horizontal(id="run-middle"):
            with Vertical(id="throughput", classes="panel"):
                yield Static(id="sps-text")
                yield Sparkline([], id="sps-spark")
                yield Static(id="tps-text")
                yield Sparkline([], id="tps-spark")
            with Vertical(id="loss", classes="panel"):
                yield Static(id="loss-text")
                yield Sparkline([], id="loss-spark")
            yield Panel(id="host", title="host", classes="panel")
        yield Panel(id="run-summary", title="summary")
        yield LogTail(self.rd.log_path, id="log")
        yield Footer()

    async def on_mount(self) -> None:
        from fttui.core.run.watch import RunFollower

        self.sub_title = self.rd.run_id
        self.query_one("#throughput").border_title = "throughput"
        self.query_one("#throughput").border_subtitle = "steady state"
        self.query_one("#loss").border_title = "loss"
        self.query_one("#log").border_title = "train.log"
        self.query_one("#run-summary").display = False
        self.query_one("#gpu-table").display = False
        try:
            self.follower = RunFollower(self.rd)
        except OSError:
            self.follower = None
        await self.refresh_data()
        self._timer = self.set_interval(POLL_S, self.refresh_data)
        if WATCH_S:
            self._watch_timer = self.set_interval(WATCH_S, self._watch_events)

    def _events_signature(self) -> tuple | None:
        try:
            st = self.rd.events_path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    async def _watch_events(self) -> None:
        """Refresh now when events.jsonl changed since the last refresh (a cheap stat)."""
        if self._refreshing or self._events_signature() == self._events_sig:
            return
        await self.refresh_data()
        if self._timer is not None and self.final is None:
            self._timer.reset()  # the next plain poll is POLL_S after this refresh

    def _stop_timers(self) -> None:
        for t in (self._timer, self._watch_timer):
            if t is not None:
                t.stop()

    async def on_resize(self) -> None:
        await self._layout_gpus(force=True)
        if self.snap is not None:
            await self._update_panels(self.snap)

    # ------------------------------------------------------------------ data
    async def refresh_data(self) -> None:
        """Poll the run directory and update the panels (never raises)."""
        if self._refreshing:  # the two timers never overlap a refresh
            return
        self._refreshing = True
        try:
            await self._refresh_data()
        finally:
            self._refreshing = False

    async def _refresh_data(self) -> None:
        if not self.rd.exists():
            self.gone = True
            self._show_status()
            self._stop_timers()
            return
        self._events_sig = self._events_signature()
        if self.follower is None:
            from fttui.core.run.watch import RunFollower

            self.follower = RunFollower(self.rd)
        try:
            self.snap = self.follower.poll()
            self.final = self.follower.final
            self.lost = self.follower.lost()
        except OSError:
            pass
        self.query_one(LogTail).poll()
        if self.snap is not None:
            await self._update_panels(self.snap)
        self._show_status()
        if self.final is not None and not self._row_shown:
            self._show_summary()
        if self.final is not None or self.lost:
            # one more read of the log lines written last, then stop polling
            self.query_one(LogTail).poll()
            self._stop_timers()

    async def _update_panels(self, s) -> None:
        # progress
        total = s.total_steps
        step = s.step or 0
        frac = (step / total) if total else None
        label = f"step {step}/{total or '?'}  elapsed {fmt.duration(s.wall_elapsed) or '-'}  " \
                f"ETA {fmt.duration(s.eta_s) or '-'}"
        if s.epoch is not None:
            label += f"  epoch {s.epoch:.2f}"
        self.query_one("#run-progress", Static).update(Bar(frac, label, prefix="progress ", style="cyan"))

        # throughput and loss
        wide = self.query_one("#throughput").content_size.width >= 30
        avg = f"  avg {num(s.samples_per_s_avg)}" if wide else ""
        self.query_one("#sps-text", Static).update(
            Text.assemble(("samples/s ", "bold"), num(s.samples_per_s), (avg, "dim")))
        pad = ""
        if wide and s.tokens_padded_per_s is not None and s.tokens_per_s is not None \
                and abs(s.tokens_padded_per_s - s.tokens_per_s) > 0.5:
            pad = f"  padded {num(s.tokens_padded_per_s, 0)}"
        self.query_one("#tps-text", Static).update(
            Text.assemble(("tokens/s ", "bold"), num(s.tokens_per_s, 0), (pad, "dim")))
        self._spark("#sps-spark", s.samples_per_s_history)
        self._spark("#tps-spark", s.tokens_per_s_history)
        loss = "-" if s.loss is None else f"{s.loss:.4f}"
        lo = ""
        if s.loss_history and wide:
            lo = f"  min {min(s.loss_history):.4f}"
        self.query_one("#loss-text", Static).update(Text.assemble(("loss ", "bold"), loss, (lo, "dim")))
        self._spark("#loss-spark", s.loss_history)

        # host
        h = s.host
        host = self.query_one("#host", Panel)
        if h is None:
            host.show(Text("no sample yet", style="dim"), key=("none",))
        else:
            rf = fraction(h.ram_used_mb, h.ram_total_mb)
            swap = f"swap {gb_pair(h.swap_used_mb, h.swap_total_mb)}" if h.swap_total_mb else "swap none"
            rss = f"train RSS {fmt.mb(h.tree_rss_mb)}" if h.tree_nprocs != 0 else "train RSS - (ended)"
            host.show(Group(
                Bar(rf, gb_pair(h.ram_used_mb, h.ram_total_mb), prefix="RAM ", style=bar_style(rf)),
                Text(swap, no_wrap=True, overflow="ellipsis"),
                Text(rss, no_wrap=True, overflow="ellipsis"),
                Text(f"peak RSS {fmt.mb(s.host_peak_tree_rss_mb)}", no_wrap=True, overflow="ellipsis"),
            ), key=(h, s.host_peak_tree_rss_mb))

        # GPUs
        await self._layout_gpus()
        self._update_gpus(s)

    def _spark(self, selector: str, data) -> None:
        sp = self.query_one(selector, Sparkline)
        new = list(data[-SPARK_POINTS:])
        if list(sp.data or []) != new:
            sp.data = new

    def _gpus(self):
        s = self.snap
        if s is None or s.gpu is None or not s.gpu.available:
            return []
        return list(s.gpu.gpus)

    async def _layout_gpus(self, force: bool = False) -> None:
        """Cards in a grid for a few GPUs, one line each when they do not fit."""
        gpus = self._gpus()
        n = len(gpus)
        width, height = self.size.width or 80, self.size.height or 24
        grid = self.query_one("#gpu-grid", Grid)
        table = self.query_one("#gpu-table", Panel)
        cols = max(1, min(n or 1, width // CARD_W, 4))
        rows = math.ceil(max(n, 1) / cols)
        mode = "none" if n == 0 else ("cards" if n <= MAX_CARDS and rows * CARD_H <= max(CARD_H, height - 17) else "table")
        if n == 0:
            cols, rows = 1, 1
        if not force and n == self._gpu_count and mode == self._gpu_mode:
            return
        changed = n != self._gpu_count or mode != self._gpu_mode
        self._gpu_count, self._gpu_mode = n, mode
        grid.styles.grid_size_columns = cols
        grid.styles.height = rows * CARD_H if mode == "cards" else 3
        if changed:
            await grid.remove_children()
            if mode == "cards":
                await grid.mount_all([Panel(id=f"gpu-{i}", classes="gpu-card") for i in range(n)])
            elif mode == "none":
                await grid.mount(Panel(id="gpu-none", title="GPU", classes="gpu-card"))
        grid.display = mode in ("cards", "none")
        table.display = mode == "table"
        if mode == "table":
            table.styles.height = n + 2

    def _update_gpus(self, s) -> None:
        gpus = self._gpus()
        if self._gpu_mode == "none":
            reason = "-"
            if s.gpu is not None:
                reason = s.gpu.reason or "no GPU visible"
            elif s.samples_seen == 0:
                reason = "no resource sample yet"
            for w in self.query("#gpu-none").results(Panel):
                w.show(Text(f"none: {reason}", no_wrap=True, overflow="ellipsis"), key=reason)
            return
        peaks, rsv = s.gpu_peak_used_mb, s.torch_peak_reserved_mb
        if self._gpu_mode == "table":
            self.query_one("#gpu-table", Panel).show(
                Group(*[gpu_row(g, peaks.get(g.index), rsv.get(g.index)) for g in gpus]),
                key=(tuple(gpus), tuple(sorted(peaks.items())), tuple(sorted(rsv.items()))))
            return
        for i, g in enumerate(gpus):
            for w in self.query(f"#gpu-{i}").results(Panel):
                w.border_title = f"GPU {g.index}"
                w.border_subtitle = g.name or ""
                w.show(Group(*gpu_card_lines(g, peaks.get(g.index), rsv.get(g.index))),
                       key=(g, peaks.get(g.index), rsv.get(g.index)))

    # ------------------------------------------------------------------ status
    def status_text(self) -> tuple[str, str]:
        """(text, kind) of the status line; kind picks the colour class."""
        from fttui.core.run.status import status_line

        if self.gone:
            return "RUN DIRECTORY DELETED: nothing more to show (the run may still be going)", "failed"
        s = self.snap
        if s is None:
            return "STARTING", "running"
        st = (self.final or {}).get("status") or s.status
        text = status_line(s, self.final)
        if self.final is None:
            if self.lost:
                return "LOST: the supervisor is gone without writing a status", "failed"
            if self.cancel_requested:
                return "CANCELLING: waiting for the supervisor to stop the run", "cancelled"
            if st in ("starting",):
                return "STARTING: loading the model", "running"
        if st == "failed" and s.error and s.error.get("step") is not None:
            text += f" (step {s.error['step']})"
        return text, st if st in ("completed", "failed", "oom", "cancelled") else "running"

    def _show_status(self) -> None:
        text, kind = self.status_text()
        w = self.query_one("#run-status", Static)
        w.update(Text(text, no_wrap=False))
        for k in ("running", "completed", "failed", "oom", "cancelled"):
            w.set_class(k == kind, f"-{k}")

    def _show_summary(self) -> None:
        from fttui.core.results.tables import reference_table

        row = read_json(self.rd.path / "row.json")
        w = self.query_one("#run-summary", Panel)
        if not isinstance(row, dict):
            if self.final is None:
                return
            w.show(Text("no summary row", style="dim"))
        else:
            headers, body = reference_table([row])
            skip = ("model", "dataset", "status", "grad_accum", "max_seq_len")
            cells = [Text.assemble((f"{h} ", "bold"), v or "-") for h, v in zip(headers, body[0])
                     if h not in skip]
            w.border_title = (f"summary: {row.get('model') or '?'} on {row.get('dataset') or '?'}, "
                              f"steps {row.get('steps')}/{row.get('total_steps')}, "
                              f"wall {fmt.duration(row.get('wall_s')) or '-'}")
            # the error is in the status line already
            w.show(Columns(cells, padding=(0, 2)))
        w.display = True
        self._row_shown = True

    # ------------------------------------------------------------------ actions
    def action_cancel_run(self) -> None:
        if self.gone or self.final is not None or self.lost:
            self.notify("the run is not live", severity="warning")
            return
        from fttui.tui.dialogs import ConfirmScreen

        def done(ok: bool | None) -> None:
            if ok:
                try:
                    self.rd.request_cancel()
                except OSError as e:
                    self.notify(f"cancel failed: {e}", severity="error")
                    return
                self.cancel_requested = True
                self._show_status()

        self.app.push_screen(ConfirmScreen(f"Cancel run {self.rd.run_id}?",
                                           "The supervisor stops the training processes."), done)

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
