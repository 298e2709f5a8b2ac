"""What both readers of other tools' configs share: the mapped profile being built, the key
vocabulary of each tool, the DeepSpeed JSON a config names, precision and attention.

A reader (``llamafactory``, ``axolotl``) turns the YAML mapping into :class:`Mapped`: profile
data in fttui's sections (as a TOML file would hold it), the keys that do not map (each with the
reason, never silently dropped) and notes on where the profile differs from the tool's run.
Pure: stdlib only; the YAML itself is parsed in :mod:`fttui.core.profiles.foreign`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from fttui.core.base.errors import ProfileError, did_you_mean
from fttui.core.profiles.discovery import display
from fttui.core.profiles.schema import SCHEMA, TOP

__all__ = ["Mapped", "article", "known_keys", "deepspeed_sharding", "tool_default", "is_true"]

_KNOWN_KEYS = Path(__file__).with_name("known_keys.json")


@dataclass
class Mapped:
    """A config read into fttui's terms.

    tool: ``"LLaMA-Factory"`` or ``"axolotl"``. path: the YAML file. data: profile sections
    (``{"method": ..., "train": {...}}``). unmapped: ``(key, value, why)`` for each key that
    fttui does not take over. notes: where the profile differs from the tool's own run.
    """

    tool: str
    path: Path
    config: Mapping[str, Any]
    data: dict[str, Any] = field(default_factory=dict)
    unmapped: list[tuple[str, Any, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    gpu_note: str | None = None  # the YAML does not say how many GPUs: the tool takes it from the launch
    deepspeed_file: Path | None = None  # the DeepSpeed JSON the config names, as found
    _used: set[str] = field(default_factory=set)

    @property
    def where(self) -> str:
        return display(self.path)

    def error(self, key: str | None, message: str, hint: str | None = None) -> ProfileError:
        return ProfileError(self.where, key, message, hint)

    def get(self, key: str, default: Any = None) -> Any:
        """The config's value of ``key`` (marked as read), ``default`` when absent or empty."""
        self._used.add(key)
        value = self.config.get(key)
        return default if value is None or value == "" else value

    def has(self, key: str) -> bool:
        value = self.config.get(key)
        return value is not None and value != ""

    def put(self, dotted: str, value: Any) -> None:
        """Set a profile key (``train.batch_size``; ``method`` at the top level)."""
        section, _, key = dotted.rpartition(".")
        if section:
            self.data.setdefault(section, {})[key] = value
        else:
            self.data[key] = value

    def put_if_known(self, dotted: str, value: Any, source_key: str) -> None:
        """Set a profile key when this fttui has it, else list ``source_key`` as not mapped."""
        section, _, key = dotted.rpartition(".")
        if key in SCHEMA.get(section or TOP, {}):
            self.put(dotted, value)
        else:
            self.skip(source_key, f"this fttui has no {dotted} setting")

    def skip(self, key: str, why: str) -> None:
        """List ``key`` as not mapped, with the reason."""
        self._used.add(key)
        value = self.config.get(key)
        if value is None or value == "" or value == [] or value == {}:
            return  # an empty key (axolotl's templates leave many) asks for nothing
        self.unmapped.append((key, value, why))

    def finish(self, tool_keys: frozenset[str]) -> None:
        """Every key not read: listed when the tool knows it, a one-line error when no one does."""
        for key in self.config:
            if key in self._used:
                continue
            if key not in tool_keys:
                hint = did_you_mean(key, tool_keys)
                raise self.error(
                    key,
                    f"unknown {self.tool} key",
                    hint or f"not a key of {self.tool} or the Trainer; check the spelling",
                )
            self.skip(key, f"{article(self.tool)} {self.tool} setting fttui has no counterpart for")


def article(word: str) -> str:
    """``a`` or ``an`` before ``word`` (by its first letter: "an axolotl", "a LLaMA-Factory")."""
    return "an" if word[:1].lower() in "aeio" else "a"


@cache
def known_keys(tool: str) -> frozenset[str]:
    """The top-level keys ``tool`` (``llamafactory``, ``axolotl``) accepts, the Trainer's included
    (``scripts/foreign_keys.py`` reads them from the tools' sources)."""
    data = json.loads(_KNOWN_KEYS.read_text(encoding="utf-8"))
    return frozenset(data[tool]) | frozenset(data["trainer"])


