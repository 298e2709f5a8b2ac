"""The picker's details pane: what a resolved profile will run, as a Rich renderable.

A profile's values are a file's (its name, description, model, data label, command): each is shown
as text, inert (fttui.tui.plain), never read as markup."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.measure import Measurement
from rich.text import Text

from fttui.tui.plain import plain

if TYPE_CHECKING:
    from fttui.core.profiles.typed import Profile

REMOTE_CODE_LINE = "REMOTE CODE: on (runs code from the model's hub repo)"
COMMAND_LINE = "COMMAND: launching runs this command, not fttui's worker"


class LabelGrid:
    """Rows of a bold label and a value folded under its column: what ``Table.grid(padding=(0,
    1))`` with a no-wrap first column and a folding second one draws, without the table's
    measuring passes (the details pane is on the app's first frame)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, Text]] = []

    def add_row(self, label: str, value: str | Text) -> None:
        """``label`` is the code's; a ``str`` value is shown inert, a ``Text`` as it is built."""
        self.rows.append((label, value if isinstance(value, Text) else plain(value)))

    def _label_width(self) -> int:
        return max((len(label) for label, _ in self.rows), default=0)

    def __rich_measure__(self, console, options) -> Measurement:
        lw = self._label_width()
        widest = max((v.cell_len for _, v in self.rows), default=0)
        return Measurement(min(lw + 2, options.max_width), min(lw + 1 + widest, options.max_width))

    def __rich_console__(self, console, options):
        lw = self._label_width()
        widest = max((v.cell_len for _, v in self.rows), default=0)
        width = max(1, min(widest, options.max_width - lw - 1))  # the value column, as the table's
        for label, value in self.rows:
            lines = value.wrap(console, width, overflow="fold") if value.cell_len > width else [value]
            for i, line in enumerate(lines):
                line = line.copy()  # the row's Text is rendered again on every layout
                line.pad_right(width - line.cell_len)  # in the value's own style, as a table cell
                yield Text.assemble(((label if i == 0 else "").ljust(lw + 1), "bold"), line)


def data_lengths(r: Profile) -> Text | None:
    """The data's token lengths after the template and truncation, from ``fttui data``'s cache
    (never tokenised here): percentiles, the truncated share and the histogram's sparkline; a
    file not measured yet says how to measure it; None for synthetic data (every sample
    ``max_seq_len``)."""
    from fttui.core.base.errors import FttuiError
    from fttui.core.data.lengths import sparkline
    from fttui.core.experiments.datalens import NotCached, data_stats

    p = r
    if (p.data.source or "synthetic") == "synthetic":
        return None
    try:
        s, _cached = data_stats(p, tokenise=False)
    except NotCached:
        return plain(f"not measured yet: fttui data --profile {p.name}", "dim")
    except (FttuiError, OSError, KeyError, TypeError, ValueError):
        return None
    tk = s.tokens
    return Text.assemble(
        plain(
            f"{s.samples} samples, p50 {tk['p50']}  p90 {tk['p90']}  max {tk['max']}, "
            f"{s.truncated_share:.0%} truncated  "
        ),
        (sparkline(s.histogram), "cyan"),
    )


def profile_details(r: Profile, overrides: dict[str, str]):
    """The details pane of a resolved profile: a label / value grid (the remote-code warning
    first, in words, when the profile runs code it did not ship)."""
    from rich.console import Group

    from fttui.core.base import fmt
    from fttui.core.profiles import profile_summary
    from fttui.core.profiles.summary import sharding_label
    from fttui.core.run.launching.command import command_text

    p = r
    cmd = command_text(p)
    if cmd is not None:  # shown, in words, before it is launched: like remote code
        t = LabelGrid()
        t.add_row("profile", f"{p.name} ({p.origin or ''})")
        if p.description:
            t.add_row("", plain(p.description, "italic"))
        t.add_row("command", cmd)
        if p.limits.host_memory:
            t.add_row("limits", f"host {p.limits.host_memory} per process")
        return Group(Text(COMMAND_LINE, style="bold reverse"), t)
    s = profile_summary(p)
    micro, accum, procs, eff = p.effective_batch()
    train, data, dev, model = p.train, p.data, p.devices, p.model
    t = LabelGrid()
    origin = p.origin or s.get("origin") or ""
    t.add_row("profile", f"{s['name']} ({origin})")
    if s.get("description"):
        t.add_row("", plain(s["description"], "italic"))
    t.add_row("model", f"{s['model']}  ({model.init})")
    t.add_row("method", fmt.method_label(p.method, optimizer=train.optimizer) + f"  {train.precision}")
    t.add_row("sharding", sharding_label(p))
    t.add_row(
        "data",
        f"{s['dataset']}  max_seq_len {data.max_seq_len}"
        + (f"  {data.num_samples} samples" if data.num_samples else ""),
    )
    lengths = data_lengths(p)
    if lengths is not None:
        t.add_row("lengths", lengths)
    from fttui.core.models.positions import position_warning

    past = position_warning(p)  # max_seq_len past the model's positions: said before launch
    if past:
        t.add_row("", plain(f"warning: {past}", "bold yellow"))
    where = f"{dev.gpus} GPU" + ("s" if dev.gpus != 1 else "") if dev.gpus else "CPU"
    t.add_row("batch", f"{micro} x accum {accum} x {procs} proc{'s' if procs != 1 else ''} = {eff} effective")
    t.add_row("devices", f"{where}, {dev.nodes} node{'s' if dev.nodes != 1 else ''}, launcher {dev.launcher}")
    steps = f"max_steps {train.max_steps}" if (train.max_steps or -1) > 0 else f"epochs {train.epochs}"
    t.add_row(
        "train", f"{steps}  lr {train.lr}  {train.optimizer}" + ("  grad ckpt" if train.gradient_checkpointing else "")
    )
    if p.method_kind().adapters:
        t.add_row("lora", f"r {p.lora.r}  alpha {p.lora.alpha}  dropout {p.lora.dropout}")
    if p.limits.gpu_memory or p.limits.host_memory:
        t.add_row("limits", f"gpu {p.limits.gpu_memory or '-'}  host {p.limits.host_memory or '-'}")
    if overrides:
        t.add_row("overrides", ", ".join(f"{k}={v}" for k, v in overrides.items()))
    if model.trust_remote_code:
        # first and in words (not only a colour): the profile runs code it did not ship
        return Group(Text(REMOTE_CODE_LINE, style="bold reverse"), t)
    return t


__all__ = ["COMMAND_LINE", "REMOTE_CODE_LINE", "profile_details"]
