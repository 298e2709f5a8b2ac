"""Checks before launch that need no torch: they fail in a second, before anything is written."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fttui.core.base import shardings
from fttui.core.base.constants import METHODS
from fttui.core.base.errors import DataError, FttuiError, ProfileError
from fttui.core.models.hfconfig import cached_snapshot, download_command, hub_cache_dir, is_hub_id
from fttui.core.models.positions import check_positions
from fttui.core.models.prequant import checkpoint_quant, cpu_refusal, refusal
from fttui.core.profiles.schema import OVERRIDE, SYNTHETIC
from fttui.core.profiles.typed import Profile
from fttui.core.run.launching.extras import missing_extra

# Methods this build runs end to end. The others are named in profiles but refused before launch.
RUNNABLE_METHODS = set(METHODS)


def visible_gpu_count() -> tuple[int, str | None]:
    """(number of GPUs this process may use, reason when 0)."""
    from fttui.monitor import make_gpu_sampler, visible_indices

    sampler = make_gpu_sampler()
    try:
        snap = sampler.sample()
    finally:
        sampler.close()  # samplers never raise
    if not snap.available:
        return 0, snap.reason
    n = len(snap.gpus)
    vis = visible_indices(None, snap.gpus)
    if vis is not None:
        n = len([i for i in vis if i < n])
    return n, None


def preflight(profile: Profile, gpu_count: tuple[int, str | None] | None = None) -> None:
    """Every check below names the profile's file; a key that ``--set`` gave is named as such."""
    prof = profile
    src = prof.source or prof.name or "profile"
    try:
        _preflight(prof, src, gpu_count)
    except ProfileError as e:
        origin = prof.origin_of(e.key) if e.key and e.file == src else src
        if origin == src:
            raise
        raise ProfileError(origin, e.key, e.message, e.hint) from None


def _preflight(prof: Profile, src: str, gpu_count: tuple[int, str | None] | None) -> None:
    if prof.method not in RUNNABLE_METHODS:
        raise ProfileError(
            src,
            "method",
            f"method {prof.method!r} is not supported yet",
            f"use one of {', '.join(sorted(RUNNABLE_METHODS))}",
        )
    _check_model(prof, src)
    check_positions(prof, src)  # a learned position table cannot run past its length
    stored = refusal(prof.method, prof.model, prof.sharding_asked())  # a checkpoint stored quantised
    if stored is not None:
        raise ProfileError(src, "model.name_or_path", *stored)
    _check_batch(prof, src, _check_data(prof))
    gpus = prof.devices.gpus
    n, reason = gpu_count if gpu_count is not None else visible_gpu_count()
    precision = prof.train.precision
    if n == 0:
        if gpus >= 1:
            raise ProfileError(
                src,
                "devices.gpus",
                f"{gpus} GPU(s) asked for but none is visible ({reason})",
                "set devices.gpus = 0 to train on the CPU (devices.cpu_processes = N for N ranks)",
            )
        if precision == "fp16":
            raise ProfileError(
                src,
                "train.precision",
                "fp16 needs a CUDA GPU and none is visible",
                'use precision = "bf16" or "fp32" on CPU',
            )
    elif gpus > n:
        raise ProfileError(
            src,
            "devices.gpus",
            f"{gpus} GPUs asked for but only {n} visible",
            f"set devices.gpus to at most {n} (or check CUDA_VISIBLE_DEVICES)",
        )
    elif gpus > 0 and not os.environ.get("FTTUI_FAKE_GPUS"):
        _check_bf16(src, precision)
    _check_stack(prof, src, gpus, n)


def _check_stack(prof: Profile, src: str, gpus: int, n_visible: int) -> None:
    """Parts of the training stack a setting needs, checked before anything loads."""
    import importlib.util

    method, sharding = prof.method, prof.sharding_asked()
    attn = prof.model.attn_implementation
    if attn == "flash_attention_2":
        if gpus == 0 or n_visible == 0:
            raise ProfileError(
                src,
                "model.attn_implementation",
                "flash_attention_2 needs a CUDA GPU",
                'use attn_implementation = "sdpa"',
            )
        if importlib.util.find_spec("flash_attn") is None:
            raise ProfileError(
                src,
                "model.attn_implementation",
                "flash_attention_2 needs the flash-attn package",
                'pip install flash-attn, or use attn_implementation = "sdpa"',
            )
    stored = checkpoint_quant(prof.model)  # GPTQ / AWQ: trained through GPT-QModel's kernels
    # the optional parts of fttui (pyproject extras) it needs
    found = missing_extra(method, sharding, prequant=stored.method if stored else None)
    kind = shardings.find(sharding)
    if found:
        extra, missing = found
        by_kind = kind is not None and extra == kind.extra
        key = "sharding" if by_kind else "model.name_or_path" if extra == "gptq" else "method"
        what = (
            f"sharding {sharding}"
            if by_kind
            else f"{'an' if stored.method == 'awq' else 'a'} {stored.method.upper()} checkpoint"
            if extra == "gptq" and stored is not None  # the gptq extra is asked for a stored quantization only
            else f"method {method}"
        )
        raise ProfileError(
            src,
            key,
            f"{what} needs fttui[{extra}] ({', '.join(missing)} not installed)",
            f"pip install 'fttui[{extra}]'",
        )
    if kind is not None and kind.needs_cuda and (gpus == 0 or n_visible == 0):
        raise ProfileError(
            src,
            "sharding",
            f"sharding {kind} needs CUDA GPUs (it offloads from the GPU to the host)",
            f'use sharding = "{kind.without_offload()}" on CPU ranks',
        )
    on_cpu = stored is not None and (gpus == 0 or n_visible == 0)
    why = cpu_refusal(stored) if on_cpu and stored is not None else None
    if why:
        raise ProfileError(
            src,
            "model.name_or_path",
            f"{prof.model.name_or_path}: {why}",
            "train it on a GPU (devices.gpus = 1), or use a GPTQ-format or AWQ GEMM checkpoint",
        )


