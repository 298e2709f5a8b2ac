"""Run screen: live panels of one run, fed by fttui.core.run.control.watch.RunFollower twice a second.

The screen polls the run directory and assigns what it learnt to its vars (``snap``, the run's
``RunSnapshot``; ``gone``, ``lost``, ``cancel_requested``; ``area``, its size); each panel
(fttui.tui.run_panels) is bound to them with ``data_bind`` and draws itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.geometry import Size
from textual.reactive import var
from textual.screen import Screen
from textual.widgets import Footer, Header

from fttui.core.run.files.rundir import RunDir
from fttui.core.run.files.statusfile import FinalStatus
from fttui.core.run.fold.snapshot import RunSnapshot
from fttui.core.run.fold.status import StatusLine, status_line
from fttui.tui.host import host
from fttui.tui.run_panels import (
    GpuGrid,
    GpuTable,
    HostPanel,
    LossPanel,
    RunProgress,
    RunStatusBar,
    RunSummary,
    ThroughputPanel,
)
from fttui.tui.widgets import LogTail

if TYPE_CHECKING:
    from textual.timer import Timer

    from fttui.core.run.control.watch import RunFollower

POLL_S = 0.5
# Between polls, a stat() of events.jsonl this often: a new event (a step, the end, an error)
# is shown at once instead of up to POLL_S later. Resource samples keep the POLL_S pace.
WATCH_S = 0.1


class RunScreen(Screen):
    BINDINGS = [
        Binding("c", "cancel_run", "Cancel run"),
        Binding("k", "ranks", "Ranks"),
        Binding("escape", "back", "Back", show=False),
    ]

    snap: var[RunSnapshot | None] = var(None)  # the latest snapshot (the supervisor's verdict folded in)
    gone = var(False)  # the run directory was deleted
    lost = var(False)  # the supervisor is gone without writing a status
    cancel_requested = var(False)  # this screen asked the supervisor to cancel
    area = var(Size(0, 0))  # the screen's size (the GPU panels choose cards or lines by it)

    def __init__(self, rd: RunDir) -> None:
        super().__init__()
        self.rd = rd
        self.follower: RunFollower | None = None
        self._final: FinalStatus | None = None
        self._row_shown = False
        self._timer: Timer | None = None
        self._watch_timer: Timer | None = None
        self._events_sig: tuple | None = None
        self._refreshing = False

    @property
    def final(self) -> FinalStatus | None:
        """The run's final status (``status.json``) once the supervisor wrote it."""
        return self._final

    def _ended(self) -> bool:
        return self._final is not None

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        snap = RunScreen.snap
        yield Header()
        yield RunStatusBar(id="run-status").data_bind(
            RunScreen.gone, RunScreen.lost, snapshot=snap, cancelling=RunScreen.cancel_requested
        )
        yield RunProgress(id="run-progress").data_bind(snapshot=snap)
        yield GpuGrid(id="gpu-grid").data_bind(RunScreen.area, snapshot=snap)
        yield GpuTable(id="gpu-table", title="GPUs").data_bind(RunScreen.area, snapshot=snap)
        with Horizontal(id="run-middle"):
            throughput = ThroughputPanel(id="throughput", classes="panel").data_bind(snapshot=snap)
            yield throughput
            yield LossPanel(throughput, id="loss", classes="panel").data_bind(snapshot=snap)
            yield HostPanel(id="host", title="host", classes="panel").data_bind(snapshot=snap)
        yield RunSummary(id="run-summary", title="summary")
        yield LogTail(self.rd.log_path, id="log")
        yield Footer()

    async def on_mount(self) -> None:
        from fttui.core.run.control.watch import RunFollower

        self.sub_title = self.rd.run_id
        self.query_one("#log").border_title = "train.log"
        self.area = self.size
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
        if self._timer is not None and not self._ended():
            self._timer.reset()  # the next plain poll is POLL_S after this refresh

    def _stop_timers(self) -> None:
        for t in (self._timer, self._watch_timer):
            if t is not None:
                t.stop()

    def on_resize(self) -> None:
        self.area = self.size

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
            self._stop_timers()
            return
        self._events_sig = self._events_signature()
        if self.follower is None:
            from fttui.core.run.control.watch import RunFollower

            self.follower = RunFollower(self.rd)
        try:
            self.snap = self.follower.poll()
            self._final = self.follower.final
            self.lost = self.follower.lost()
        except OSError:
            pass
        log = self.query_one(LogTail)
        log.poll()
        if self._ended() and not self._row_shown:
            self.query_one(RunSummary).row = self.rd.row()
            self._row_shown = True
        if self._ended() or self.lost:
            # one more read of the log lines written last, then stop polling
            log.poll()
            self._stop_timers()
            self._follow_next_attempt()

    def _follow_next_attempt(self) -> None:
        """A run that ran out of memory and is continued by another attempt (``train.on_oom =
        "shrink"``, fttui.core.run.launching.oomretry): this screen gives way to the next attempt's."""
        from fttui.core.run.control.watch import next_attempt

        nxt = next_attempt(self.rd, getattr(self.snap, "retried_as", None))
        if nxt is None or not self.is_current:
            return
        self.notify(f"{self.rd.run_id} ran out of memory: attempt {nxt.run_id} continues it", markup=False)
        self.app.switch_screen(RunScreen(nxt))

    # ------------------------------------------------------------------ status
    def status_text(self) -> StatusLine:
        """(text, kind) of the status line; kind picks the colour class."""
        return status_line(self.snap, gone=self.gone, lost=self.lost, cancelling=self.cancel_requested, detail=True)

    # ------------------------------------------------------------------ actions
    def action_ranks(self) -> None:
        """Each rank's compute and wait, the straggler, where each rank is (fttui.tui.ranks_view)."""
        from fttui.tui.ranks_view import RanksScreen

        self.app.push_screen(RanksScreen(self))

    def action_cancel_run(self) -> None:
        if self.gone or self._ended() or self.lost:
            self.notify("the run is not live", severity="warning", markup=False)
            return
        from fttui.tui.dialogs import ConfirmScreen

        def done(ok: bool | None) -> None:
            if ok:
                from fttui.core.base.errors import FttuiError
                from fttui.core.run.control.executors import executor_for

                try:
                    executor_for(self.rd).cancel()  # a Slurm job's: scancel, as `fttui cancel`
                except (OSError, FttuiError) as e:
                    self.notify(f"cancel failed: {e}", severity="error", markup=False)
                    return
                self.cancel_requested = True

        self.app.push_screen(
            ConfirmScreen(f"Cancel run {self.rd.run_id}?", "The supervisor stops the training processes."), done
        )

    def action_back(self) -> None:
        if host(self).can_go_back():
            self.app.pop_screen()
