"""A resolved profile as typed, read-only values, and the figures derived from them.

:class:`Profile` holds one frozen dataclass per schema section, whose field names and types
follow :data:`~fttui.core.profiles.schema.SCHEMA` exactly (``tests/unit/test_profile_typed.py``
keeps them in step), plus the top-level keys and the meta keys the resolver adds.
:meth:`Profile.from_dict` and :meth:`Profile.to_dict` convert from and to the resolved dict
(``profile.json``) without changing a value: lists are held as tuples and tables as read-only
mappings (:mod:`fttui.core.profiles.frozen`), and come back as lists and dicts. The derived figures
(processes per node, world size, effective batch, launcher) are defined here once;
``fttui.core.run.launching.topology``, the picker's ``effective_batch`` and ``profile_summary`` call them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Self

from fttui.core.base import shardings
from fttui.core.profiles.frozen import FrozenRecord, check_keys, freeze, names, thaw
from fttui.core.profiles.schema import OVERRIDE, SCHEMA, TOP


class _Section(FrozenRecord):
    """What the section dataclasses share: conversion from and to their part of the dict."""

    SECTION: ClassVar[str]

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Self:
        """Exactly the section's keys (ValueError otherwise)."""
        check_keys(cls, values, f"[{cls.SECTION}]")
        return cls(**{n: freeze(values[n]) for n in names(cls)})

    @classmethod
    def from_partial(cls, values: Any) -> Self:
        """Missing keys take the schema's default; unknown keys are left out."""
        given = values if isinstance(values, Mapping) else {}
        schema = SCHEMA[cls.SECTION]
        return cls(**{n: freeze(given[n] if n in given else schema[n].default) for n in names(cls)})

    def to_dict(self) -> dict[str, Any]:
        return {n: thaw(getattr(self, n)) for n in names(self)}


@dataclass(frozen=True, eq=False)
class ModelSettings(_Section):
    SECTION: ClassVar[str] = "model"
    name_or_path: str | None
    init: str
    arch: str | None
    config: str | None
    arch_config: Mapping[str, Any]
    arch_name: str | None
    trust_remote_code: bool
    tokenizer: str | None
    attn_implementation: str


@dataclass(frozen=True, eq=False)
class DataSettings(_Section):
    SECTION: ClassVar[str] = "data"
    source: str
    name: str | None
    format: str
    max_seq_len: int
    num_samples: int
    pad_to_max: bool
    eval_ratio: float


@dataclass(frozen=True, eq=False)
class TrainSettings(_Section):
    SECTION: ClassVar[str] = "train"
    batch_size: int
    grad_accum: int
    epochs: float
    max_steps: int
    lr: float
    precision: str
    gradient_checkpointing: bool
    optimizer: str | None
    lr_scheduler: str
    warmup_ratio: float
    weight_decay: float
    seed: int
    warmup_exclude_steps: int
    save: str
    save_steps: int
    output_dir: str | None
    eval_steps: int
    report_to: tuple[str, ...]
    on_oom: str
    max_oom_retries: int
    longest_first: bool
    memory_history_steps: int


@dataclass(frozen=True, eq=False)
class LoraSettings(_Section):
    SECTION: ClassVar[str] = "lora"
    r: int
    alpha: int
    dropout: float
    target_modules: tuple[str, ...] | str


@dataclass(frozen=True, eq=False)
class QuantSettings(_Section):
    SECTION: ClassVar[str] = "quant"
    type: str
    double_quant: bool
    prepare: str


@dataclass(frozen=True, eq=False)
class DeepSpeedSettings(_Section):
    """``[deepspeed]`` (old name ``[zero3]``): what a ``*-offload`` ZeRO sharding puts on the host."""

    SECTION: ClassVar[str] = "deepspeed"
    offload_optimizer: bool
    offload_params: bool
    pin_memory: bool
    optimizer: str
    zero3_init: bool
    stage3_max_reuse_distance: int | None
    stage3_max_live_parameters: int | None


