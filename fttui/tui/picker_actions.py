"""The picker's actions on the selected profile, with its overrides: launch it (one predicted not
to fit the visible card asks first), probe it, plan it (``s``: fttui.tui.plan_screen), and the
focus key. A mixin of :class:`fttui.tui.picker.PickerScreen`, which holds the selection
(``resolved``), the GPU snapshot, the store's rows and the memory verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widgets import OptionList

from fttui.core.base.errors import FttuiError
from fttui.tui.host import host
from fttui.tui.verdict import read_store_rows

if TYPE_CHECKING:
    from textual.screen import Screen
    from textual.widgets import Static

    from fttui.core.profiles.typed import Profile
    from fttui.monitor import GpuSnapshot
    from fttui.tui.verdict import MemoryVerdict

    _Screen = Screen
else:
    _Screen = object  # a mixin: the screen is PickerScreen's other base


class PickerActions(_Screen):
    # the picker's state and methods these actions use (fttui.tui.picker.PickerScreen)
    resolved: Profile | None
    gpu_snap: GpuSnapshot | None
    store_rows: list[dict] | None
    verdict: MemoryVerdict | None
    _store_stale: bool

    if TYPE_CHECKING:

        def _refresh_gpus(self) -> None: ...

        def _update_estimate(self) -> None: ...

        def _show_error(self, error: str | None, w: Static | None = None) -> None: ...

    def action_focus_list(self) -> None:
        self.query_one("#profiles", OptionList).focus()

    def _open_for_selection(self, screen_type) -> None:
        """A screen of the selected profile with the current overrides (its runs may add rows)."""
        if self.resolved is None:
            self.notify("fix the error in the details pane first", severity="warning", markup=False)
            return
        self._store_stale = True
        self.app.push_screen(screen_type(self.resolved))

    def action_probe(self) -> None:
        """The probe screen of the selected profile, with the current overrides."""
        from fttui.tui.probe_screen import ProbeScreen

        self._open_for_selection(ProbeScreen)

    def action_plan(self) -> None:
        """The plan screen of the selected profile, with the current overrides: its setups on
        this machine's cards, fastest first; Enter there launches one."""
        from fttui.tui.plan_screen import PlanScreen

        self._open_for_selection(PlanScreen)

    def action_launch(self) -> None:
        """Launch the selection; one predicted not to fit the visible card asks first."""
        from fttui.tui.dialogs import ConfirmScreen

        if self.resolved is None:
            self.notify("fix the error in the details pane first", severity="warning", markup=False)
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

    def _launch(self, resolved: Profile) -> None:
        self._store_stale = True
        try:
            host(self).launch_run(resolved)
        except FttuiError as e:
            self._show_error(str(e))
        except OSError as e:
            self._show_error(f"launch failed: {e}")


__all__ = ["PickerActions"]
