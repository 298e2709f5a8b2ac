"""What a worker process does before training: read and check ``profile.json``, write events
(:class:`Emitter`), read the launcher's environment, then :func:`setup`: fail fast on bad data,
import the training stack, apply the memory limits (:mod:`.limits`), load the tokenizer and build
the model. Shared by the training worker (:mod:`.train`) and the probe worker (:mod:`.probe`).
Imports nothing heavy at import time: data validation fails fast, before torch loads.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import time
from types import ModuleType
from typing import Any, cast

from fttui.core.base import shardings
from fttui.core.data.records import load_records
from fttui.core.profiles.schema import SYNTHETIC
from fttui.core.profiles.stored import check_profile as check_stored
from fttui.core.profiles.stored import stored_profile
from fttui.core.profiles.typed import Profile
from fttui.core.run.files.events import record, write_event
from fttui.core.run.fold.phases import LOADING_MODEL
from fttui.core.run.launching.oplocks import clear_stale_locks

from .errors import ConfigError
from .limits import (
    apply_gpu_limit,
    apply_host_limit,
    extensions_root,
    parse_size,
    plain_arch_list,
    preload_before_limit,
)

__all__ = ["Emitter", "check_profile", "env_int", "read_profile", "Setup", "setup", "stack_imported"]


@contextlib.contextmanager
def stack_imported():
    """Import the training stack without the cyclic collector, collect once, then move what is
    left to the collector's permanent generation (``gc.freeze``). Importing torch,
    transformers and peft leaves about half a million tracked objects that live as long as the
    process; every full collection walked them all again (0.3 s of CPU each, about a dozen per
    run: the automatic ones while importing, the explicit ones of accelerate, DeepSpeed and the
    process-group teardown; 2 of a 2-rank run's 8 CPU-s per rank). The model and everything
    built after are collected as before (the teardown needs that:
    :func:`fttui.worker.train._close_process_group`). The import garbage is freed by the one
    collection, but the heap grows by it before (about 8 MB of resident memory, 2% of a worker's
    baseline)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.collect()
        gc.freeze()
        if enabled:
            gc.enable()


class Emitter:
    """Writes the worker's own events (phases, errors, saves, trackers; the training's events are
    the Trainer callback's) with the common keys ``event``, ``t``, ``rank``, ``source="worker"``,
    through their records (one line, one ``os.write`` on an O_APPEND descriptor:
    :func:`fttui.core.run.files.events.write_event`)."""

    def __init__(self, path: str, rank: int) -> None:
        self.path, self.rank = path, int(rank)
        self.phase: str | None = None  # the startup phase announced last (an error before training names it)

    def __call__(self, kind: str, /, **fields: Any) -> dict[str, Any]:
        if kind == "phase":
            self.phase = fields.get("phase")
        return write_event(self.path, record(kind, t=time.time(), rank=self.rank, source="worker", **fields))


def needs_bitsandbytes(method: str, optimizer: str | None) -> bool:
    """A k-bit method, or one of bitsandbytes' optimizers (``paged_adamw_32bit``, ``adamw_bnb_8bit``...)."""
    kind = shardings.method_of(method)
    return (kind is not None and kind.quantised) or shardings.bnb_optimizer(optimizer)


def unused_packages(method: str, deepspeed: bool, optimizer: str | None, report_to) -> list[str]:
    """Installed packages the libraries import whenever they are there, that this run never uses:
    peft and transformers import bitsandbytes (which imports torch's compiler stack); accelerate's
    ``unwrap_model`` (in ``Trainer.__init__``) imports deepspeed, and deepspeed imports mlflow.
    Together about 3 s of CPU at every start of a plain run (docs/performance.md)."""
    unused = [] if needs_bitsandbytes(method, optimizer) else ["bitsandbytes"]
    if not deepspeed:
        unused.append("deepspeed")
    if "mlflow" not in report_to:
        unused.append("mlflow")
    return unused


def hide_unused(names: list[str]) -> None:
    """Make ``names`` look not installed to this process (``importlib.util.find_spec`` gives None,
    ``import`` raises ImportError), unless something imported them already."""
    # None in sys.modules is how Python blocks an import; typeshed types the dict without it
    modules = cast("dict[str, ModuleType | None]", sys.modules)
    for name in names:
        modules.setdefault(name, None)


def env_int(*names: str, default: int) -> int:
    """The first of the environment variables ``names`` that holds an integer, else ``default``."""
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            try:
                return int(v)
            except ValueError:
                pass
    return default


#: the tables a profile.json must hold (a missing key takes its default; a missing table is no profile)
_SECTIONS = ("model", "data", "train", "lora", "quant", "devices", "limits")


def check_profile(obj: Any) -> Profile:
    """A parsed ``profile.json`` as the run's Profile: its older shapes normalised
    (:func:`~fttui.core.profiles.stored.stored_profile`) and every value through the schema's own
    check (:func:`~fttui.core.profiles.stored.check_profile`), so the worker refuses exactly what a
    profile file may not hold and runs whatever it may. FttuiError (one line, exit 2) otherwise."""
    if not isinstance(obj, dict):
        raise ConfigError("profile.json: expected a JSON object")
    for sec in _SECTIONS:
        if not isinstance(obj.get(sec), dict):
            raise ConfigError(f"profile.json: missing section {sec!r}")
    prof = stored_profile(obj)
    check_stored(prof, "profile.json")
    return prof


def _threads(local_world: int) -> int:
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) > 0:  # the user's (or the launcher's) choice wins
        return int(omp)
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, n // max(1, local_world))


