"""Profile picker: the profiles, one's resolved settings, overrides, the visible GPUs; Enter launches."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Label, OptionList, Select, Static
from textual.widgets.option_list import Option

from fttui.core.base import fmt
from fttui.core.base.errors import FttuiError
from fttui.core.profiles.fields import METHODS, OVERRIDE_FIELDS, effective_batch, field_values, overrides_from_fields
from fttui.tui.widgets import gpu_list_text


@dataclass
class MemoryVerdict:
    """The estimate of a profile against the visible cards, as the picker shows it."""

    text: Text
    fits: bool | None  # None: nothing to compare with (CPU profile, no GPU, no estimate)
    question: str = ""  # the launch confirmation when predicted not to fit
    detail: str = ""


def memory_verdict(resolved: dict, gpu_snap, rows: list[dict]) -> MemoryVerdict:
    """Predicted peak memory of ``resolved`` (calibrated from the store ``rows`` when some match)
    next to the visible cards of ``gpu_snap`` (or ``limits.gpu_memory`` when set). Never raises:
    a profile the estimator cannot express gives its one-line message."""
    from fttui.core.memory import MIB, calibration_from_store, estimate, fmt_bytes

    head = ("estimate: ", "bold")
    try:
        cal = calibration_from_store(resolved, rows) if rows else None
    except (FttuiError, KeyError, TypeError, ValueError, ZeroDivisionError):  # a row the fit cannot use
        cal = None  # fall back to the formula
    try:
        e = estimate(resolved, cal)
    except (FttuiError, KeyError, TypeError, ValueError) as ex:  # EstimateError, or a field it trips on
        msg = (str(ex).strip().splitlines() or [type(ex).__name__])[0]
        return MemoryVerdict(Text.assemble(head, f"not available: {msg}"), None)
    source = f"calibrated from {cal.rows} row{'s' if cal.rows != 1 else ''}" if cal else "formula"
    host = fmt_bytes(e.host_peak_bytes)
    if not e.gpu_peak_bytes:
        return MemoryVerdict(Text.assemble(head, f"host peak {host} ({source})\n",
                                           "CPU profile: no GPU budget"), None)
    peaks = e.gpu_peak_bytes
    n = len(peaks)
    line1 = Text.assemble(head, f"GPU {fmt_bytes(max(peaks))} per card"
                          + (f" x{n}" if n > 1 else "") + f", host peak {host} ({source})\n")
    limit = None
    limit_text = ((resolved.get("limits") or {}).get("gpu_memory") or "")
    if limit_text:
        from fttui.core.profiles import parse_size

        try:
            limit = parse_size(limit_text)
        except ValueError:
            limit = None
    from fttui.monitor import run_cards

    cards = run_cards(gpu_snap)  # the cards CUDA_VISIBLE_DEVICES leaves the run, in CUDA order
    # (peak, budget, what the budget is) per card of the run that has one
    budgets: list[tuple[int, int, str]] = []
    for i, peak in enumerate(peaks):
        card = cards[i] if i < len(cards) else None
        total = int(card.mem_total_mb * MIB) if card is not None and card.mem_total_mb else None
        if limit is not None and (total is None or limit < total):
            budgets.append((peak, limit, "limits.gpu_memory"))
        elif total is not None:
            budgets.append((peak, total, f"GPU {card.index}"))
    missing = f"; {n} GPUs asked, {len(cards)} visible" if cards and n > len(cards) else ""
    if not budgets:
        return MemoryVerdict(line1 + Text("no GPU visible: no card to compare with"), None)
    over = [b for b in budgets if b[0] > b[1]]
    if over:
        peak, budget, what = over[0]
        line2 = Text.assemble(("does NOT fit", "bold reverse"),
                              f" (predicted {fmt_bytes(peak)} of {fmt_bytes(budget)}, {what}){missing}")
        has = (f"the limit (limits.gpu_memory) is {fmt_bytes(budget)}" if what == "limits.gpu_memory"
               else f"the card has {fmt_bytes(budget)}")
        question = f"predicted {fmt_bytes(peak)} per card, {has}: launch anyway? y / n"
        detail = (f"{resolved.get('name') or 'this profile'} ({source}): the run would likely stop "
                  "with CUDA out of memory.")
        return MemoryVerdict(line1 + line2, False, question, detail)
    peak, budget, what = min(budgets, key=lambda b: b[1] - b[0])
    line2 = Text.assemble(("fits", "bold"), f" (predicted {fmt_bytes(peak)} of {fmt_bytes(budget)}, "
                                            f"{what}){missing}")
    return MemoryVerdict(line1 + line2, True)


REMOTE_CODE_LINE = "REMOTE CODE: on (runs code from the model's hub repo)"


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
        self.gpu_snap = None  # the GPU snapshot taken when the picker mounted
        self.store_rows: list[dict] | None = None  # results-store rows, read after mount and on return
        self.verdict: MemoryVerdict | None = None  # the estimate of the current selection
        self._store_stale = False  # a run or probe started here may add rows to the store

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
                yield Static(id="estimate")
                yield Static(id="gpus")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "profiles"
        from fttui.core.profiles import discover

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
        self.query_one("#estimate", Static).display = False
        # the first frame waits for neither the GPUs nor the store: both come after it
        self.call_after_refresh(self._after_first_frame)

    def on_screen_resume(self) -> None:
        # back from a run: the list has the keys (q, r, ?), not a field that would swallow them
        self.query_one("#profiles", OptionList).focus()
        if self._store_stale and self.store_rows is not None:  # back from a run or probe
            self._store_stale = False
            self.call_after_refresh(self._reload_store)

    def _after_first_frame(self) -> None:
        self._refresh_gpus()
        self._reload_store()

    def _refresh_gpus(self) -> None:
        snap = self.app.sample_gpus()
        self.gpu_snap = snap
        self.query_one("#gpus", Static).update(gpu_list_text(snap))

    def _reload_store(self) -> None:
        self.store_rows = read_store_rows()
        self._update_estimate()

    # ------------------------------------------------------------------ memory estimate
    def _update_estimate(self) -> None:
        """The estimate of the selection with its overrides (pure arithmetic: cheap)."""
        w = self.query_one("#estimate", Static)
        if self.store_rows is None or self.resolved is None:
            self.verdict = None
            w.display = False
            return
        self.verdict = memory_verdict(self.resolved, self.gpu_snap, self.store_rows)
        w.update(self.verdict.text)
        w.set_class(self.verdict.fits is False, "-over")
        w.display = True

    # ------------------------------------------------------------------ profile and overrides
    @on(OptionList.OptionHighlighted, "#profiles")
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_index is not None:
            self._select_profile(event.option_index)

    @on(OptionList.OptionSelected, "#profiles")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        self.action_launch()

    def _select_profile(self, index: int) -> None:
        from fttui.core.profiles import load_profile

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
            self._update_estimate()
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
        from fttui.core.profiles import apply_overrides

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
        self._update_estimate()

    def _show_error(self, error: str | None) -> None:
        self.error_text = error or ""
        w = self.query_one("#picker-error", Static)
        w.update(Text(error or "", style="bold"))
        w.set_class(bool(error), "-error")
        w.display = bool(error)

    def _details(self, r: dict, overrides: dict[str, str]):
        from fttui.core.profiles import profile_summary
        from fttui.core.profiles.summary import sharding_label

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
        t.add_row("method", fmt.method_label(r["method"], optimizer=train.get("optimizer")) + f"  {train.get('precision')}")
        t.add_row("sharding", sharding_label(r))
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
        if model.get("trust_remote_code"):
            # first and in words (not only a colour): the profile runs code it did not ship
            return Group(Text(REMOTE_CODE_LINE, style="bold reverse"), t)
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
        self._store_stale = True
        self.app.push_screen(ProbeScreen(self.resolved))

    def action_launch(self) -> None:
        """Launch the selection; one predicted not to fit the visible card asks first."""
        from fttui.tui.dialogs import ConfirmScreen

        if self.resolved is None:
            self.notify("fix the error in the details pane first", severity="warning")
            return
        if self.gpu_snap is None:  # Enter before the first frame's follow-up ran
            self._refresh_gpus()
        if self.store_rows is None:
            self.store_rows = read_store_rows()
        self._update_estimate()
        resolved, verdict = self.resolved, self.verdict
        if verdict is not None and verdict.fits is False:
            def answered(yes: bool | None) -> None:
                if yes:
                    self._launch(resolved)

            self.app.push_screen(ConfirmScreen(verdict.question, verdict.detail), answered)
            return
        self._launch(resolved)

    def _launch(self, resolved: dict) -> None:
        self._store_stale = True
        try:
            self.app.launch_run(resolved)
        except FttuiError as e:
            self._show_error(str(e))
        except OSError as e:
            self._show_error(f"launch failed: {e}")


def read_store_rows() -> list[dict]:
    """The results-store rows (for calibrating the estimate); none when there is no store yet (it
    is not created here) or it cannot be read."""
    import sqlite3  # here, not at the top: the picker is the first frame

    from fttui.core.base import paths

    try:
        if not paths.store_path().exists():
            return []
        from fttui.core.results.store import Store

        with Store() as store:
            return store.rows()
    except (FttuiError, OSError, sqlite3.Error):  # an unreadable store only costs the calibration
        return []
