"""Probe screen: find the largest batch size / sequence length that fits, trial by trial.

Opened with ``p`` on a profile in the picker (with the picker's overrides). The OOM-boundary
probe (fttui.core.experiments.probe.Prober) runs in a thread worker; each trial is posted to the screen as a
message and added to the table at once. When the probe ends, the boundary (largest value that
fits, smallest that fails) is shown in a highlighted panel, and ``enter`` (or ``l``) launches a
full run of the profile at the largest value that fits.

Leaving the screen (escape) or quitting the app while a probe runs stops it: the probe process
is killed and no further model load starts.

This module owns the screen: its phase (``state``, a :class:`~fttui.tui.probe_view.ProbeState`),
the thread worker that runs the probe and the messages it posts, stopping, and the launch of the
full run. The form's fields live in fttui.tui.probe_form, the table rows, boundary panel and
status texts in fttui.tui.probe_view.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, Checkbox, DataTable, Footer, Header, Input, Select, Static

from fttui.core.base.constants import PROBE_PARAMS
from fttui.core.base.errors import FttuiError
from fttui.core.profiles.typed import Profile
from fttui.tui.host import host
from fttui.tui.plain import plain
from fttui.tui.probe_form import LIMIT_FIELDS, ProbeForm, compose_form, parse_form
from fttui.tui.probe_view import (
    BOUNDARY_KINDS,
    COLUMNS,
    ProbeState,
    boundary_kind,
    boundary_text,
    status_line,
    table_trials,
    trial_marker,
    trial_row,
)

if TYPE_CHECKING:
    from textual.timer import Timer

    from fttui.core.experiments.probe import Prober


class ProbeStopped(Exception):
    """Raised inside the probe's callbacks once the probe was asked to stop: it ends
    ``Prober.run()`` before another model load starts (its ``finally`` kills the process)."""


class ProbeScreen(Screen):
    """The probe of one resolved profile. ``result=`` shows a recorded ProbeResult (no probe runs)."""

    BINDINGS = [
        Binding("s", "start", "Start probe"),
        Binding("enter", "launch", "Run at found value", show=False),
        Binding("l", "launch", "Run at found value"),
        Binding("x", "stop_probe", "Stop probe"),
        Binding("escape", "back", "Back"),
    ]
    prober: Prober | None  # the probe running (or last run) from this screen
    _tick: Timer | None  # the status line's timer while a probe runs

    # ---------------------------------------------------------------- messages from the worker
    class TrialDone(Message):
        def __init__(self, token: int, trial) -> None:
            super().__init__()
            self.token, self.trial = token, trial

    class Log(Message):
        def __init__(self, token: int, text: str) -> None:
            super().__init__()
            self.token, self.text = token, text

    class Finished(Message):
        def __init__(self, token: int, result=None, error: str | None = None, stopped: bool = False) -> None:
            super().__init__()
            self.token, self.result, self.error, self.stopped = token, result, error, stopped

    # ---------------------------------------------------------------- state
    def __init__(self, resolved: Profile, result=None) -> None:
        super().__init__()
        self.resolved = resolved  # the picker's profile with its overrides
        self.state = ProbeState.IDLE  # the one source of what the screen is doing
        self.prober = None
        self.probe_resolved: Profile | None = None  # the profile the probe runs (limits applied)
        self.result = result
        self.trials: list = list(result.trials) if result is not None else []
        self.log_line = ""
        self.error = ""
        self.started = 0.0
        self._token = 0
        self._stop_requested: set[int] = set()
        self._worker_done: threading.Event | None = None
        self._tick = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield from compose_form(self.resolved.limits, self.result)
        yield Static(id="probe-status")
        yield Static(id="probe-boundary")
        yield DataTable(id="trials", cursor_type="row", zebra_stripes=False)
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"probe: {self.resolved.name or '?'}"
        table = self.query_one("#trials", DataTable)
        table.border_title = "trials"
        for c in COLUMNS:
            table.add_column(c, key=c or "mark")
        self.query_one("#probe-boundary", Static).display = False
        if self.result is not None:
            self.state = ProbeState.DONE
            self.probe_resolved = self.resolved
            self._fill_table()
            self._show_boundary()
            table.focus()
        else:
            self.query_one("#pr-start", Button).focus()
        self._show_status()

    def on_unmount(self) -> None:
        self.stop_probe(show=False)

    # ---------------------------------------------------------------- the form
    def _form(self) -> ProbeForm:
        """The form's values; FttuiError on bad input."""
        values: dict = {
            fid: self.query_one(f"#pr-{fid}", Input).value
            for fid in ("lo", "hi", "steps", "repeats", *(f for f, _ in LIMIT_FIELDS))
        }
        values["param"] = self.query_one("#pr-param", Select).value
        values["data"] = self.query_one("#pr-data", Checkbox).value
        return parse_form(values, self.resolved.limits)

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_start()

    @on(Button.Pressed, "#pr-start")
    def _start_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_start()

    @on(DataTable.RowSelected, "#trials")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_launch()

    # ---------------------------------------------------------------- running the probe
    def action_start(self) -> None:
        if self.state is ProbeState.RUNNING:
            self.notify("a probe is running: x stops it", severity="warning", markup=False)
            return
        from fttui.core.experiments.probe import Prober
        from fttui.core.profiles import apply_overrides

        try:
            form = self._form()
            param, lo, hi, steps, overrides = form.param, form.lo, form.hi, form.steps, form.overrides
            resolved = apply_overrides(self.resolved, overrides) if overrides else self.resolved  # origin kept
            self._token += 1
            token = self._token
            prober = Prober(
                resolved,
                param=param,
                lo=lo,
                hi=hi,
                steps=steps,
                repeats=form.repeats,
                data=form.data,
                on_trial=lambda t: self._from_worker(token, self.TrialDone(token, t)),
                on_log=lambda s: self._from_worker(token, self.Log(token, s)),
            )
        except FttuiError as e:
            self.state, self.error = ProbeState.ERROR, str(e)
            self._show_status()
            return
        self.prober, self.probe_resolved = prober, resolved
        self.result, self.trials, self.error = None, [], ""
        self.log_line = (
            f"{param} in {lo}..{hi}, {steps} step{'s' if steps != 1 else ''} per trial, "
            + (
                "the data's longest samples"
                if form.data
                else f"every sample {resolved.data.max_seq_len} tokens (worst case)"
            )
            + (
                f", {form.repeats} repeat{'s' if form.repeats != 1 else ''} next to the boundary"
                if form.repeats
                else ""
            )
            + f"; at most {prober.max_loads} {prober.unit}"
        )
        self.state, self.started = ProbeState.RUNNING, time.time()
        self._worker_done = threading.Event()
        self.query_one("#probe-boundary", Static).display = False
        self._fill_table()
        self.query_one("#trials", DataTable).focus()
        self._show_status()
        if self._tick is None:
            self._tick = self.set_interval(1.0, self._show_status)
        self._run_probe(prober, token, self._worker_done)

    def _from_worker(self, token: int, message: Message) -> None:
        """Called in the worker thread by the prober: hand the news to the screen, or end the
        probe when it was asked to stop."""
        if token in self._stop_requested:
            raise ProbeStopped()
        try:
            self.post_message(message)
        except RuntimeError:  # the app's loop is closing
            pass

    @work(thread=True, exclusive=True, group="probe", exit_on_error=False)
    def _run_probe(self, prober, token: int, done: threading.Event) -> None:
        msg = None
        try:
            self._predict_start(prober, token)
            res = prober.run()
            msg = self.Finished(token, result=res, stopped=token in self._stop_requested)
        except ProbeStopped:
            msg = self.Finished(token, stopped=True)
        except FttuiError as e:
            msg = self.Finished(token, error=str(e), stopped=token in self._stop_requested)
        except Exception as e:  # kept broad: the thread must never die silently, any failure is shown
            msg = self.Finished(token, error=f"{type(e).__name__}: {e}", stopped=token in self._stop_requested)
        finally:
            try:
                prober.stop()
            finally:
                done.set()
                if msg is not None:
                    try:
                        self.post_message(msg)
                    except RuntimeError:
                        pass

    def _predict_start(self, prober, token: int) -> None:
        """Start where the estimator predicts the boundary (GPU profiles), as `fttui probe` does."""
        from fttui.core.experiments.probe import predicted_start

        try:
            start, why = predicted_start(prober.resolved, prober.param, prober.lo, prober.hi)
        except (FttuiError, OSError) as e:  # a bad budget, an unreadable GPU: it only costs model loads
            start, why = None, f"no prediction ({type(e).__name__}: {e})"
        if start:
            prober.start = max(prober.lo, min(prober.hi, int(start)))
        self._from_worker(token, self.Log(token, why))

    @on(TrialDone)
    def _trial_done(self, message: TrialDone) -> None:
        if message.token != self._token:
            return
        self.trials.append(message.trial)
        self._add_row(message.trial, len(self.trials) - 1)
        self._show_status()

    @on(Log)
    def _log(self, message: Log) -> None:
        if message.token == self._token:
            self.log_line = message.text
            self._show_status()

    @on(Finished)
    def _finished(self, message: Finished) -> None:
        if message.token != self._token:
            return
        if self._tick is not None:
            self._tick.stop()
            self._tick = None
        if message.stopped:
            self.state = ProbeState.STOPPED
        elif message.error:
            self.state, self.error = ProbeState.ERROR, message.error
        else:
            self.state, self.result = ProbeState.DONE, message.result
            self.trials = list(message.result.trials)
            self._fill_table()
            self._show_boundary()
            self.query_one("#trials", DataTable).focus()
        self._show_status()

    def stop_probe(self, show: bool = True) -> bool:
        """Stop a running probe (kills its process; no further model load). True if one ran."""
        prober, done = self.prober, self._worker_done
        if self.state is not ProbeState.RUNNING or prober is None:
            return False
        self._stop_requested.add(self._token)
        prober.stop()
        if done is not None:
            # A process started between the stop and the worker noticing it: kill it too.
            def reap() -> None:
                deadline = time.monotonic() + 30
                while not done.wait(0.1) and time.monotonic() < deadline:
                    prober.stop()

            threading.Thread(target=reap, name="fttui-probe-reaper", daemon=True).start()
        self.state = ProbeState.STOPPED
        if self._tick is not None:
            self._tick.stop()
            self._tick = None
        if show:
            self._show_status()
        return True

    def action_stop_probe(self) -> None:
        if not self.stop_probe():
            self.notify("no probe is running", severity="warning", markup=False)

    # ---------------------------------------------------------------- display
    def _add_row(self, t, index: int) -> None:
        self.query_one("#trials", DataTable).add_row(*trial_row(t, self.result), key=str(index))

    def _fill_table(self) -> None:
        table = self.query_one("#trials", DataTable)
        table.clear()
        trials = table_trials(self.trials, self.result)
        for i, t in enumerate(trials):
            table.add_row(*trial_row(t, self.result), key=str(i))
        if self.result is not None and self.result.largest_fit is not None:
            for i, t in enumerate(trials):
                if trial_marker(t, self.result) and t.status == "fit":
                    table.move_cursor(row=i, animate=False)
                    break

    def _show_boundary(self) -> None:
        res = self.result
        w = self.query_one("#probe-boundary", Static)
        w.update(boundary_text(res, self._probe_only_limits()))
        w.border_title = plain(f"{res.param} boundary")
        kind = boundary_kind(res)
        for k in BOUNDARY_KINDS:
            w.set_class(k == kind, f"-{k}")
        w.display = True

    def _probe_only_limits(self) -> dict:
        """Limits set in the probe's fields that differ from the profile's own."""
        own = self.resolved.limits.to_dict()
        ran = (self.probe_resolved or self.resolved).limits.to_dict()
        return {k: v for k, v in ran.items() if v != own.get(k)}

    def status_text(self) -> tuple[str, str]:
        """(text, kind) of the status line; the kind is the state's value."""
        pid = self.prober.probe_id if self.prober is not None else (self.result.probe_id if self.result else "")
        text = status_line(
            self.state,
            name=self.resolved.name or "?",
            probe_id=pid,
            elapsed_s=time.time() - self.started,
            trials=len(self.trials),
            log_line=self.log_line,
            error=self.error,
            result=self.result,
        )
        return text, self.state.value

    def _show_status(self) -> None:
        text, kind = self.status_text()
        w = self.query_one("#probe-status", Static)
        w.update(plain(text, lines=True))  # names the profile, the probe's log line, an error: inert
        for k in ProbeState:
            w.set_class(k.value == kind, f"-{k.value}")

    # ---------------------------------------------------------------- actions
    def launch_profile(self) -> Profile | None:
        """The profile a full run at the found value uses (None when there is none): the probed
        profile (the picker's overrides and the probe's memory budgets) and the value, so the run
        answers the same question the probe did ("does it fit on a 24 GB card?"); after a probe
        with the data's longest samples, ``train.longest_first`` too."""
        from fttui.core.profiles import apply_overrides

        res = self.result
        if self.state is not ProbeState.DONE or res is None or res.largest_fit is None:
            return None
        base = self.probe_resolved or self.resolved
        # probed with the data's longest samples: the run puts them first too (an OOM in its first step)
        worst_first = {"train.longest_first": True} if getattr(res, "samples", "") == "data" else {}
        return apply_overrides(base, {PROBE_PARAMS[res.param]: res.largest_fit, **worst_first})  # origin kept

    def action_launch(self) -> None:
        if self.state is ProbeState.RUNNING:
            self.notify("the probe is still running", severity="warning", markup=False)
            return
        try:
            resolved = self.launch_profile()
            if resolved is None:
                self.notify("no value found yet: s starts the probe", severity="warning", markup=False)
                return
            host(self).launch_run(resolved)
        except FttuiError as e:  # the result stays: fix the profile and press enter again
            self.notify(str(e), title="launch refused", severity="error", timeout=10, markup=False)
        except OSError as e:
            self.notify(f"launch failed: {e}", severity="error", timeout=10, markup=False)

    def action_back(self) -> None:
        if self.stop_probe():
            self.notify("probe stopped", markup=False)
        self.app.pop_screen()
