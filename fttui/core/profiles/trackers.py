"""The experiment trackers a profile may name in ``train.report_to``: transformers' own
``report_to`` names, what each needs installed (the modules transformers looks for) and the pip
package that provides it. Pure data and a stdlib check: :func:`missing_tracker` says, before
launch and without importing the tracker, which one is not installed.
"""

from __future__ import annotations

import importlib.util
import os
from typing import NamedTuple


class Tracker(NamedTuple):
    """``modules``: importable modules transformers' integration needs (``any_of``: one of them
    is enough); ``pip``: the package to install; ``env``: an environment variable it needs."""

    modules: tuple[str, ...]
    pip: str
    any_of: bool = False
    env: str | None = None


#: transformers' report_to name -> what it needs (transformers.integrations.INTEGRATION_TO_CALLBACK)
TRACKERS: dict[str, Tracker] = {
    "tensorboard": Tracker(("tensorboard", "tensorboardX"), "tensorboard", any_of=True),
    "wandb": Tracker(("wandb",), "wandb"),
    "mlflow": Tracker(("mlflow",), "mlflow"),
    "comet_ml": Tracker(("comet_ml",), "comet-ml"),
    "neptune": Tracker(("neptune",), "neptune"),
    "clearml": Tracker(("clearml",), "clearml"),
    "dvclive": Tracker(("dvclive",), "dvclive"),
    "swanlab": Tracker(("swanlab",), "swanlab"),
    "trackio": Tracker(("trackio",), "trackio"),
    "codecarbon": Tracker(("codecarbon",), "codecarbon"),
    "azure_ml": Tracker(("azureml.core.run",), "azureml-core"),
    "dagshub": Tracker(("dagshub", "mlflow"), "dagshub"),
    "flyte": Tracker(("flytekit", "flytekitplugins.deck"), "flytekitplugins-deck-standard"),
    "kubeflow": Tracker((), "kubeflow", env="KUBEFLOW_TRAINER_SERVER_URL"),
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing or broken
        return False


def missing_tracker(names: list[str] | tuple[str, ...]) -> tuple[str, str] | None:
    """``(name, what to do)`` for the first tracker of ``names`` that cannot run here, else None."""
    for name in names:
        tracker = TRACKERS.get(name)
        if tracker is None:
            return name, "not a tracker transformers knows: one of " + ", ".join(TRACKERS)
        found = [_installed(m) for m in tracker.modules]
        if found and not (any(found) if tracker.any_of else all(found)):
            return name, f"not installed: pip install {tracker.pip}"
        if tracker.env and not os.environ.get(tracker.env):
            return name, f"needs the environment variable {tracker.env}"
    return None


__all__ = ["TRACKERS", "Tracker", "missing_tracker"]