def _refuse(profile: Profile, kind: shardings.Sharding, use_cuda: bool) -> None:
    """What this process cannot run, each in one line: fp16 without a card, a sharding without
    the launcher that makes its process group, an offloading sharding on CPU ranks."""
    if profile.train.precision == "fp16" and not use_cuda:
        raise ConfigError("train.precision: fp16 needs a CUDA GPU; use bf16 or fp32 on CPU")
    if kind.sharded and "LOCAL_RANK" not in os.environ:
        first, *rest = kind.launchers
        raise ConfigError(
            f"sharding {kind}: launch the worker with the {first} launcher (devices.launcher = "
            f'"{first}")' + "".join(f" or {r}" for r in rest) + f"; {kind.family} needs a "
            "process group, plain python is not supported"
        )
    if kind.needs_cuda and not use_cuda:
        raise ConfigError(
            f"sharding {kind}: needs CUDA GPUs (on CPU ranks there is no device to offload from); "
            f'use sharding = "{kind.without_offload()}"'
        )


class Setup:
    """What a worker process builds once: profile, torch state, limits, model and tokenizer."""

    profile: Profile
    run_dir: str
    rank: int
    world: int
    local_rank: int
    use_cuda: bool
    limits: dict[str, Any]
    model: Any
    info: dict[str, Any]
    tok: Any
    records: Any
    t_boot: float
    log: Any


def read_profile(run_dir: str) -> Profile:
    """The run's ``profile.json``, checked (:func:`check_profile`)."""
    try:
        with open(os.path.join(run_dir, "profile.json"), encoding="utf-8") as f:
            profile = json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{os.path.join(run_dir, 'profile.json')}: not found") from None
    except ValueError as e:
        raise ConfigError(f"{os.path.join(run_dir, 'profile.json')}: malformed JSON ({e})") from None
    return check_profile(profile)


