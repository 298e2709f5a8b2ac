"""Help: the keys."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = [
    (
        "everywhere",
        [
            ("q", "quit (asks when a run is live: detach, stop or stay)"),
            ("r", "results: the stored summary rows"),
            ("?", "this help"),
            ("escape", "back"),
            ("tab / shift+tab", "next / previous field"),
        ],
    ),
    (
        "profiles",
        [
            ("up / down", "choose a profile"),
            ("enter", "launch it (with the overrides)"),
            ("p", "probe it: the largest batch size / seq len that fits"),
            (
                "s",
                "plan it: every setup on these cards (sharding, micro batch, accumulation, checkpointing), "
                "its memory and time, fastest first",
            ),
            ("tab", "edit the overrides: batch size, grad accum, max_seq_len, GPUs, method"),
        ],
    ),
    (
        "run",
        [
            ("c", "cancel the run (asks first)"),
            ("k", "the ranks: each one's compute and wait, the slow rank; w there: where each rank is"),
            ("escape", "back to the profiles (the run goes on)"),
        ],
    ),
    (
        "probe",
        [
            ("s (or enter in a field)", "start the probe"),
            ("enter / l", "full run at the largest value that fits"),
            ("x", "stop the probe (its process is killed)"),
            ("escape", "back to the profiles (stops a running probe)"),
        ],
    ),
    (
        "plan",
        [
            ("enter", "launch the highlighted setup (one predicted not to fit asks first)"),
            (
                "m",
                "measure the setups that fit (a short recorded run each, fastest forecast first): the measured column",
            ),
            ("escape", "back to the profiles (ends a running trial)"),
        ],
    ),
    (
        "results",
        [
            ("s", "sort by the cursor's column (again: reverse); or click a header"),
            ("m", "export the visible rows as Markdown"),
            ("v", "export the visible rows as CSV"),
            ("b", "the cursor's row is the baseline: a rel column (samples/s over its); again: clear"),
            ("w", "write the report of the visible rows (tables, charts) into exports/report-<time>/"),
            ("tab", "the model / method filters"),
        ],
    ),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("question_mark", "close", "Close", show=False),
        Binding("q", "close", "Close", show=False),
    ]

    def compose(self) -> ComposeResult:
        t = Table.grid(padding=(0, 2))
        t.add_column(style="bold", no_wrap=True)
        t.add_column()
        for i, (section, keys) in enumerate(KEYS):
            if i:
                t.add_row("", "")
            t.add_row(f"[u]{section}[/u]", "")
            for k, what in keys:
                t.add_row(k, what)
        with VerticalScroll(classes="dialog help"):
            yield Static(t)

    def on_mount(self) -> None:
        help_box = self.query_one(".help")
        help_box.border_title = "keys"
        help_box.border_subtitle = "escape: close"

    def action_close(self) -> None:
        self.dismiss(None)
