"""The probe screen's form: which setting to probe, its range, steps per trial, the repeats next
to the boundary, synthetic or the profile's own data, and memory budgets.

This module owns the form's fields (:func:`compose_form`, composed into the probe screen,
prefilled from the profile's limits or a recorded result) and what their texts mean
(:func:`parse_form`: the probe's parameter, range, steps and repeats, whether it trains on the
data's longest samples, and the ``limits.*`` overrides of the budgets that differ from the
profile's own), with a one-line :class:`FttuiError` for bad input. The screen
(fttui.tui.probe_screen) reads the fields' values and starts the probe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Checkbox, Input, Label, Select

from fttui.core.base.constants import PROBE_PARAMS, PROBE_STEPS
from fttui.core.base.errors import FttuiError

if TYPE_CHECKING:
    from fttui.core.profiles.typed import LimitSettings

DEFAULT_PARAM = "batch_size"
DEFAULT_RANGE = (1, 1024)
DEFAULT_STEPS = PROBE_STEPS
DEFAULT_REPEATS = 0
#: The budget fields: (field id, key under ``limits``).
LIMIT_FIELDS = (("host", "host_memory"), ("gpu", "gpu_memory"))


class ProbeForm(NamedTuple):
    """What the form asks for."""

    param: str
    lo: int
    hi: int
    steps: int
    repeats: int
    data: bool  # the data set's longest samples instead of synthetic full-length ones
    overrides: dict


def compose_form(limits: LimitSettings, result=None) -> ComposeResult:
    """The form's row of fields (ids ``pr-param``, ``pr-lo``, ``pr-hi``, ``pr-steps``,
    ``pr-repeats``, ``pr-data``, ``pr-host``, ``pr-gpu``) and its start button ``pr-start``."""
    res = result
    with Horizontal(id="probe-form"):
        with Vertical(classes="field field-param"):
            yield Label("probe")
            yield Select(
                [(p, p) for p in PROBE_PARAMS],
                id="pr-param",
                allow_blank=False,
                value=res.param if res is not None else DEFAULT_PARAM,
                compact=True,
            )
        with Vertical(classes="field"):
            yield Label("from")
            yield Input(str(res.lo if res is not None else DEFAULT_RANGE[0]), id="pr-lo", type="integer", compact=True)
        with Vertical(classes="field"):
            yield Label("to")
            yield Input(str(res.hi if res is not None else DEFAULT_RANGE[1]), id="pr-hi", type="integer", compact=True)
        with Vertical(classes="field"):
            yield Label("steps")
            yield Input(str(DEFAULT_STEPS), id="pr-steps", type="integer", compact=True)
        with Vertical(classes="field field-repeats"):
            yield Label("repeats")
            yield Input(
                str(res.repeats if res is not None else DEFAULT_REPEATS),
                id="pr-repeats",
                type="integer",
                compact=True,
                tooltip="check both values next to the boundary this many "
                "more times in fresh processes; a value that goes both ways makes a band",
            )
        with Vertical(classes="field field-data"):
            yield Label("samples")
            yield Checkbox(
                "data",
                res is not None and getattr(res, "samples", "") == "data",
                id="pr-data",
                compact=True,
                tooltip="probe with the longest samples of the profile's data set "
                "instead of synthetic ones of max_seq_len tokens",
            )
        with Vertical(classes="field field-limit"):
            yield Label("host mem")
            yield Input(limits.host_memory or "", id="pr-host", placeholder="none", compact=True)
        with Vertical(classes="field field-limit"):
            yield Label("GPU mem")
            yield Input(limits.gpu_memory or "", id="pr-gpu", placeholder="none", compact=True)
        with Vertical(classes="field field-start"):
            yield Label(" ")
            yield Button("Start (s)", id="pr-start", variant="primary", compact=True)


def parse_form(values: dict, limits: LimitSettings) -> ProbeForm:
    """The form from the fields' values (by field id without ``pr-``: texts, and ``data`` the
    checkbox's bool); ``limits``: the profile's own. FttuiError on bad input."""
    param = values.get("param")
    if not isinstance(param, str) or param not in PROBE_PARAMS:
        param = DEFAULT_PARAM

    def num(fid: str, what: str) -> int:
        text = values[fid].strip()
        try:
            return int(text)
        except ValueError:
            raise FttuiError(f"{what}: expected a whole number, got {text!r}") from None

    lo, hi, steps = num("lo", "from"), num("hi", "to"), num("steps", "steps")
    repeats = num("repeats", "repeats") if str(values.get("repeats", "")).strip() else DEFAULT_REPEATS
    if repeats < 0:
        raise FttuiError("repeats: must be >= 0")
    if lo < 1 or hi < lo:
        raise FttuiError(f"range {lo}..{hi}: need 1 <= from <= to")
    if steps < 1:
        raise FttuiError("steps: must be >= 1")
    overrides = {}
    for fid, key in LIMIT_FIELDS:
        text = values[fid].strip()
        if text != (getattr(limits, key) or ""):
            overrides[f"limits.{key}"] = text
    return ProbeForm(param, lo, hi, steps, repeats, bool(values.get("data")), overrides)


__all__ = [
    "DEFAULT_PARAM",
    "DEFAULT_RANGE",
    "DEFAULT_STEPS",
    "DEFAULT_REPEATS",
    "LIMIT_FIELDS",
    "ProbeForm",
    "compose_form",
    "parse_form",
]
