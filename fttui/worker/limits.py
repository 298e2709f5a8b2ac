"""The worker's memory limits (``limits`` section of the profile) and the size strings they are
written in.

  host_memory: after the training stack is imported (and the CPU thread pool started), RLIMIT_AS
    is set to the process's current virtual size (:func:`limit_base`: not rounded) + the limit:
    the limit is the address space the run may add on top of the imported stack. Exceeding it
    surfaces as an allocation failure
    (error event kind "oom", oom_kind "cpu", exit 3).
  gpu_memory: ``torch.cuda.set_per_process_memory_fraction(limit / total)`` on every visible
    device; a no-op (with a note) without CUDA.
Sizes follow the core's one grammar (:func:`fttui.core.base.units.parse_size`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from fttui.core.base.errors import SizeError
from fttui.core.base.units import parse_size as _parse_size

from .errors import ConfigError

__all__ = [
    "extensions_root",
    "parse_size",
    "apply_host_limit",
    "glibc",
    "limit_base",
    "trim_heap",
    "BASE_GRANULARITY",
    "apply_gpu_limit",
    "preload_before_limit",
    "fixed_address_layout",
    "vm_size",
    "plain_arch_list",
]

FIXED_LAYOUT_ENV = "FTTUI_FIXED_LAYOUT"  # set by fttui.core.run.launching.launch.child_env under a host limit
_ADDR_NO_RANDOMIZE = 0x0040000


def fixed_address_layout() -> bool:
    """Re-execute this process once with address-space layout randomisation off (Linux
    ``personality(ADDR_NO_RANDOMIZE)``, what ``setarch -R`` does) when the launcher asked for it.

    Under RLIMIT_AS the verdict at a boundary value is decided by a MiB or less. With random
    placement, the holes between mappings (and the alignment of large ones) differ from one process
    to the next, and so does the address space mapped by the same imports: measured on tiny-lora,
    the virtual size after imports was 834.5 or 835.5 MiB in fresh processes (2 of 6 high), which
    moved the limit by a MiB; with a fixed layout 834.44..834.54 in 6 of 6 (docs/bench-probe.md).
    Call before anything heavy is imported. Where the call is refused (a seccomp filter), nothing
    changes. Returns only when no re-exec happened."""
    if os.environ.get(FIXED_LAYOUT_ENV) != "1" or not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        current = libc.personality(0xFFFFFFFF)
        if current < 0 or current & _ADDR_NO_RANDOMIZE:
            return False
        if libc.personality(current | _ADDR_NO_RANDOMIZE) < 0:
            return False
    except (OSError, AttributeError):
        return False
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
    return True  # not reached


def parse_size(value: Any) -> int | None:
    """Bytes in a limit: ``"2GiB"`` -> 2147483648 (the core's grammar: B; KB/MB/GB/TB powers of 10;
    KiB/MiB/GiB/TiB powers of 2). Empty / None -> None (no limit). Anything invalid, or a size
    <= 0, raises :class:`ConfigError` with a one-line message."""
    if value is None or value == "":
        return None
    try:
        n = _parse_size(value)
    except SizeError as exc:
        raise ConfigError(str(exc)) from None
    if n <= 0:
        raise ConfigError(f"invalid size {value!r}: must be > 0")
    return n


def vm_size() -> int:
    """The process's mapped address space now (VmSize), bytes."""
    try:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    with open("/proc/self/statm", encoding="utf-8") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


#: The address space after the imports is rounded up to this before the limit is added.
#: a page: the address space is whole pages, so the limit is the base itself (no rounding; why: below)
BASE_GRANULARITY = 4096


