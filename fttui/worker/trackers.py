"""fttui's summary row and environment, logged to the run's trackers (``train.report_to``) when
training ends.

transformers' own callbacks log the Trainer's figures (loss, learning rate, evaluation); at
``on_train_end`` :class:`RowToTrackers` adds fttui's row as it stands then
(:func:`fttui.core.run.row.summary.row_so_far`: the worker's events and the supervisor's samples so
far; the stored row, written by the supervisor once the processes exit, adds the exit and the
last samples) through the writer or run that transformers' callback holds:

- TensorBoard (``TensorBoardCallback.tb_writer``): the row and the environment as text
  (``fttui/row``, ``fttui/env``, JSON), every number as a scalar ``fttui/<column>`` (per card
  lists as ``fttui/<column>/<index>``) at the last step;
- MLflow and DagsHub (``MLflowCallback._ml_flow``, its active run): the row's labels as params
  and its numbers as metrics, ``fttui/<column>``, and the row and environment as
  ``fttui/row.json`` / ``fttui/env.json`` artifacts.

Other trackers get no fttui row: a ``tracker`` event says so. :func:`~.trainer.make_trainer`
puts the trackers' callbacks after fttui's, so the writer is still open and the run not ended.
Each tracker's outcome is a ``tracker`` event (``name``, ``logged``, ``where`` or ``error``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

from fttui.core.results.columns import SETTINGS

#: row columns logged as MLflow params (the row's settings; the numbers go as metrics)
PARAM_COLUMNS = SETTINGS


def numbers(row: dict[str, Any]) -> dict[str, float]:
    """Every figure of the row as ``fttui/<column>`` (per card or rank lists: ``/<index>``)."""
    out: dict[str, float] = {}
    for key, value in row.items():
        if isinstance(value, bool) or key in ("exit_code",):
            continue
        if isinstance(value, (int, float)):
            out[f"fttui/{key}"] = float(value)
        elif (
            isinstance(value, list)
            and value
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        ):
            for i, v in enumerate(value):
                out[f"fttui/{key}/{i}"] = float(v)
    return out


def environment(row: dict[str, Any]) -> dict[str, Any]:
    return {"versions": row.get("versions") or {}, "env": row.get("env") or {}}


def _tensorboard(cb, row: dict[str, Any], step: int) -> str | None:
    writer = getattr(cb, "tb_writer", None)
    if writer is None:
        return None
    writer.add_text("fttui/row", json.dumps(row, sort_keys=True, default=str), step)
    writer.add_text("fttui/env", json.dumps(environment(row), sort_keys=True, default=str), step)
    for tag, value in numbers(row).items():
        writer.add_scalar(tag, value, step)
    writer.flush()
    return str(getattr(writer, "log_dir", None) or getattr(cb, "logging_dir", ""))


def _mlflow(cb, row: dict[str, Any], step: int) -> str | None:
    mlflow = getattr(cb, "_ml_flow", None)
    if mlflow is None:
        return None
    run = mlflow.active_run()
    if run is None:
        return None
    limit = 250
    try:
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH as limit
    except ImportError:
        pass
    params = {f"fttui/{k}": str(row[k])[:limit] for k in PARAM_COLUMNS if row.get(k) is not None}
    mlflow.log_params(params)
    mlflow.log_metrics(numbers(row), step=step)
    mlflow.log_dict(row, "fttui/row.json")
    mlflow.log_dict(environment(row), "fttui/env.json")
    return f"mlflow run {run.info.run_id}"


class RowToTrackers(TrainerCallback):
    """At ``on_train_end`` (lowest rank), fttui's row to every tracker callback of ``trainer``."""

    def __init__(self, row: Callable[[], dict[str, Any]], emit: Callable[..., Any]) -> None:
        self.row, self.emit = row, emit
        self.trainer = None

    def on_train_end(self, args, state, control, **kw):
        if not state.is_world_process_zero or self.trainer is None or not args.report_to:
            return
        from transformers.integrations import INTEGRATION_TO_CALLBACK, MLflowCallback, TensorBoardCallback

        names = {cls: name for name, cls in INTEGRATION_TO_CALLBACK.items()}
        trackers = [(cb, names[type(cb)]) for cb in self.trainer.callback_handler.callbacks if type(cb) in names]
        if not trackers:
            return
        try:
            row = self.row()
        except Exception as e:  # the trackers keep the Trainer's own figures; say why fttui's are missing
            for _, name in trackers:
                self.emit("tracker", name=name, logged=False, error=f"fttui row: {e!r}"[:300])
            return
        step = int(state.global_step)
        for cb, name in trackers:
            try:
                if isinstance(cb, TensorBoardCallback):
                    where = _tensorboard(cb, row, step)
                elif isinstance(cb, MLflowCallback):
                    where = _mlflow(cb, row, step)
                else:
                    self.emit(
                        "tracker", name=name, logged=False, error="fttui logs its row to tensorboard and mlflow only"
                    )
                    continue
            except Exception as e:  # a tracker's failure must not fail a finished training
                self.emit("tracker", name=name, logged=False, error=repr(e)[:300])
                continue
            if where is None:
                self.emit("tracker", name=name, logged=False, error="no open writer or active run")
            else:
                self.emit("tracker", name=name, logged=True, where=where)


__all__ = ["RowToTrackers", "numbers", "PARAM_COLUMNS"]
