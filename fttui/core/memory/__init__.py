"""The memory model: peak GPU memory per card and host memory of a run, predicted before launch.

Pure Python (no torch). The public API lives here: :func:`estimate` -> :class:`Estimate`,
:func:`solve_max` (the largest batch size / sequence length that fits), :func:`calibrate` and
:func:`calibration_from_store` (-> :class:`Calibration`), the breakdown labels
(:data:`COMPONENTS`, :data:`HOST_COMPONENTS`) and the fitted :data:`CONSTANTS`. The modules:
``inputs`` (what is read of a profile), ``linears`` (layer shapes, LoRA targets), ``states``
(weights, gradients, optimizer states), ``sharding`` (the same per rank under DeepSpeed ZeRO and
FSDP, and what their offload puts on the host), ``activations``, ``host``, ``estimate`` (the
sum), ``calibration``, ``solve`` and ``breakdown`` (the records).
"""

from __future__ import annotations

from fttui.core.base.errors import EstimateError
from fttui.core.base.units import GIB, MIB, fmt_bytes
from fttui.core.memory.breakdown import COMPONENTS, CONSTANTS, HOST_COMPONENTS, Calibration, Estimate
from fttui.core.memory.calibration import calibrate, calibration_from_store
from fttui.core.memory.estimate import estimate
from fttui.core.memory.inputs import PARAMS
from fttui.core.memory.linears import lora_modules
from fttui.core.memory.solve import solve_max
from fttui.core.models.numbers import arch_numbers

__all__ = [
    "COMPONENTS",
    "CONSTANTS",
    "GIB",
    "HOST_COMPONENTS",
    "MIB",
    "PARAMS",
    "Calibration",
    "Estimate",
    "EstimateError",
    "arch_numbers",
    "calibrate",
    "calibration_from_store",
    "estimate",
    "fmt_bytes",
    "lora_modules",
    "solve_max",
]