def limit_base(vm: int, granularity: int = BASE_GRANULARITY) -> int:
    """The base RLIMIT_AS is set on: the address space after the imports, ``vm``, rounded up to a
    multiple of ``granularity`` (by default a page: not rounded).

    The same imports do not map the same address space in every process, even with a fixed layout
    (:func:`fixed_address_layout`) and after :func:`trim_heap`: measured on tiny-lora's probe
    worker, the base was the same in most fresh processes of one environment, 0.09-0.1 MiB off in
    a few (3 of 22 in one run, 1 of 20 in another), it moved by up to 0.19 MiB with the length of
    an environment variable, and by a whole MiB (a Python arena) with some command lines. The peak
    of a trial does not move with it, so an unrounded limit decided a value one token from the
    boundary (0.11 MiB per token) differently from one process to the next (docs/bench-probe.md).
    Rounded up, bases that differ by ``d`` get different limits only when a multiple of the
    granularity falls between them: for the small jitter (``d`` 0.1 to 0.19 MiB) one stack in
    five to ten with 1 MiB, and then by 1 MiB, what the MiB jumps give unrounded anyway. A coarser
    granularity splits fewer stacks but by more, and gives processes that import different
    amounts different room: with 8 MiB a run's worker (base 728.29 MiB) got 7 MiB more room than a
    probe's (727.2), and a MiB jump across a multiple of 8 gave one process of six 8 MiB less
    room. 1 MiB kept both below a MiB and made the probe's verdicts repeat 10 of 10 (288/289
    tokens, 95/96 samples, docs/bench-probe.md), but it broke what the probe is for: a run at the
    probe's answer must fit and one above it must not, and a run's worker and a probe's differ in
    their base (another command line, other modules), so rounding gave them rooms up to a MiB
    apart in either direction (a clean-clone CI run: runs at the largest fit of ``probe --data`` and
    of the probe screen ran out of memory in their first step). So the default granularity is a
    page, no rounding: each process gets exactly the budget above its own base, a probe's trial a
    MiB less than a run (it imports the training modules after the limit), which keeps the run at
    its answer inside the budget. The verdict at a value within about 0.1 MiB of the limit then
    still differed between fresh processes (9 of 10 at one token from the boundary): the
    allocator's, not the base's (pymalloc's arenas and glibc's heap top pad, which the launcher
    now sets aside under a host limit: 10 of 10 at 0.04 MiB, docs/bench-probe.md)."""
    return -(-vm // granularity) * granularity


def glibc():
    """The process's C library when it is glibc (it has ``gnu_get_libc_version``), else None: the
    one place the worker's allocator settings (:func:`trim_heap`,
    :func:`fttui.worker.partition.return_freed_blocks`) find it."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  (musl and others have no such symbol)
        return libc
    except (OSError, AttributeError):
        return None


def trim_heap() -> bool:
    """Give the malloc heap's free top back to the system (glibc's ``malloc_trim(0)``) before
    the base is read: up to a trim threshold (128 KiB under the probe's malloc settings) plus
    a top pad of free heap stays mapped after the imports, more or less by the history of the
    last allocations. False where there is no glibc (musl, macOS): nothing changes there."""
    libc = glibc()
    if libc is None:
        return False
    import ctypes

    trim = libc.malloc_trim
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    trim(0)
    return True


def apply_host_limit(limit: int | None) -> dict[str, Any] | None:
    """Set RLIMIT_AS to :func:`limit_base` of the address space now + ``limit``. Returns what was
    set: ``rlimit_as_bytes`` (the soft limit), ``vm_base_bytes`` (the address space measured, not
    rounded), ``host_memory_bytes`` (the limit asked for)."""
    if not limit:
        return None
    import gc
    import resource

    # Garbage of the imports still mapped now (a Python arena, a large freed block) would move the
    # limit by a MiB from one process to the next: collect it before the base is read.
    gc.collect()
    trim_heap()
    base = vm_size()
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = limit_base(base) + limit
    if hard != resource.RLIM_INFINITY and soft > hard:
        soft = hard
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    return {"host_memory_bytes": limit, "rlimit_as_bytes": soft, "vm_base_bytes": base}


def apply_gpu_limit(limit: int | None, log) -> dict[str, Any] | None:
    if not limit:
        return None
    import torch

    if not torch.cuda.is_available():
        log("note: limits.gpu_memory ignored (no CUDA device)")
        return {"gpu_memory_bytes": limit, "applied": False}
    fractions = []
    for i in range(torch.cuda.device_count()):
        total = torch.cuda.get_device_properties(i).total_memory
        frac = max(0.0, min(1.0, limit / total))
        torch.cuda.set_per_process_memory_fraction(frac, i)
        fractions.append(round(frac, 4))
    return {"gpu_memory_bytes": limit, "applied": True, "fractions": fractions}


def extensions_root():
    """The folder torch's extension builder (DeepSpeed's JIT ops) builds in:
    ``$TORCH_EXTENSIONS_DIR``, else torch's default root (its ``<py>_<accelerator>`` folders
    below it)."""
    import os
    from pathlib import Path

    from torch.utils.cpp_extension import get_default_build_root

    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())


def preload_before_limit(sharding: str, use_cuda: bool, log) -> list[str]:
    """Load, before the address-space limit, what the training would otherwise load under it:
    for a DeepSpeed sharding ``deepspeed`` itself and the ops it JIT-builds
    (CPU Adam under ``-offload``; the shared-memory collectives on CPU ranks): a compiler started
    under the limit dies with "virtual memory exhausted". Returns the ops loaded."""
    import importlib.util

    from fttui.core.base import shardings

    kind = shardings.find(sharding)
    if kind is None or not kind.deepspeed or importlib.util.find_spec("deepspeed") is None:
        return []  # other runs do not import deepspeed at all (startup.unused_packages)
    import deepspeed  # noqa: F401
    from deepspeed.accelerator import get_accelerator

    names = (["CPUAdamBuilder"] if kind.offload else []) + ([] if use_cuda else ["ShareMemCommBuilder"])
    loaded = []
    for name in names:
        builder = get_accelerator().create_op_builder(name)
        if builder is not None and builder.is_compatible():
            builder.load()  # the cached build, or a JIT build now, outside the limit
            loaded.append(builder.NAME)
    if loaded:
        log(f"DeepSpeed ops loaded before the host memory limit: {', '.join(loaded)}")
    return loaded


def plain_arch_list(log) -> str | None:
    """DeepSpeed's JIT op builder (0.19) reads each ``TORCH_CUDA_ARCH_LIST`` entry as numbers:
    an architecture-specific target that torch accepts (``9.0a``) stops its build with
    ``invalid literal for int() with base 10: '0a'`` (seen on an H100 image, DeepSpeed's fused
    Adam). Rewrites this process's list without the suffixes (``9.0``); returns the new list, or
    None when nothing changed."""
    import os
    import re

    parts = [p for p in os.environ.get("TORCH_CUDA_ARCH_LIST", "").replace(" ", ";").split(";") if p]
    fixed: list[str] = []
    for p in parts:
        q = re.sub(r"^(\d+\.\d+)[a-z]+", r"\1", p)
        if q not in fixed:
            fixed.append(q)
    if fixed == parts:
        return None
    os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join(fixed)
    log(f"TORCH_CUDA_ARCH_LIST {';'.join(parts)} -> {';'.join(fixed)} for DeepSpeed's op builds")
    return os.environ["TORCH_CUDA_ARCH_LIST"]