def _check_bf16(src: str, precision: str) -> None:
    """bf16 needs compute capability 8.0 (Ampere) or newer on every visible card."""
    if precision != "bf16":
        return
    try:
        import pynvml
    except ImportError:  # nvidia-ml-py missing: nothing to check
        return
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no driver: nothing to check
        return
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            if major < 8:
                name = pynvml.nvmlDeviceGetName(h)
                raise ProfileError(
                    src,
                    "train.precision",
                    f"bf16 needs compute capability 8.0 or newer; GPU {i} ({name}) has {major}.{minor}",
                    'use precision = "fp16"',
                )
    except pynvml.NVMLError:
        return
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _check_data(prof: Profile) -> int | None:
    """Read the data file (a synthetic source has none); its number of records."""
    data = prof.data
    if data.source == SYNTHETIC:
        return None
    from fttui.core.data.records import load_records

    try:
        return len(load_records(data.source, data.format))
    except DataError as e:
        raise DataError(None, str(e), "fix the data file or point data.source at another one") from None


def _check_batch(prof: Profile, src: str, records: int | None) -> None:
    """One step of every process must fit in the data: micro batch x world size <= samples.
    A larger batch would run one short step and record a batch it never ran."""
    micro, asked = prof.train.batch_size, prof.data.num_samples
    samples = asked if records is None else (min(asked, records) if asked > 0 else records)
    ws = prof.world_size()
    if samples <= 0 or micro * ws <= samples:
        return
    if records is None:
        more = "more data.num_samples"
    elif 0 < asked < records:
        more = f"more data.num_samples, up to the file's {records}"
    else:
        more = "a larger data file"
    fit = samples // ws
    hint = f"use batch_size at most {fit}, or {more}" if fit >= 1 else f"use at most {samples} processes, or {more}"
    per_step = f"{micro} x {ws} processes = {micro * ws}" if ws > 1 else str(micro)
    file = OVERRIDE if any(str(o).startswith("train.batch_size=") for o in prof.overrides) else src
    raise ProfileError(
        file, "train.batch_size", f"{per_step} samples per step but the data has {samples} samples", hint
    )


def _check_model(prof: Profile, src: str) -> None:
    """A pretrained model must be on this machine before launch: a local folder with its
    config.json, or a hub id in the local Hugging Face cache (the worker runs with
    HF_HUB_OFFLINE=1 and never downloads); remote code needs model.trust_remote_code."""
    model = prof.model
    if model.init != "pretrained":
        return
    name = str(model.name_or_path or "")
    path = Path(name)
    if path.is_dir():
        cfg = path / "config.json"
        if not cfg.is_file():
            raise ProfileError(
                src,
                "model.name_or_path",
                f"{path} has no config.json",
                "point it at a folder saved with save_pretrained, or use a hub id",
            )
        where = str(path)
    else:
        snap = cached_snapshot(name) if is_hub_id(name) else None
        if snap is None:
            raise ProfileError(
                src,
                "model.name_or_path",
                f"{name} is not in the local Hugging Face cache ({hub_cache_dir()}) and runs never download",
                f"download it first: {download_command(name)}",
            )
        cfg, where = snap / "config.json", name
    tok = model.tokenizer
    if tok and tok not in ("byte", name) and not Path(str(tok)).exists() and cached_snapshot(str(tok)) is None:
        raise ProfileError(
            src,
            "model.tokenizer",
            f"{tok} is not in the local Hugging Face cache ({hub_cache_dir()})",
            f"download it first: {download_command(str(tok))}",
        )
    try:
        conf = json.loads(cfg.read_text())
    except ValueError as e:
        raise ProfileError(src, "model.name_or_path", f"{cfg} is not valid JSON ({e})", None) from None
    except RecursionError:
        raise ProfileError(src, "model.name_or_path", f"{cfg} is not valid JSON (nested too deeply)", None) from None
    if not isinstance(conf, dict):
        raise ProfileError(src, "model.name_or_path", f"{cfg} is not a JSON object", None)
    if conf.get("auto_map") and not model.trust_remote_code:
        raise ProfileError(
            src,
            "model.trust_remote_code",
            f"{where} needs remote code (its config has auto_map)",
            "set model.trust_remote_code = true if you trust that code",
        )


__all__ = ["preflight", "visible_gpu_count", "FttuiError"]