def is_true(value: Any) -> bool:
    """YAML booleans and the strings people write for them (``"true"``, ``"auto"`` is not)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return value is True or value == 1


def tool_default(m: Mapped, key: str, value: Any) -> Any:
    """``key``'s value, or the tool's own default (noted, so the profile runs what the tool ran)."""
    if m.has(key):
        return m.get(key)
    m.get(key)
    m.notes.append(f"{key} not given: {m.tool}'s default {value!r}")
    return value


#: the start of the note on the GPU count (``--from`` prints it on stderr unless --set gives one)
GPU_NOTE = "number of GPUs:"


def gpu_count_note(m: Mapped, where: str) -> None:
    """The note that the YAML does not say how many GPUs it runs on: the tool takes the count from
    the launch, so the profile has one GPU (a ZeRO or FSDP setup then shards over one card) until
    ``--set devices.gpus=N``."""
    m.gpu_note = (
        f"{GPU_NOTE} {m.tool} takes it from {where}, not from this file; the profile runs and "
        "estimates on 1 GPU"
        + (" (a sharding over one card shards nothing)" if m.data.get("sharding") not in (None, "none") else "")
        + " until --set devices.gpus=N (profiles --from takes --set too)"
    )
    m.notes.append(m.gpu_note)


def _deepspeed_file(m: Mapped, ref: str) -> Path:
    """The DeepSpeed JSON a config names: the tools run from their working folder, so a relative
    path is tried there first, then beside the YAML, then from each folder above the YAML's
    (LLaMA-Factory's examples name ``examples/deepspeed/ds_z3_config.json`` from its root, two
    folders above the YAML). The mapping's notes say which file was used."""
    given = Path(ref).expanduser()
    if given.is_absolute():
        tried = [given]
    else:
        yaml_dir = m.path.parent.resolve()
        tried = [Path.cwd() / given, *(folder / given for folder in (yaml_dir, *yaml_dir.parents))]
    for cand in tried:
        if cand.is_file():
            return cand
    folders = list(dict.fromkeys(display(c.parent.resolve()) for c in tried))
    raise m.error(
        "deepspeed",
        f"DeepSpeed config not found: {ref}",
        f"looked in {folders[0]}"
        if len(folders) == 1
        else f"looked from the working folder ({folders[0]}), the YAML's folder and each folder above it",
    )


def deepspeed_sharding(m: Mapped, ref: str) -> None:
    """``sharding`` and ``[deepspeed]`` from the DeepSpeed JSON ``ref`` names (ZeRO stage, what is
    offloaded to the host). Stage 0 is plain data parallel; stage 1 and NVMe offload are not
    among fttui's shardings (one line, naming the ones that are)."""
    path = m.deepspeed_file = _deepspeed_file(m, ref)
    try:
        conf = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise m.error("deepspeed", f"{display(path)}: not a DeepSpeed JSON config ({e})") from None
    except RecursionError:
        raise m.error("deepspeed", f"{display(path)}: not a DeepSpeed JSON config (nested too deeply)") from None
    if not isinstance(conf, dict):
        raise m.error("deepspeed", f"{display(path)}: not a DeepSpeed JSON config (not a JSON object)")
    zero = conf.get("zero_optimization") or {}
    if not isinstance(zero, dict):
        raise m.error("deepspeed", f"{display(path)}: zero_optimization must be a JSON object")
    stage = zero.get("stage", 0)
    devices = {}
    for part in ("offload_optimizer", "offload_param"):
        dev = (zero.get(part) or {}).get("device") if isinstance(zero.get(part), dict) else None
        devices[part] = str(dev or "none").lower()
        if devices[part] == "nvme":
            raise m.error(
                "deepspeed", f"{display(path)}: {part} to nvme", 'fttui offloads to the host (device "cpu") only'
            )
    if stage == 0:
        m.put("sharding", "none")
        m.notes.append(
            f"DeepSpeed config {display(path.resolve())}: ZeRO stage 0 is plain data parallel (sharding none)"
        )
        return
    if stage not in (2, 3):
        raise m.error(
            "deepspeed",
            f"{display(path)}: ZeRO stage {stage} is not a sharding fttui runs",
            "use stage 2 or 3 (fttui's zero2, zero2-offload, zero3, zero3-offload)",
        )
    opt_host = devices["offload_optimizer"] == "cpu"
    param_host = devices["offload_param"] == "cpu"
    if stage == 2 and param_host:
        raise m.error(
            "deepspeed",
            f"{display(path)}: offload_param under ZeRO stage 2",
            "stage 2 cannot offload parameters; use stage 3 or drop offload_param",
        )
    offload = opt_host or param_host
    m.put("sharding", f"zero{stage}" + ("-offload" if offload else ""))
    if isinstance(conf.get("optimizer"), dict) and conf["optimizer"]:
        # the JSON's optimizer section: DeepSpeed builds the optimizer, not the Trainer
        m.put("deepspeed.optimizer", "deepspeed")
        m.notes.append(
            f"DeepSpeed config {path.name}: its optimizer section ({conf['optimizer'].get('type', '?')}) "
            'is kept: DeepSpeed\'s own Adam steps (deepspeed.optimizer = "deepspeed"; '
            "fttui writes AdamW with the Trainer's values)"
        )
    if offload:
        m.put("deepspeed.offload_optimizer", opt_host)
        if stage == 3:
            m.put("deepspeed.offload_params", param_host)
        pins = [
            bool((zero.get(p) or {}).get("pin_memory", False))
            for p in ("offload_optimizer", "offload_param")
            if devices[p] == "cpu"
        ]
        m.put("deepspeed.pin_memory", all(pins))
    m.notes.append(
        f"DeepSpeed config {display(path.resolve())}: ZeRO stage {stage}"
        + (
            " with "
            + " and ".join(n for n, on in (("optimizer", opt_host), ("parameters", param_host)) if on)
            + " on the host"
            if offload
            else ""
        )
        + "; fttui writes its own DeepSpeed config with these settings"
    )