#: the old name of :class:`DeepSpeedSettings`
Zero3Settings = DeepSpeedSettings


@dataclass(frozen=True, eq=False)
class DeviceSettings(_Section):
    SECTION: ClassVar[str] = "devices"
    gpus: int
    cpu_processes: int
    nodes: int
    node_rank: int
    main_addr: str
    main_port: int
    launcher: str

    def processes_per_node(self) -> int:
        """One process per GPU; on CPU (gpus = 0) ``cpu_processes``."""
        gpus = int(self.gpus or 0)
        if gpus > 0:
            return gpus
        return max(1, int(self.cpu_processes or 1))

    def world_size(self) -> int:
        """Processes on all nodes."""
        return self.processes_per_node() * int(self.nodes or 1)


@dataclass(frozen=True, eq=False)
class LimitSettings(_Section):
    SECTION: ClassVar[str] = "limits"
    gpu_memory: str
    host_memory: str


@dataclass(frozen=True, eq=False)
class MonitorSettings(_Section):
    SECTION: ClassVar[str] = "monitor"
    stall_timeout_s: float
    oom_warn_steps: int


@dataclass(frozen=True, eq=False)
class CommandSettings(_Section):
    """``[command]``: a command the profile runs instead of fttui's worker (docs/commands.md)."""

    SECTION: ClassVar[str] = "command"
    argv: tuple[str, ...] | None
    cwd: str | None


#: section name -> its dataclass, in SCHEMA order
SECTION_TYPES: dict[str, type[_Section]] = {
    cls.SECTION: cls
    for cls in (
        ModelSettings,
        DataSettings,
        TrainSettings,
        LoraSettings,
        QuantSettings,
        DeepSpeedSettings,
        DeviceSettings,
        LimitSettings,
        MonitorSettings,
        CommandSettings,
    )
}

#: the meta keys' values when a partial dict leaves them out
_META_DEFAULTS: dict[str, Any] = {"name": "", "source": "", "origin": "", "derived": [], "overrides": []}


class BatchFigures(NamedTuple):
    """Micro batch per process, gradient accumulation, processes, effective batch."""

    micro: int
    accum: int
    processes: int
    effective: int


