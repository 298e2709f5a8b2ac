"""The picker's details grid draws cell for cell what the Rich table grid it replaces drew."""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.style import Style
from rich.table import Table
from rich.text import Text

from fttui.tui.details import LabelGrid

ROWS = [("profile", "demo-lora (bundled)"),
        ("", Text("LoRA on a random tiny Llama with synthetic data, and an-unbreakable-token-"
                  + "x" * 40, style="italic")),
        ("sharding", "none"),
        ("overrides", "batch_size=32, max_seq_len=96")]


def _cells(renderable, width: int) -> list[list[tuple[str, str]]]:
    console = Console(width=width)
    lines = console.render_lines(renderable, console.options.update_width(width), pad=False)
    return [[(ch, str(seg.style or Style())) for seg in line for ch in seg.text] for line in lines]


@pytest.mark.parametrize("width", [12, 20, 35, 48, 80, 120])
def test_label_grid_matches_the_table_grid(width):
    table = Table.grid(padding=(0, 1))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    grid = LabelGrid()
    for label, value in ROWS:
        table.add_row(label, value)
        grid.add_row(label, value)
    want = _cells(table, width)
    assert _cells(grid, width) == want
    assert _cells(grid, width) == want  # drawing it again changes nothing
