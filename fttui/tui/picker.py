"""Profile picker: the live runs (when there are), the profiles, one's resolved settings,
overrides, the memory estimate and time forecast, the visible GPUs; Enter launches, `p` probes,
`s` plans, `a` attaches to a live run (the actions: fttui.tui.picker_actions).

The first frame shows the profile list and the first profile's details; everything else comes
after it: the override fields (``ready`` once they are mounted), the GPUs and the results store
(for the estimate) in a thread worker, the live runs in another (``fttui.tui.live_runs``), then
the app's bookkeeping of runs whose supervisor died.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Label, OptionList, Select, Static
from textual.widgets.option_list import Option

from fttui.core.base.errors import FttuiError
from fttui.core.base.methods import DEFAULT as DEFAULT_METHOD
from fttui.core.profiles.fields import METHODS, OVERRIDE_FIELDS, field_values, overrides_from_fields
from fttui.tui.details import REMOTE_CODE_LINE, profile_details
from fttui.tui.host import host
from fttui.tui.picker_actions import PickerActions
from fttui.tui.plain import plain
from fttui.tui.verdict import MemoryVerdict, forecast_line, memory_verdict, read_store_rows

if TYPE_CHECKING:
    from fttui.core.profiles.discovery import ProfileRef
    from fttui.core.profiles.typed import Profile
    from fttui.tui.live_runs import LiveRuns

LIVE_REFRESH_S = 5.0  # the live runs' step and ETA, while the picker is shown
# What the first frame leaves out comes this long after it: until then the event loop idles, so
# Textual's output thread writes the frame out and the terminal draws it (on two busy cores, a
# second layout or the workers' imports right away held it back by tens of milliseconds).
BACKGROUND_DELAY_S = 0.1


class PickerScreen(PickerActions, Screen):
    BINDINGS = [
        Binding("enter", "launch", "Launch"),
        Binding("p", "probe", "Probe"),
        Binding("s", "plan", "Plan"),
        Binding("a", "attach", "Attach"),
        Binding("escape", "focus_list", "Profiles", show=False),
    ]

    def __init__(self, error: str | None = None) -> None:
        super().__init__()
        self.refs: list[ProfileRef] = []
        self.base: Profile | None = None  # the highlighted profile, resolved, without overrides
        self.resolved: Profile | None = None  # with the overrides
        self.load_error: str | None = error
        self._filling = False
        self.error_text = ""
        self.gpu_snap = None  # the GPU snapshot taken when the picker mounted
        self.store_rows: list[dict] | None = None  # results-store rows, read after mount and on return
        self.verdict: MemoryVerdict | None = None  # the estimate of the current selection
        self.forecast: Text | None = None  # its time forecast (fttui.tui.verdict.forecast_line)
        self._store_stale = False  # a run or probe started here may add rows to the store
        self.live: LiveRuns | None = None  # the live runs pane, mounted when one is found
        self._values: dict[str, str] = {}  # the override fields' values until they are mounted
        self.ready = False  # the override fields are mounted (after the first frame)
        self._started = False  # the work deferred past the first frame has begun

    def compose(self) -> ComposeResult:
        # Every widget of the first frame is built with its content (the profile names; the first
        # profile's name in the details): the first layout is the one drawn. Resolving the first
        # profile (the resolver's imports and its files), the override fields, the GPUs and the
        # store come just after it (_after_first_frame_out).
        self._load_first()
        self.sub_title = "profiles"
        yield Header()
        with Horizontal(id="picker-main"):
            with Vertical(id="profiles-pane"):
                ol = OptionList(
                    *[Option(self._ref_label(ref), id=ref.name) for ref in self.refs], id="profiles", compact=True
                )
                ol.border_title = "profiles"
                yield ol
            with Vertical(id="details-pane") as pane:
                pane.border_title = "details"
                pane.border_subtitle = "enter: launch  p: probe  s: plan"
                with VerticalScroll(id="details-scroll"):
                    yield Static(self._first_details(), id="details")
                overrides = Horizontal(id="overrides")  # its fields are mounted after the first frame
                overrides.display = False
                yield overrides
                if self.base is not None:
                    self._values = field_values(self.base)
                error = Static(id="picker-error")
                self._show_error(self.load_error, error)
                yield error
                estimate = Static(id="estimate")
                estimate.display = False
                yield estimate
                yield Static(Text("GPUs: looking...", style="dim"), id="gpus")
        yield Footer()

    def _load_first(self) -> None:
        """The profiles (their names: discovery reads no file); the first one is resolved after
        the first frame, as selecting it would."""
        from fttui.core.profiles.discovery import discover

        try:
            self.refs = discover()
        except (OSError, FttuiError) as e:
            self.refs = []
            self.load_error = str(e)

    def _first_details(self):
        if not self.refs:
            return "no profiles found: put NAME.toml files in ./profiles or the user profile folder"
        return plain(f"{self.refs[0].name} ({self.refs[0].origin})", "bold")  # a file's name: inert text

    def on_mount(self) -> None:
        ol = self.query_one("#profiles", OptionList)
        if self.refs:
            ol.highlighted = 0  # resolved after the first frame (_after_first_frame_out)
        ol.focus()
        # the GPUs, the store, the live runs, the bookkeeping: all after the first frame
        self.call_after_refresh(self._after_first_frame)

    @staticmethod
    def _ref_label(ref) -> Text:
        label = plain(ref.name, no_wrap=True, overflow="ellipsis")  # a file's name: inert text, no markup
        if ref.origin != "bundled":
            label.append_text(plain(f" ({ref.origin})", "dim"))
        return label

    def on_screen_resume(self) -> None:
        # back from a run: the list has the keys (q, r, ?), not a field that would swallow them
        self.query_one("#profiles", OptionList).focus()
        if self._store_stale and self.store_rows is not None:  # back from a run or probe
            self._store_stale = False
            self.call_after_refresh(self._reload_store)
        if self._started:  # back from a run, a probe, the results: the live runs again
            self._list_live_runs()

    def _after_first_frame(self) -> None:
        self.set_timer(BACKGROUND_DELAY_S, self._after_first_frame_out)

    async def _after_first_frame_out(self) -> None:
        self._started = True
        if self.refs and self.base is None:
            ol = self.query_one("#profiles", OptionList)
            self._select_profile(ol.highlighted if ol.highlighted is not None else 0)
        await self._mount_fields()
        self._read_gpus_and_store()
        self._list_live_runs()
        self.set_interval(LIVE_REFRESH_S, self._refresh_live_runs)

    @work(thread=True, group="picker-gpus-store", exit_on_error=False)
    def _read_gpus_and_store(self) -> None:
        """NVML (or the fake sampler) and the results store, off the event loop."""
        snap = host(self).sample_gpus()
        rows = read_store_rows() if self.store_rows is None else self.store_rows
        self.app.call_from_thread(self._got_gpus_and_store, snap, rows)

    def _got_gpus_and_store(self, snap, rows: list[dict]) -> None:
        self._show_gpus(snap)
        if self.store_rows is None:
            self.store_rows = rows
        self._update_estimate()

    def _refresh_gpus(self) -> None:
        self._show_gpus(host(self).sample_gpus())

    def _show_gpus(self, snap) -> None:
        from fttui.tui.widgets import gpu_list_text

        self.gpu_snap = snap
        self.query_one("#gpus", Static).update(gpu_list_text(snap))

    def _reload_store(self) -> None:
        self.store_rows = read_store_rows()
        self._update_estimate()

    async def _mount_fields(self) -> None:
        """The override fields, with the values of the selection (not in the first frame: their
        mount and style pass cost it about a tenth)."""
        values = self._values
        fields = []
        for fid, _dotted, label in OVERRIDE_FIELDS:
            value = values.get(fid, "")
            field: Select[str] | Input
            if fid == "method":
                value = value or DEFAULT_METHOD.name.value
                methods = [*METHODS, value] if value not in METHODS else METHODS
                field = Select(
                    [(plain(m), m) for m in methods], id="ov-method", allow_blank=False, value=value, compact=True
                )
            else:
                field = Input(value, id=f"ov-{fid}", type="integer", compact=True)
            fields.append(Vertical(Label(label), field, classes=f"field field-{fid}"))
        overrides = self.query_one("#overrides")
        await overrides.mount_all(fields)
        overrides.display = True
        self.ready = True

    # ------------------------------------------------------------------ live runs
    def _refresh_live_runs(self) -> None:
        if self.is_current:
            self._list_live_runs()

    @work(thread=True, exclusive=True, group="picker-live-runs", exit_on_error=False)
    def _list_live_runs(self) -> None:
        """Every live run on disk (fttui.core.run.control.brief), then the app's bookkeeping of the lost
        ones: both after the first frame, in this thread."""
        from fttui.core.run.control.brief import live_briefs

        briefs = live_briefs()
        # typed as Textual's parameter is (a value or an awaitable): mypy reads a coroutine function
        # given as it is as one that returns Never
        show: Callable[..., Awaitable[None] | None] = self._show_live_runs
        self.app.call_from_thread(show, briefs)
        self.app.call_from_thread(host(self).start_bookkeeping)

    async def _show_live_runs(self, briefs: list) -> None:
        from fttui.tui.live_runs import LiveRuns

        if self.live is None:
            if not briefs:
                return
            self.live = LiveRuns()
            await self.mount(self.live, before="#picker-main")
            if self.app.focused is self.query_one("#profiles", OptionList):
                self.live.query_one("#live-table").focus()  # the app opens on what matters
        table = self.live.query_one("#live-table")
        if not briefs and self.app.focused is table:
            self.query_one("#profiles", OptionList).focus()
        self.live.show(briefs)
        self.live.display = bool(briefs)
        self.refresh_bindings()

    def on_data_table_row_selected(self, event) -> None:  # a click on a live run's row
        if self.live is not None and event.data_table.id == "live-table":
            self.action_attach()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "attach":  # in the footer only while a live run is listed
            return bool(self.live is not None and self.live.briefs)
        return True

    def action_attach(self) -> None:
        """The run screen of the live run under the cursor (the newest one from elsewhere)."""
        b = self.live.selected() if self.live is not None else None
        if b is None:
            return
        from fttui.core.run.files.rundir import RunDir

        rd = RunDir(b.path)
        if b.kind == "slurm":  # a Slurm job: node 0's run screen once it runs, Slurm's state before
            from fttui.core.run.slurm.slurmjob import node0

            node = node0(rd)
            if node is None:
                return self.notify(f"{b.run_id}: {b.state}", title="Slurm job", markup=False)
            rd = node
        host(self).show_run(rd)

    # ------------------------------------------------------------------ memory estimate
    def _update_estimate(self) -> None:
        """The estimate of the selection with its overrides (pure arithmetic: cheap)."""
        from fttui.core.run.launching.command import command_of

        w = self.query_one("#estimate", Static)
        if self.store_rows is None or self.resolved is None or command_of(self.resolved) is not None:
            self.verdict = self.forecast = None
            w.display = False
            return
        self.verdict = memory_verdict(self.resolved, self.gpu_snap, self.store_rows)
        self.forecast = forecast_line(self.resolved, self.gpu_snap, self.store_rows)
        w.update(self.verdict.text + "\n" + self.forecast if self.forecast is not None else self.verdict.text)
        w.set_class(self.verdict.fits is False, "-over")
        w.display = True

    # ------------------------------------------------------------------ profile and overrides
    @on(OptionList.OptionHighlighted, "#profiles")
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_index is not None and self._started:  # before: the first frame's turn
            self._select_profile(event.option_index)

    @on(OptionList.OptionSelected, "#profiles")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        self.action_launch()

    def _select_profile(self, index: int) -> None:
        from fttui.core.profiles import load_profile

        if not (0 <= index < len(self.refs)):
            return
        ref = self.refs[index]
        if self.base is not None and self.base.source == str(ref.path):
            return
        try:
            self.base = load_profile(str(ref.path)).with_settings({"origin": ref.origin})
        except FttuiError as e:
            self.base = self.resolved = None
            self.query_one("#details", Static).update(plain(f"{ref.name} ({ref.origin})", "bold"))
            self._show_error(str(e))
            self._update_estimate()
            return
        self._filling = True
        try:  # the fields' Changed messages are dropped: one recompute below, not one per field
            with self.prevent(Input.Changed, Select.Changed):
                self._fill_fields(field_values(self.base))
        finally:
            self._filling = False
        self._recompute()

    def _fill_fields(self, values: dict) -> None:
        self._values = dict(values)
        if not self.ready:
            return
        for fid, value in values.items():
            w = self.query_one(f"#ov-{fid}")
            if isinstance(w, Select):
                if fid == "method" and value not in METHODS:
                    w.set_options([(plain(m), m) for m in [*METHODS, value]])
                w.value = value
            elif isinstance(w, Input):
                w.value = value

    def _field_texts(self) -> dict[str, str]:
        if not self.ready:
            return {fid: str(self._values.get(fid, "")) for fid, _dotted, _label in OVERRIDE_FIELDS}
        out = {}
        for fid, _dotted, _label in OVERRIDE_FIELDS:
            w = self.query_one(f"#ov-{fid}")
            v = w.value if isinstance(w, (Input, Select)) else None
            out[fid] = "" if v is Select.NULL or v is None else str(v)
        return out

    @on(Input.Changed)
    @on(Select.Changed)
    def _field_changed(self, event) -> None:
        if not self._filling and self.base is not None:
            self._recompute()

    def _recompute(self) -> None:
        from fttui.core.profiles import apply_overrides

        if self.base is None:
            return
        overrides = overrides_from_fields(self.base, self._field_texts())
        try:
            self.resolved = apply_overrides(self.base, overrides) if overrides else self.base  # origin kept
            error = None
        except FttuiError as e:
            self.resolved = None
            error = str(e)
        self.query_one("#details", Static).update(profile_details(self.resolved or self.base, overrides))
        self._show_error(error)
        self._update_estimate()

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        self.action_launch()

    def _show_error(self, error: str | None, w: Static | None = None) -> None:
        self.error_text = error or ""
        w = w or self.query_one("#picker-error", Static)
        w.update(plain(error, "bold", lines=True))  # an error names files, keys, values: inert text
        w.set_class(bool(error), "-error")
        w.display = bool(error)


# memory_verdict, MemoryVerdict, read_store_rows (fttui.tui.verdict) and REMOTE_CODE_LINE
# (fttui.tui.details) are kept importable from here, where they lived before.
__all__ = ["PickerScreen", "MemoryVerdict", "memory_verdict", "read_store_rows", "REMOTE_CODE_LINE"]