@dataclass(frozen=True, eq=False)
class Profile(FrozenRecord):
    """A resolved profile; the fields are in the resolved dict's key order."""

    name: str
    source: str
    origin: str
    description: str
    extends: str | None
    method: str
    sharding: str
    model: ModelSettings
    data: DataSettings
    train: TrainSettings
    lora: LoraSettings
    quant: QuantSettings
    deepspeed: DeepSpeedSettings
    devices: DeviceSettings
    limits: LimitSettings
    monitor: MonitorSettings
    command: CommandSettings
    derived: tuple[str, ...]
    overrides: tuple[str, ...]

    @classmethod
    def from_dict(cls, resolved: Mapping[str, Any]) -> Profile:
        """The resolved dict of :func:`load_profile` / :func:`apply_overrides`: exactly its keys
        (ValueError otherwise, e.g. for a key that is no setting); a ``profile.json`` written
        before profiles could hold a ``[command]`` (a run resumed from then) has none."""
        if "command" not in resolved:
            resolved = {**resolved, "command": CommandSettings.from_partial({}).to_dict()}
        check_keys(cls, resolved, "top level")
        # the field values by name, each section's converted by its type (checked by check_keys
        # and the sections' own from_dict): what from_partial builds, so typed as it is
        values: dict[str, Any] = {
            n: SECTION_TYPES[n].from_dict(v) if n in SECTION_TYPES else freeze(v)
            for n, v in ((n, resolved[n]) for n in names(cls))
        }
        return cls(**values)

    @classmethod
    def from_partial(cls, resolved: Mapping[str, Any]) -> Profile:
        """A possibly incomplete dict (a ``profile.json`` of an older run, a hand-written test
        profile): missing keys take the schema defaults, other keys are left out. For derived
        figures only; it checks nothing."""
        values: dict[str, Any] = {}
        for n in names(cls):
            if n == "deepspeed" and n not in resolved:  # a profile.json written before sharding
                values[n] = DeepSpeedSettings.from_partial(resolved.get(shardings.LEGACY_SECTION))
            elif n in SECTION_TYPES:
                values[n] = SECTION_TYPES[n].from_partial(resolved.get(n))
            else:
                default = _META_DEFAULTS[n] if n in _META_DEFAULTS else SCHEMA[TOP][n].default
                values[n] = freeze(resolved.get(n, default))
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The resolved dict again: equal to the one :meth:`from_dict` read, in the same order."""
        out: dict[str, Any] = {}
        for n in names(self):
            value = getattr(self, n)
            out[n] = value.to_dict() if isinstance(value, _Section) else thaw(value)
        return out

    def with_settings(self, changes: Mapping[str, Any]) -> Profile:
        """A copy with some settings changed, by dotted key (``{"train.batch_size": 4}``);
        nothing is checked again (a probe trial's, a memory estimate's variations)."""
        parts: dict[str, dict[str, Any]] = {}
        for dk, value in changes.items():
            section, _, key = dk.rpartition(".")
            parts.setdefault(section, {})[key] = freeze(value)
        top = parts.pop(TOP, {})
        return dataclasses.replace(
            self, **top, **{s: dataclasses.replace(getattr(self, s), **v) for s, v in parts.items()}
        )

    def origin_of(self, key: str) -> str:
        """Where a setting's value came from, as an error names it: ``--set`` when an override set
        it (or one entry of its table), else the profile's file."""
        if any(o.split("=", 1)[0] == key or o.startswith(key + ".") for o in self.overrides):
            return OVERRIDE
        return self.source or self.name or "profile"

    def world_size(self) -> int:
        """Processes on all nodes."""
        return self.devices.world_size()

    def effective_batch(self) -> BatchFigures:
        """Samples per optimizer step: micro batch x accumulation x processes."""
        micro = int(self.train.batch_size or 1)
        accum = int(self.train.grad_accum or 1)
        procs = self.world_size()
        return BatchFigures(micro, accum, procs, micro * accum * procs)

    def sharding_asked(self) -> str:
        """The sharding this profile asks for; a ``profile.json`` written before sharding says
        ``method = "full-zero3-offload"`` instead, which is ``zero3-offload``."""
        return shardings.of(self.method, self.sharding)[1]

    def method_kind(self) -> shardings.MethodKind:
        """The method registry's entry of ``method`` (:mod:`fttui.core.base.methods`; a legacy
        ``full-zero3-offload`` is ``full``); KeyError for an unknown name (a command run's row
        profile, whose Trainer did not say, has none)."""
        kind = shardings.method_of(self.method)
        if kind is None:
            raise KeyError(self.method)
        return kind

    def sharding_kind(self) -> shardings.Sharding:
        """The registry's entry of :meth:`sharding_asked` (KeyError for an unknown name)."""
        return shardings.get(self.sharding_asked())

    def launcher(self) -> str:
        """The launcher that starts the run: the profile's, or for ``auto`` the sharding kind's
        first launcher (DeepSpeed's for ``zero*``, torchrun for ``fsdp*``), else torchrun for
        several processes and plain python for one."""
        if self.devices.launcher != "auto":
            return self.devices.launcher
        kind = shardings.find(self.sharding_asked())
        if kind is not None and kind.launchers:
            return kind.launchers[0]
        if self.devices.processes_per_node() > 1 or int(self.devices.nodes or 1) > 1:
            return "torchrun"
        return "python"


__all__ = [
    "BatchFigures",
    "CommandSettings",
    "DataSettings",
    "DeviceSettings",
    "LimitSettings",
    "LoraSettings",
    "ModelSettings",
    "MonitorSettings",
    "Profile",
    "QuantSettings",
    "SECTION_TYPES",
    "TrainSettings",
    "DeepSpeedSettings",
    "Zero3Settings",
]
