"""Probe screen: find the largest batch size / sequence length that fits, trial by trial.

Opened with ``p`` on a profile in the picker (with the picker's overrides). The OOM-boundary
probe (fttui.core.experiments.probe.Prober) runs in a thread worker; each trial is posted to the screen as a
message and added to the table at once. When the probe ends, the boundary (largest value that
fits, smallest that fails) is shown in a highlighted panel, and ``enter`` (or ``l``) launches a
full run of the profile at the largest value that fits.

Leaving the screen (escape) or quitting the app while a probe runs stops it: the probe process
is killed and no further model load starts.
"""

from __future__ import annotations

import threading
import time

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, DataTable, Footer, Header, Input, Label, Select, Static

from fttui.core.base import fmt
from fttui.core.base.errors import FttuiError

PARAMS = ("batch_size", "max_seq_len")
PARAM_KEYS = {"batch_size": "train.batch_size", "max_seq_len": "data.max_seq_len"}
DEFAULT_RANGE = (1, 1024)
DEFAULT_STEPS = 2
COLUMNS = ["", "value", "result", "clean", "load", "GPU MB", "RSS MB", "s/step", "samples/s"]


class ProbeStopped(Exception):
    """Raised inside the probe's callbacks once the probe was asked to stop: it ends
    ``Prober.run()`` before another model load starts (its ``finally`` kills the process)."""


def trial_cells(t) -> list[str]:
    """The table cells of one trial (fttui.core.experiments.probe.Trial), without the marker column."""
    from fttui.core.experiments.probe import trial_cells as cells

    return cells(t, torch_reserved=False, sep=" ")


def boundary_text(res, probe_only_limits: dict | None = None) -> Text:
    """The highlighted boundary panel's text for a finished probe (fttui.core.experiments.probe.ProbeResult).
    ``probe_only_limits``: memory limits the probe ran under that the full run does not get."""
    p = res.param
    out = Text()
    if res.largest_fit is not None:
        out.append(f"largest {p} that fits: ", style="bold")
        out.append(f" {res.largest_fit} ", style="bold reverse")
    else:
        out.append(f"nothing in {res.lo}..{res.hi} fits", style="bold")
    out.append("   smallest that fails: ", style="bold")
    out.append("-" if res.smallest_oom is None else str(res.smallest_oom), style="bold")
    out.append("\n")
    out.append("exact" if res.exact else "NOT exact", style="bold" if res.exact else "bold underline")
    out.append(f"  ·  {res.model_loads} model load{'s' if res.model_loads != 1 else ''}, "
               f"{len(res.trials)} trial{'s' if len(res.trials) != 1 else ''}, {fmt.duration(res.wall_s)}")
    if res.note:
        out.append(f"\nnote: {res.note}", style="italic")
    if res.largest_fit is not None:
        out.append(f"\nenter: full run at {p}={res.largest_fit}", style="bold")
        lim = {k: v for k, v in (probe_only_limits or {}).items() if v}
        if lim:
            shown = ", ".join(f"{k.split('_')[0]} {v}" for k, v in sorted(lim.items()))
            out.append(f" (under the same budget: {shown})", style="dim")
    return out


