"""Will the host hold an offloading run? Before launch, under a sharding that offloads states to
the host (``zero2-offload``, ``zero3-offload``, ``fsdp-offload``), the estimate's host peak per
node (the model load's peak included: the breakdown sums to the larger of the load and training
peaks) is compared with the memory this machine has available now (``MemAvailable``, and the
room left under the cgroup's ``memory.max`` where one is set), and the part DeepSpeed pins
(page-locked, ``deepspeed.pin_memory``) with the locked-memory limit (``RLIMIT_MEMLOCK``).

A peak over the available memory is refused (one line, before anything is written); a peak over
:data:`CLOSE` of it is warned, as is pinned memory over a finite ``RLIMIT_MEMLOCK`` (warned, not
refused: CUDA's own pinned allocations are not held to that limit on every system, docs/reliability.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from fttui.core.base.units import fmt_bytes
from fttui.core.memory.breakdown import Estimate
from fttui.core.profiles.typed import Profile

__all__ = ["CLOSE", "PINNED", "HostFit", "host_check", "host_fit", "pinned_bytes"]

CLOSE = 0.85  # of the available memory: a peak above it is warned
#: host breakdown terms DeepSpeed page-locks when ``deepspeed.pin_memory`` (the staging buffers always)
PINNED = ("offload_master_params", "offload_optimizer_states", "offload_gradients", "offload_param_partitions")


@dataclass(frozen=True)
class HostFit:
    fits: bool  # False: refuse the launch
    warning: str | None  # a close fit, or pinned memory over RLIMIT_MEMLOCK
    message: str  # the one line (the refusal's, or what was compared)


def pinned_bytes(est: Estimate, pin_memory: bool) -> int:
    host = est.host_breakdown
    return int(host.get("offload_pinned_buffers", 0) + (sum(host.get(k, 0) for k in PINNED) if pin_memory else 0))


def host_fit(prof: Profile, est: Estimate, available: tuple[int, str] | None, memlock: int | None) -> HostFit | None:
    """The verdict for ``prof`` (its estimate ``est``) against ``available`` (bytes, and what
    they are: ``"MemAvailable"``, ``"cgroup memory.max"``) and ``memlock`` (RLIMIT_MEMLOCK in
    bytes, ``None`` for unlimited); ``None`` for a sharding that offloads nothing, or nothing to
    compare with."""
    kind = prof.sharding_kind()
    if not kind.offload or available is None:
        return None
    avail, what = available
    peak = max(est.host_peak_bytes, est.host_load_peak_bytes)
    head = (
        f"{kind.name}: the estimate's host peak {fmt_bytes(peak)} per node (model load "
        f"{fmt_bytes(est.host_load_peak_bytes)}, training {fmt_bytes(est.host_train_peak_bytes)})"
    )
    if peak > avail:
        return HostFit(
            False,
            None,
            f"{head} is more than the {fmt_bytes(avail)} available here ({what}): "
            "the host would run out of memory; use more nodes, offload less "
            "(deepspeed.offload_params = false) or a machine with more memory",
        )
    warning = None
    if peak > CLOSE * avail:
        warning = f"{head} is {peak / avail:.0%} of the {fmt_bytes(avail)} available here ({what}): a close fit"
    pinned = pinned_bytes(est, bool(prof.deepspeed.pin_memory)) if kind.deepspeed else 0
    if memlock is not None and pinned > memlock:
        lock = (
            f"{fmt_bytes(pinned)} of it pinned (deepspeed.pin_memory) is over the locked-memory limit "
            f"{fmt_bytes(memlock)} (RLIMIT_MEMLOCK, `ulimit -l`): pinning may fail; raise the limit or set "
            "deepspeed.pin_memory = false"
        )
        warning = f"{warning}; {lock}" if warning else f"{head}: {lock}"
    return HostFit(True, warning, warning or f"{head} fits the {fmt_bytes(avail)} available here ({what})")


def host_check(prof: Profile) -> HostFit | None:
    """:func:`host_fit` of ``prof`` on this machine now (its estimate by the formula); ``None``
    when the sharding offloads nothing or the estimate cannot be made (the worker then says why)."""
    if not prof.sharding_kind().offload:
        return None
    from fttui.core.memory.estimate import estimate
    from fttui.monitor.host import host_available, memlock_limit

    try:
        est = estimate(prof)
    except Exception:  # EstimateError, a field the formula trips on: no verdict, never a crash
        return None
    return host_fit(prof, est, host_available(), memlock_limit())
