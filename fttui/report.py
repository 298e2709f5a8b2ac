"""fttui's public reporting API: any training loop tells fttui its steps in one call per step.

    import fttui

    fttui.report_start(total_steps=1000, params=n_params, model_config=model.config)  # optional
    for step in range(1, 1001):
        loss = train_one_step(batch)
        fttui.report_step(step, samples=len(batch), tokens=n_tokens, loss=loss)

Under ``fttui run -- CMD`` (``FTTUI_RUN_DIR`` names the run directory) each call writes fttui's
own events, the ones its Trainer callback writes (a ``start`` event first, one ``step`` event per
call with this process's cumulative samples and tokens, the step's loss, step and training time,
peak RSS; an ``end`` event at :func:`report_end` or when the process exits), with this process's
rank (the launcher's ``RANK``, ``WORLD_SIZE``) and pid: the app, ``fttui run --headless`` and the
results row show the loop as they show a profile run. Outside fttui every call does nothing (well
under a microsecond: ``bench/report_cost.py``, docs/commands.md).

This module imports neither torch nor Textual (nothing but ``os`` outside fttui); ``pip install
fttui``, no extras, provides it. Its names, their parameters and their meaning are the public
interface, versioned by :data:`API_VERSION`: a later fttui may add optional keyword parameters and
raise the minor number, and changes nothing else without raising the major one.

A call never raises and never stops training: bad input (``samples="8"``) is one line on stderr
and its traceback in the run directory's ``integration.log``; fttui then stops reporting this
process. docs/commands.md ("Any training loop: fttui.report").
"""

from __future__ import annotations

import os as _os

TYPE_CHECKING = False  # typing is not imported for this (outside fttui this module imports os alone)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["API_VERSION", "report_start", "report_step", "report_end", "enabled"]

#: The version of this interface, ``"MAJOR.MINOR"``: the major number changes when a name, a
#: parameter or a meaning changes; the minor one when an optional parameter is added.
API_VERSION = "1.0"


def _reporter() -> Any:
    """This process's reporter under fttui (``FTTUI_RUN_DIR`` names a folder), else ``None``."""
    path = _os.environ.get("FTTUI_RUN_DIR")
    if not path or not _os.path.isdir(path):
        return None
    try:
        from fttui.integrations.reporter import Reporter

        return Reporter(path, via="report")
    except Exception as e:  # never stop the loop: it runs without fttui's figures
        import sys

        print(
            f"fttui: the reporting API could not start ({type(e).__name__}: {e}); training goes on without it",
            file=sys.stderr,
        )
        return None


_REPORTER = _reporter()


def enabled() -> bool:
    """Whether the calls write anything (the process runs under ``fttui run``)."""
    return _REPORTER is not None and _REPORTER.active


def report_start(
    *,
    total_steps: int | None = None,
    params: int | None = None,
    trainable_params: int | None = None,
    model_config: Any = None,
    model_name: str | None = None,
    batch_size: int | None = None,
    grad_accum: int | None = None,
    precision: str | None = None,
    world_size: int | None = None,
    resumed_step: int = 0,
) -> None:
    """Training begins (optional; call it before the first step so that the first step's time
    counts; the first :func:`report_step` reports a start otherwise). All optional:
    ``total_steps`` (the ETA), ``params`` and ``trainable_params`` (the model's parameter counts),
    ``model_config`` (a Hugging Face config, or a dict of its names ``vocab_size``,
    ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``: FLOPs per token, so MFU),
    ``model_name``, ``batch_size`` (per process), ``grad_accum``, ``precision`` (``bf16``,
    ``fp16``, ``fp32``), ``world_size`` (default: the launcher's ``WORLD_SIZE``), ``resumed_step``
    (the step a resumed loop continues from)."""
    r = _REPORTER
    if r is None:
        return
    r.start(
        total_steps=total_steps,
        params=params,
        trainable_params=trainable_params,
        model_config=model_config,
        model_name=model_name,
        batch_size=batch_size,
        grad_accum=grad_accum,
        precision=precision,
        world_size=world_size,
        resumed_step=resumed_step,
    )


def report_step(
    step: int | None = None,
    *,
    samples: int | None = None,
    tokens: int | None = None,
    loss: Any = None,
    lr: float | None = None,
    epoch: float | None = None,
    total_steps: int | None = None,
) -> None:
    """One optimizer step of this process is done: ``step`` its number (from 1; default: one
    more than the last), ``samples`` and ``tokens`` what this step trained on in this process (fttui
    adds them up), ``loss`` the step's training loss (a number or a one-element tensor, read
    once per call), ``lr``, ``epoch``, ``total_steps`` (when it was not said at the start)."""
    r = _REPORTER
    if r is None:
        return
    r.step(step, samples=samples, tokens=tokens, loss=loss, lr=lr, epoch=epoch, total_steps=total_steps)


def report_end() -> None:
    """Training is over (optional: fttui writes the end when the process exits)."""
    r = _REPORTER
    if r is None:
        return
    r.end()
