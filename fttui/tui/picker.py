"""Profile picker: the profiles, one's resolved settings, overrides, the visible GPUs; Enter launches."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Label, OptionList, Select, Static
from textual.widgets.option_list import Option

from fttui.core import fmt
from fttui.core.errors import FttuiError
from fttui.core.viewmodel import METHODS, OVERRIDE_FIELDS, effective_batch, field_values, overrides_from_fields
from fttui.tui.widgets import gpu_list_text


class PickerScreen(Screen):
    BINDINGS = [
        Binding("enter", "launch", "Launch"),
        Binding("p", "probe", "Probe"),
        Binding("escape", "focus_list", "Profiles", show=False),
    ]

    def __init__(self, error: str | None = None) -> None:
        super().__init__()
        self.refs = []
        self.base: dict | None = None  # the highlighted profile, resolved, without overrides
        self.resolved: dict | None = None  # with the overrides
        self.load_error: str | None = error
        self._filling = False
        self.error_text = ""

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="picker-main"):
            with Vertical(id="profiles-pane"):
                yield OptionList(id="profiles", compact=True)
            with Vertical(id="details-pane"):
                with VerticalScroll(id="details-scroll"):
                    yield Static(id="details")
                with Horizontal(id="overrides"):
                    for fid, _dotted, label in OVERRIDE_FIELDS:
                        with Vertical(classes=f"field field-{fid}"):
                            yield Label(label)
                            if fid == "method":
                                yield Select([(m, m) for m in METHODS], id=f"ov-{fid}",
                                             allow_blank=False, value="lora", compact=True)
                            else:
                                yield Input(id=f"ov-{fid}", type="integer", compact=True)
                yield Static(id="picker-error")
                yield Static(id="gpus")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "profiles"
        from fttui.core.profile import discover

        try:
            self.refs = discover()
        except (OSError, FttuiError) as e:
            self.refs = []
            self.load_error = str(e)
        ol = self.query_one("#profiles", OptionList)
        ol.border_title = "profiles"
        for ref in self.refs:
            label = Text(ref.name, no_wrap=True, overflow="ellipsis")
            if ref.origin != "bundled":
                label.append(f" ({ref.origin})", style="dim")
            ol.add_option(Option(label, id=ref.name))
        self.query_one("#details-pane").border_title = "details"
        self.query_one("#details-pane").border_subtitle = "enter: launch  p: probe"
        if self.refs:
            ol.highlighted = 0
            self._select_profile(0)
        else:
            self.query_one("#details", Static).update("no profiles found: put NAME.toml files in "
                                                      "./profiles or the user profile folder")
        self._show_error(self.load_error)
        ol.focus()
        self.query_one("#gpus", Static).update(Text("GPUs: looking...", style="dim"))
        self.call_after_refresh(self._refresh_gpus)

    def on_screen_resume(self) -> None:
        # back from a run: the list has the keys (q, r, ?), not a field that would swallow them
        self.query_one("#profiles", OptionList).focus()

    def _refresh_gpus(self) -> None:
        snap = self.app.sample_gpus()
        self.query_one("#gpus", Static).update(gpu_list_text(snap))

    # ------------------------------------------------------------------ profile and overrides
    @on(OptionList.OptionHighlighted, "#profiles")
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_index is not None:
            self._select_profile(event.option_index)

    @on(OptionList.OptionSelected, "#profiles")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        self.action_launch()

    def _select_profile(self, index: int) -> None:
        from fttui.core.profile import load_profile

        if not (0 <= index < len(self.refs)):
            return
        ref = self.refs[index]
        if self.base is not None and self.base.get("source") == str(ref.path):
            return
        try:
            self.base = load_profile(str(ref.path))
            self.base["origin"] = ref.origin
        except FttuiError as e:
            self.base = self.resolved = None
            self.query_one("#details", Static).update(Text(f"{ref.name} ({ref.origin})", style="bold"))
            self._show_error(str(e))
            return
        self._filling = True
        try:
            for fid, value in field_values(self.base).items():
                w = self.query_one(f"#ov-{fid}")
                if isinstance(w, Select):
                    if value not in METHODS:
                        w.set_options([(m, m) for m in [*METHODS, value]])
                    w.value = value
                else:
                    w.value = value
        finally:
            self._filling = False
        self._recompute()

    def _field_texts(self) -> dict[str, str]:
        out = {}
        for fid, _dotted, _label in OVERRIDE_FIELDS:
            w = self.query_one(f"#ov-{fid}")
            v = w.value
            out[fid] = "" if v is Select.NULL or v is None else str(v)
        return out

    @on(Input.Changed)
    @on(Select.Changed)
    def _field_changed(self, event) -> None:
        if not self._filling and self.base is not None:
            self._recompute()

    def _recompute(self) -> None:
        from fttui.core.profile import apply_overrides

        if self.base is None:
            return
        overrides = overrides_from_fields(self.base, self._field_texts())
        try:
            self.resolved = apply_overrides(self.base, overrides) if overrides else self.base
            self.resolved.setdefault("origin", self.base.get("origin"))
            error = None
        except FttuiError as e:
            self.resolved = None
            error = str(e)
        self.query_one("#details", Static).update(self._details(self.resolved or self.base, overrides))
        self._show_error(error)

    def _show_error(self, error: str | None) -> None:
        self.error_text = error or ""
        w = self.query_one("#picker-error", Static)
        w.update(Text(error or "", style="bold"))
        w.set_class(bool(error), "-error")
        w.display = bool(error)

    def _details(self, r: dict, overrides: dict[str, str]):
        from fttui.core.profile import profile_summary

        s = profile_summary(r)
        micro, accum, procs, eff = effective_batch(r)
        train, data, dev, model = r["train"], r["data"], r["devices"], r["model"]
        t = Table.grid(padding=(0, 1))
        t.add_column(style="bold", no_wrap=True)
        t.add_column(overflow="fold")
        origin = r.get("origin") or s.get("origin") or ""
        t.add_row("profile", f"{s['name']} ({origin})")
        if s.get("description"):
            t.add_row("", Text(s["description"], style="italic"))
        t.add_row("model", f"{s['model']}  ({model.get('init')})")
        t.add_row("method", fmt.method_label(r["method"], train.get("optimizer")) + f"  {train.get('precision')}")
        t.add_row("data", f"{s['dataset']}  max_seq_len {data.get('max_seq_len')}"
                          + (f"  {data.get('num_samples')} samples" if data.get("num_samples") else ""))
        where = f"{dev.get('gpus')} GPU" + ("s" if dev.get("gpus") != 1 else "") if dev.get("gpus") else "CPU"
        t.add_row("batch", f"{micro} x accum {accum} x {procs} proc{'s' if procs != 1 else ''} = {eff} effective")
        t.add_row("devices", f"{where}, {dev.get('nodes')} node{'s' if dev.get('nodes') != 1 else ''}, "
                             f"launcher {dev.get('launcher')}")
        steps = f"max_steps {train.get('max_steps')}" if (train.get("max_steps") or -1) > 0 else f"epochs {train.get('epochs')}"
        t.add_row("train", f"{steps}  lr {train.get('lr')}  {train.get('optimizer')}"
                           + ("  grad ckpt" if train.get("gradient_checkpointing") else ""))
        if r["method"] != "full" and r["method"] != "full-zero3-offload":
            lora = r.get("lora", {})
            t.add_row("lora", f"r {lora.get('r')}  alpha {lora.get('alpha')}  dropout {lora.get('dropout')}")
        limits = r.get("limits", {}) or {}
        if limits.get("gpu_memory") or limits.get("host_memory"):
            t.add_row("limits", f"gpu {limits.get('gpu_memory') or '-'}  host {limits.get('host_memory') or '-'}")
        if overrides:
            t.add_row("overrides", ", ".join(f"{k}={v}" for k, v in overrides.items()))
        return t

    # ------------------------------------------------------------------ actions
    def action_focus_list(self) -> None:
        self.query_one("#profiles", OptionList).focus()

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        self.action_launch()

    def action_probe(self) -> None:
        """The probe screen of the selected profile, with the current overrides."""
        from fttui.tui.probe_screen import ProbeScreen

        if self.resolved is None:
            self.notify("fix the error in the details pane first", severity="warning")
            return
        self.app.push_screen(ProbeScreen(self.resolved))

    def action_launch(self) -> None:
        if self.resolved is None:
            self.notify("fix the error in the details pane first", severity="warning")
            return
        try:
            self.app.launch_run(self.resolved)
        except FttuiError as e:
            self._show_error(str(e))
        except OSError as e:
            self._show_error(f"launch failed: {e}")
