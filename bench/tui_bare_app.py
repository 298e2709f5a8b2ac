"""The reference for the first-frame benchmark: a bare Textual app (a Header, a ListView of two
items and a Footer), nothing else. bench/tui_first_frame.py starts it the same way as `fttui`
(tmux pane, same size) and times it until both list items are on screen; `q` quits.

    .venv/bin/python bench/tui_bare_app.py
"""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import Footer, Header, Label, ListItem, ListView

ITEMS = ("first item", "second item")  # what the benchmark waits for


class BareApp(App[None]):
    BINDINGS = [("q", "quit", "Quit")]

    def compose(self) -> ComposeResult:
        yield Header()
        yield ListView(*(ListItem(Label(text)) for text in ITEMS))
        yield Footer()


if __name__ == "__main__":
    BareApp().run()
