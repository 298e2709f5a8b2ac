"""Modal dialogs: confirm a cancel, and what to do with live runs on quit.

Their texts name runs and profiles (a run id, a profile's name, an error): shown as text, inert
(fttui.tui.plain), never read as markup."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from fttui.core.base.inert import inert
from fttui.tui.plain import plain


class ConfirmScreen(ModalScreen[bool]):
    """Yes / no. ``y`` or Enter on Yes confirms; ``n`` or Escape declines."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
        Binding("escape", "answer(False)", "No", show=False),
    ]

    def __init__(self, question: str, detail: str = "") -> None:
        super().__init__()
        self.question = question
        self.detail = detail

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(plain(self.question, lines=True), classes="dialog-title")
            if self.detail:
                yield Static(plain(self.detail, lines=True), classes="dialog-detail")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Yes (y)", id="yes", variant="error", compact=True)
                yield Button("No (n)", id="no", variant="primary", compact=True)

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class QuitScreen(ModalScreen[str]):
    """Quit while runs are live: detach (they go on), stop (cancel them, then quit) or stay."""

    BINDINGS = [
        Binding("d", "choose('detach')", "Detach"),
        Binding("s", "choose('stop')", "Stop run"),
        Binding("escape", "choose('stay')", "Stay"),
        Binding("q", "choose('detach')", "Detach", show=False),
    ]

    def __init__(self, run_ids: list[str]) -> None:
        super().__init__()
        self.run_ids = run_ids

    def compose(self) -> ComposeResult:
        what = "a run is" if len(self.run_ids) == 1 else f"{len(self.run_ids)} runs are"
        with Vertical(classes="dialog"):
            yield Static(f"Quit: {what} still live", classes="dialog-title")
            yield Static(plain("\n".join(inert(r) for r in self.run_ids), lines=True), classes="dialog-detail")
            yield Static(
                "Detach: the run goes on (fttui attach shows it again). Stop: cancel it, then quit.",
                classes="dialog-detail",
            )
            with Horizontal(classes="dialog-buttons"):
                yield Button("Detach (d)", id="detach", variant="primary", compact=True)
                yield Button("Stop (s)", id="stop", variant="error", compact=True)
                yield Button("Stay (esc)", id="stay", compact=True)

    def on_mount(self) -> None:
        self.query_one("#detach", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or "stay")

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice)