def setup(run_dir: str, state: dict[str, Any], profile: Profile | None = None) -> Setup:
    """Import the stack, apply the memory limits, build the model and the tokenizer."""
    su = Setup()
    su.t_boot = time.perf_counter()
    su.run_dir = run_dir
    su.rank = state["rank"]
    from fttui.integrations.stackdump import register as register_stacks  # stdlib only

    # `fttui stacks`: this rank's Python stack on SIGUSR1, from before the stack is imported
    register_stacks(run_dir, su.rank, lambda e: print(f"fttui: no stack dump on SIGUSR1 ({e!r})", flush=True))
    su.world = world = env_int("WORLD_SIZE", default=1)
    su.local_rank = local_rank = env_int("LOCAL_RANK", default=0)
    local_world = env_int("LOCAL_WORLD_SIZE", default=world)
    prefix = f"[rank {su.rank}] " if world > 1 else ""

    def log(msg: str) -> None:
        print(prefix + msg, flush=True)

    su.log = log
    su.profile = profile = profile if profile is not None else read_profile(run_dir)
    method = profile.method
    m, d, lim = profile.model, profile.data, profile.limits
    host_limit = parse_size(lim.host_memory)
    gpu_limit = parse_size(lim.gpu_memory)

    # Fast fail on bad data, before the training stack is imported.
    su.records = None
    if d.source != SYNTHETIC:
        su.records = load_records(d.source, d.format)

    emit = state.get("emit")
    if emit is not None:  # the startup phase (fttui.core.run.fold.phases): imports, tokenizer, model
        emit("phase", phase=LOADING_MODEL)
    kind = profile.sharding_kind()
    sharding = kind.name
    if profile.devices.gpus <= 0:  # no card asked for: what cannot run is refused before torch loads
        _refuse(profile, kind, use_cuda=False)
    with stack_imported():
        import torch

        torch.set_num_threads(_threads(local_world))
        su.use_cuda = use_cuda = torch.cuda.is_available() and profile.devices.gpus > 0
        if profile.devices.gpus > 0:  # a card asked for: refused once it is known whether one is there
            _refuse(profile, kind, use_cuda)
        if use_cuda:
            torch.cuda.set_device(local_rank)

        hide_unused(unused_packages(method, kind.deepspeed, profile.train.optimizer, profile.train.report_to))
        import transformers  # import everything before the host limit
        from transformers import TrainingArguments  # noqa: F401

        from fttui.integrations import hf as _hf  # noqa: F401  (the event callback)

        from . import environment as _environment  # noqa: F401
        from .model import build_model
        from .partition import build_context
        from .tokenizer import load_tokenizer

        if profile.method_kind().adapters:
            import peft  # noqa: F401
        if profile.method_kind().quantised:
            import bitsandbytes  # noqa: F401
        transformers.utils.logging.disable_progress_bar()

    su.tok = load_tokenizer(m)
    # Start the CPU thread pool before the address-space limit (thread stacks count against it).
    (torch.ones(64, 64) @ torch.ones(64, 64)).sum().item()
    limits = {"host_memory": lim.host_memory, "gpu_memory": lim.gpu_memory}
    if use_cuda and kind.deepspeed:
        plain_arch_list(log)
    if kind.deepspeed:
        clear_stale_locks(extensions_root(), log)  # an interrupted op build would hang this run
    if host_limit:
        preload_before_limit(sharding, use_cuda, log)
    host_applied = apply_host_limit(host_limit)
    if host_applied:
        limits.update(host_applied)
        log(
            f"host memory limit: {lim.host_memory} on top of the virtual size after imports "
            f"({host_applied['vm_base_bytes'] / 2**20:.1f} MiB): "
            f"RLIMIT_AS {host_applied['rlimit_as_bytes'] / 2**20:.1f} MiB"
        )
    gpu_applied = apply_gpu_limit(gpu_limit, log)
    if gpu_applied:
        limits.update(gpu_applied)
    su.limits = limits

    t_model = time.perf_counter()
    with build_context(profile, run_dir, world, use_cuda, su.rank) as build:
        su.model, su.info = build_model(profile, use_cuda=use_cuda, local_rank=local_rank, build=build)
    info = su.info
    log(
        f"model built ({build}): {m.name_or_path} ({m.init}), method {method}, dtype {info['dtype']}, "
        f"params total {info['params_total']:,}, trainable {info['params_trainable']:,} "
        f"({time.perf_counter() - t_model:.2f}s)"
    )
    return su