class ProbeScreen(Screen):
    """The probe of one resolved profile. ``result=`` shows a recorded ProbeResult (no probe runs)."""

    BINDINGS = [
        Binding("s", "start", "Start probe"),
        Binding("enter", "launch", "Run at found value", show=False),
        Binding("l", "launch", "Run at found value"),
        Binding("x", "stop_probe", "Stop probe"),
        Binding("escape", "back", "Back"),
    ]

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
    def __init__(self, resolved: dict, result=None) -> None:
        super().__init__()
        self.resolved = resolved  # the picker's profile with its overrides
        self.state = "idle"  # idle | running | done | stopped | error
        self.prober = None
        self.probe_resolved: dict | None = None  # the profile the probe runs (limits applied)
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
        limits = self.resolved.get("limits") or {}
        res = self.result
        yield Header()
        with Horizontal(id="probe-form"):
            with Vertical(classes="field field-param"):
                yield Label("probe")
                yield Select([(p, p) for p in PARAMS], id="pr-param", allow_blank=False,
                             value=res.param if res is not None else "batch_size", compact=True)
            with Vertical(classes="field"):
                yield Label("from")
                yield Input(str(res.lo if res is not None else DEFAULT_RANGE[0]), id="pr-lo", type="integer",
                            compact=True)
            with Vertical(classes="field"):
                yield Label("to")
                yield Input(str(res.hi if res is not None else DEFAULT_RANGE[1]), id="pr-hi", type="integer",
                            compact=True)
            with Vertical(classes="field"):
                yield Label("steps")
                yield Input(str(DEFAULT_STEPS), id="pr-steps", type="integer", compact=True)
            with Vertical(classes="field field-limit"):
                yield Label("host mem")
                yield Input(limits.get("host_memory") or "", id="pr-host", placeholder="none", compact=True)
            with Vertical(classes="field field-limit"):
                yield Label("GPU mem")
                yield Input(limits.get("gpu_memory") or "", id="pr-gpu", placeholder="none", compact=True)
            with Vertical(classes="field field-start"):
                yield Label(" ")
                yield Button("Start (s)", id="pr-start", variant="primary", compact=True)
        yield Static(id="probe-status")
        yield Static(id="probe-boundary")
        yield DataTable(id="trials", cursor_type="row", zebra_stripes=False)
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"probe: {self.resolved.get('name', '?')}"
        table = self.query_one("#trials", DataTable)
        table.border_title = "trials"
        for c in COLUMNS:
            table.add_column(c, key=c or "mark")
        self.query_one("#probe-boundary", Static).display = False
        if self.result is not None:
            self.state = "done"
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
    def _form(self) -> tuple[str, int, int, int, dict]:
        """(param, lo, hi, steps, overrides) from the fields; FttuiError on bad input."""
        param = self.query_one("#pr-param", Select).value
        if param not in PARAMS:
            param = "batch_size"

        def num(fid: str, what: str) -> int:
            text = self.query_one(f"#pr-{fid}", Input).value.strip()
            try:
                return int(text)
            except ValueError:
                raise FttuiError(f"{what}: expected a whole number, got {text!r}") from None

        lo, hi, steps = num("lo", "from"), num("hi", "to"), num("steps", "steps")
        if lo < 1 or hi < lo:
            raise FttuiError(f"range {lo}..{hi}: need 1 <= from <= to")
        if steps < 1:
            raise FttuiError("steps: must be >= 1")
        limits = self.resolved.get("limits") or {}
        overrides = {}
        for fid, key in (("host", "host_memory"), ("gpu", "gpu_memory")):
            text = self.query_one(f"#pr-{fid}", Input).value.strip()
            if text != (limits.get(key) or ""):
                overrides[f"limits.{key}"] = text
        return param, lo, hi, steps, overrides

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
        if self.state == "running":
            self.notify("a probe is running: x stops it", severity="warning")
            return
        from fttui.core.experiments.probe import Prober
        from fttui.core.profiles.profile import apply_overrides

        try:
            param, lo, hi, steps, overrides = self._form()
            resolved = apply_overrides(self.resolved, overrides) if overrides else self.resolved
            if overrides:
                resolved.setdefault("origin", self.resolved.get("origin"))
            self._token += 1
            token = self._token
            prober = Prober(resolved, param=param, lo=lo, hi=hi, steps=steps,
                            on_trial=lambda t: self._from_worker(token, self.TrialDone(token, t)),
                            on_log=lambda s: self._from_worker(token, self.Log(token, s)))
        except FttuiError as e:
            self.state, self.error = "error", str(e)
            self._show_status()
            return
        self.prober, self.probe_resolved = prober, resolved
        self.result, self.trials, self.error = None, [], ""
        self.log_line = f"{param} in {lo}..{hi}, {steps} step{'s' if steps != 1 else ''} per trial, " \
                        f"every sample {resolved['data']['max_seq_len']} tokens (worst case)"
        self.state, self.started = "running", time.time()
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
        except Exception as e:  # never let the worker die silently
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
        try:
            from fttui.core.experiments.probe import predicted_start
        except ImportError:  # an older core: start at the low end
            return
        try:
            start, why = predicted_start(prober.resolved, prober.param, prober.lo, prober.hi)
        except Exception as e:  # a failed prediction only costs model loads
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
            self.state = "stopped"
        elif message.error:
            self.state, self.error = "error", message.error
        else:
            self.state, self.result = "done", message.result
            self.trials = list(message.result.trials)
            self._fill_table()
            self._show_boundary()
            self.query_one("#trials", DataTable).focus()
        self._show_status()

    def stop_probe(self, show: bool = True) -> bool:
        """Stop a running probe (kills its process; no further model load). True if one ran."""
        prober, done = self.prober, self._worker_done
        if self.state != "running" or prober is None:
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
        self.state = "stopped"
        if self._tick is not None:
            self._tick.stop()
            self._tick = None
        if show:
            self._show_status()
        return True

    def action_stop_probe(self) -> None:
        if not self.stop_probe():
            self.notify("no probe is running", severity="warning")

    # ---------------------------------------------------------------- display
    def _marker(self, t) -> str:
        res = self.result
        if res is None or not t.clean:
            return ""
        if t.status == "fit" and t.fresh and t.value == res.largest_fit:
            return "▶"
        if t.status == "oom" and t.value == res.smallest_oom:
            return "▶"
        return ""

    def _row(self, t) -> list:
        cells = [self._marker(t), *trial_cells(t)]
        style = ""
        if cells[0]:
            style = "bold green" if t.status == "fit" else "bold red"
        elif not t.clean:
            style = "dim"
        elif t.status == "oom":
            style = "red"
        return [Text(c, style=style) for c in cells]

    def _add_row(self, t, index: int) -> None:
        self.query_one("#trials", DataTable).add_row(*self._row(t), key=str(index))

    def _fill_table(self) -> None:
        table = self.query_one("#trials", DataTable)
        table.clear()
        trials = self.trials
        if self.result is not None:  # finished: by value, as the CLI prints them
            trials = sorted(trials, key=lambda t: (t.value, t.load))
        for i, t in enumerate(trials):
            table.add_row(*self._row(t), key=str(i))
        if self.result is not None and self.result.largest_fit is not None:
            for i, t in enumerate(trials):
                if self._marker(t) and t.status == "fit":
                    table.move_cursor(row=i, animate=False)
                    break

    def _show_boundary(self) -> None:
        res = self.result
        w = self.query_one("#probe-boundary", Static)
        w.update(boundary_text(res, self._probe_only_limits()))
        w.border_title = f"{res.param} boundary"
        kind = "exact" if res.exact and res.largest_fit is not None else ("none" if res.largest_fit is None
                                                                          else "inexact")
        for k in ("exact", "inexact", "none"):
            w.set_class(k == kind, f"-{k}")
        w.display = True

    def _probe_only_limits(self) -> dict:
        """Limits set in the probe's fields that differ from the profile's own."""
        own = self.resolved.get("limits") or {}
        ran = (self.probe_resolved or self.resolved).get("limits") or {}
        return {k: v for k, v in ran.items() if v != own.get(k)}

    def status_text(self) -> tuple[str, str]:
        """(text, kind) of the status line."""
        name = self.resolved.get("name", "?")
        pid = self.prober.probe_id if self.prober is not None else (self.result.probe_id if self.result else "")
        if self.state == "idle":
            return (f"PROBE {name}: s starts (or enter in a field); fresh = first trial of its process (a fit counts only then); clean = no OOM before it", "idle")
        if self.state == "running":
            elapsed = fmt.duration(time.time() - self.started)
            n = len(self.trials)
            return (f"RUNNING {pid}  {elapsed}  {n} trial{'s' if n != 1 else ''}: {self.log_line}", "running")
        if self.state == "stopped":
            return (f"STOPPED {pid}: the probe process was killed (s starts again)", "stopped")
        if self.state == "error":
            return (f"ERROR: {self.error}", "error")
        res = self.result
        return (f"DONE {pid}: {len(res.trials)} trials in {fmt.duration(res.wall_s)}", "done")

    def _show_status(self) -> None:
        text, kind = self.status_text()
        w = self.query_one("#probe-status", Static)
        w.update(Text(text))
        for k in ("idle", "running", "stopped", "error", "done"):
            w.set_class(k == kind, f"-{k}")

    # ---------------------------------------------------------------- actions
    def launch_profile(self) -> dict | None:
        """The profile a full run at the found value uses (None when there is none): the probed
        profile (the picker's overrides and the probe's memory budgets) and the value, so the run
        answers the same question the probe did ("does it fit on a 24 GB card?")."""
        from fttui.core.profiles.profile import apply_overrides

        res = self.result
        if self.state != "done" or res is None or res.largest_fit is None:
            return None
        base = getattr(self, "probe_resolved", None) or self.resolved
        resolved = apply_overrides(base, {PARAM_KEYS[res.param]: res.largest_fit})
        resolved.setdefault("origin", self.resolved.get("origin"))
        return resolved

    def action_launch(self) -> None:
        if self.state == "running":
            self.notify("the probe is still running", severity="warning")
            return
        try:
            resolved = self.launch_profile()
            if resolved is None:
                self.notify("no value found yet: s starts the probe", severity="warning")
                return
            self.app.launch_run(resolved)
        except FttuiError as e:  # the result stays: fix the profile and press enter again
            self.notify(str(e), title="launch refused", severity="error", timeout=10)
        except OSError as e:
            self.notify(f"launch failed: {e}", severity="error", timeout=10)

    def action_back(self) -> None:
        if self.stop_probe():
            self.notify("probe stopped")
        self.app.pop_screen()
