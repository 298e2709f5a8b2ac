"""The planner (``fttui plan``): every setup fttui can run a profile with on given cards, whether
it fits them, and how long it takes, fastest first.

A setup is the profile with ``method`` x ``sharding`` (a kind of :mod:`fttui.core.base.shardings`
that runs the method; offloading is a kind of its own) x micro batch x gradient accumulation
(their product times the ranks keeps the effective batch) x gradient checkpointing on/off.
Each one is estimated (:func:`fttui.core.memory.estimate`: the peak per card and on the host)
and forecast (:func:`fttui.core.experiments.forecast.forecast`: step and run time, cost), then
checked against the :class:`Budget` with its margin. The fitting setups come first, sorted by
predicted time; the others follow, each with the term that breaks it (``breaks``).

Pure: the store's rows, the data's lengths and the budget are handed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from fttui.core.base import shardings
from fttui.core.base.errors import FttuiError
from fttui.core.base.units import GIB, fmt_bytes
from fttui.core.data.lengths import DataStats
from fttui.core.experiments.forecast import NO_CARD, RANKS_CPU, duration_words, forecast, offload_bytes, profile_shape
from fttui.core.memory import COMPONENTS, CONSTANTS, HOST_COMPONENTS, Estimate, estimate
from fttui.core.profiles.typed import Profile

__all__ = [
    "Budget",
    "Option",
    "DEFAULT_MARGIN",
    "HEADERS",
    "candidates",
    "plan",
    "plan_table",
    "variant",
]

#: the share of each budget a setup leaves free to count as fitting (fragmentation, other processes)
DEFAULT_MARGIN = 0.05


class PlanError(FttuiError):
    """Bad planner input (one line, exit 2)."""


@dataclass(frozen=True)
class Budget:
    """What the setups must fit. ``gpus``: cards per node (0: CPU ranks, ``cpu_processes``);
    ``card``: their NVML name (``"cpu"`` on CPU: the forecast's calibration and prices);
    ``gpu_bytes``: one card's memory; ``host_bytes``: the host budget, per process above the
    imported training stack when ``host_per_process`` (``--host-memory-limit``, what ``run``
    enforces with RLIMIT_AS), else the node's; ``margin``: the share of each budget kept free;
    ``gpu_cap``: ``gpu_bytes`` caps PyTorch's allocator on each card (``limits.gpu_memory``, what
    ``run --gpu-memory-limit`` enforces), so the CUDA context, outside that allocator, is not
    counted against it."""

    gpus: int
    card: str
    gpu_bytes: int | None = None
    host_bytes: int | None = None
    host_per_process: bool = False
    margin: float = DEFAULT_MARGIN
    cpu_processes: int = 1
    gpu_cap: bool = False

    @property
    def ranks_per_node(self) -> int:
        return self.gpus if self.gpus > 0 else max(1, self.cpu_processes)


@dataclass(frozen=True)
class Option:
    """One setup of the plan: its settings, predicted peaks, time, cost and verdict."""

    method: str
    sharding: str
    batch_size: int
    grad_accum: int
    gradient_checkpointing: bool
    effective_batch: int
    fits: bool
    breaks: str | None
    gpu_peak_bytes: int | None  # the largest card's peak (None on CPU)
    host_peak_bytes: int  # the node's
    step_seconds: float | None  # None: no time forecast (a card of no known rate: mfu_source says why)
    run_seconds: float | None
    steps: int
    cost: float | None
    cost_unit: str
    mfu_source: str
    calibrated: bool

    def settings(self) -> dict[str, Any]:
        """The dotted profile keys that make the profile this setup (``--set`` / ``--write``)."""
        return {
            "method": self.method,
            "sharding": self.sharding,
            "train.batch_size": self.batch_size,
            "train.grad_accum": self.grad_accum,
            "train.gradient_checkpointing": self.gradient_checkpointing,
        }

    def label(self) -> str:
        kind = shardings.find(self.sharding)
        shard = (kind.label or kind.name) if kind is not None and kind.sharded else "no sharding"
        return (
            f"{self.method}, {shard}, micro batch {self.batch_size} x accum {self.grad_accum}, "
            f"checkpointing {'on' if self.gradient_checkpointing else 'off'}"
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["gpu_peak_gib"] = None if self.gpu_peak_bytes is None else round(self.gpu_peak_bytes / GIB, 3)
        d["host_peak_gib"] = round(self.host_peak_bytes / GIB, 3)
        return d


def variant(
    profile: Profile,
    method: str,
    sharding: str,
    micro: int,
    accum: int,
    gc: bool,
    gpus: int | None = None,
) -> Profile:
    """A copy of the resolved profile run as one setup (``gpus``: cards per node, None: as it says)."""
    changes: dict[str, Any] = {
        "method": method,
        "sharding": sharding,
        "train.batch_size": int(micro),
        "train.grad_accum": int(accum),
        "train.gradient_checkpointing": bool(gc),
    }
    if gpus is not None:
        changes["devices.gpus"] = int(gpus)
    return profile.with_settings(changes)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidates(
    methods: Sequence[str], world: int, on_gpu: bool, effective: int
) -> Iterator[tuple[str, str, int, int, bool]]:
    """Every (method, sharding, micro batch, accumulation, checkpointing) to try: the kinds that
    run the method (GPU-only kinds only on cards; over one process the kinds that shard without
    offloading are left out: they shard nothing and cost the same memory as none), every micro
    batch dividing the effective batch per rank, checkpointing off and on. On CPU ranks the
    offloading kinds are left out too: the states are on the host already."""
    if effective < 1 or effective % world:
        raise PlanError(
            f"--effective-batch {effective}: not divisible by the {world} rank(s) (use a multiple of {world})"
        )
    per_rank = effective // world
    for method in methods:
        for kind in shardings.KINDS.values():
            if method not in kind.methods or (kind.needs_cuda and not on_gpu):
                continue
            if kind.sharded and world == 1 and not kind.offload:
                continue
            if kind.offload and not on_gpu:
                continue  # CPU ranks keep every state on the host already: nothing to offload
            for micro in _divisors(per_rank):
                for gc in (False, True):
                    yield method, kind.name, micro, per_rank // micro, gc


def _largest(bd: Mapping[str, int], labels: Mapping[str, str]) -> str:
    key = max(bd, key=lambda k: bd.get(k) or 0)
    return f"{labels.get(key, key)} {fmt_bytes(bd[key])}"


def _verdict(e: Estimate, budget: Budget) -> str | None:
    """The term that breaks the budget, in words; None when the setup fits with the margin."""
    keep = 1.0 - budget.margin
    if budget.gpu_bytes and e.gpu_peak_bytes:
        room = budget.gpu_bytes * keep
        outside = int(e.breakdown.get("cuda_context") or 0) if budget.gpu_cap else 0
        peak, load = max(e.gpu_peak_bytes) - outside, e.gpu_load_peak_bytes - outside
        what = " in PyTorch's allocator (the cap)" if budget.gpu_cap else ""
        if load > budget.gpu_bytes:
            return (
                f"GPU while loading: the whole model {fmt_bytes(load)}{what} on one card "
                f"> {fmt_bytes(budget.gpu_bytes)}"
            )
        if peak > room:
            bd = {k: v for k, v in e.breakdown.items() if not (budget.gpu_cap and k == "cuda_context")}
            return (
                f"GPU: {fmt_bytes(peak)} per card{what} > {fmt_bytes(room)} (largest term: {_largest(bd, COMPONENTS)})"
            )
    if budget.host_bytes:
        room = budget.host_bytes * keep
        if budget.host_per_process:
            procs = budget.ranks_per_node
            base = CONSTANTS["host_process_bytes"]
            added = e.host_peak_bytes / procs - base
            if added > room:
                bd = {k: v for k, v in e.host_breakdown.items() if k != "process"}
                return (
                    f"host: {fmt_bytes(added)} per process above the imported stack > "
                    f"{fmt_bytes(room)} (largest term: {_largest(bd, HOST_COMPONENTS)})"
                )
        elif e.host_peak_bytes > room:
            return (
                f"host: {fmt_bytes(e.host_peak_bytes)} > {fmt_bytes(room)} (largest term: "
                f"{_largest(e.host_breakdown, HOST_COMPONENTS)})"
            )
    return None


def _check_weights(profile: Profile, budget: Budget, methods: Sequence[str]) -> None:
    """A card smaller than the model's weights spread over every card fits no setup: bad input."""
    if not budget.gpus or not budget.gpu_bytes:
        return
    least = None
    for method in methods:
        e = estimate(variant(profile, method, shardings.NONE.name, 1, 1, True, budget.gpus))
        w = e.breakdown.get("weights") or 0
        least = w if least is None else min(least, w)
    world = budget.ranks_per_node * max(1, int(profile.devices.nodes or 1))
    if least and budget.gpu_bytes * world < least:
        flag = "--gpu-memory-limit (limits.gpu_memory)" if budget.gpu_cap else "--gpu-memory"
        raise PlanError(
            f"{flag} {fmt_bytes(budget.gpu_bytes)}: below the model's weights "
            f"({fmt_bytes(least)}) even spread over {world} card(s)"
        )


def plan(
    profile: Profile,
    budget: Budget,
    rows: Iterable[Mapping[str, Any]],
    *,
    effective_batch: int | None = None,
    methods: Sequence[str] | None = None,
    stats_for: Callable[[Profile, int], DataStats],
    price_per_card_hour: float | None = None,
    price_unit: str = "",
    left_out: Sequence[str] = (),
    link: Any = None,
) -> list[Option]:
    """Every setup of ``profile`` on ``budget``'s cards, fitting ones first by predicted time.
    ``stats_for(profile, micro_batch)``: the data's lengths at a micro batch
    (:func:`fttui.core.experiments.datalens.data_stats`). ``left_out``: sharding kinds not to plan (their
    packages are not installed: :func:`fttui.core.run.launching.extras.uninstalled_shardings`).
    ``link``: the measured link (:class:`~fttui.core.experiments.link.LinkFigure`) each setup's
    communication is timed over (:mod:`fttui.core.experiments.comm`); None: not counted."""
    base = profile
    nodes = max(1, int(base.devices.nodes or 1))
    on_gpu = budget.gpus > 0
    if not on_gpu:
        base = base.with_settings({"devices.gpus": 0, "devices.cpu_processes": budget.ranks_per_node})
    world = budget.ranks_per_node * nodes
    t = base.train
    if effective_batch is None:
        effective_batch = int(t.batch_size or 1) * int(t.grad_accum or 1) * world
    methods = list(methods or [shardings.of(base.method, base.sharding)[0] or base.method])
    rows = list(rows)
    _check_weights(base, budget, methods)
    card = budget.card if on_gpu else RANKS_CPU
    stats: dict[int, DataStats] = {}
    out: list[Option] = []
    for method, sharding, micro, accum, gc in candidates(methods, world, on_gpu, effective_batch):
        if sharding in left_out:
            continue
        p = variant(base, method, sharding, micro, accum, gc, budget.gpus if on_gpu else None)
        e = estimate(p, None, budget.gpu_bytes if on_gpu else None)
        if micro not in stats:
            stats[micro] = stats_for(p, micro)
        s = stats[micro]
        fc = forecast(
            p,
            profile_shape(p, e.inputs),
            samples=s.samples,
            fed_tokens_per_sample=s.random_order["fed_tokens"] / max(1, s.samples),
            real_tokens_per_sample=s.random_order["real_tokens"] / max(1, s.samples),
            rows=rows,
            card=card,
            cards=budget.ranks_per_node,
            price_per_card_hour=price_per_card_hour,
            price_unit=price_unit,
            link_bytes=offload_bytes(e),
            attn_len=s.random_order.get("fed_tokens_x_len", 0) / max(1, s.random_order["fed_tokens"]) or None,
            link=link,
        )
        breaks = _verdict(e, budget)
        out.append(
            Option(
                method=method,
                sharding=sharding,
                batch_size=micro,
                grad_accum=accum,
                gradient_checkpointing=gc,
                effective_batch=micro * accum * world,
                fits=breaks is None,
                breaks=breaks,
                gpu_peak_bytes=max(e.gpu_peak_bytes) if e.gpu_peak_bytes else None,
                host_peak_bytes=e.host_peak_bytes,
                step_seconds=fc.step_seconds,
                run_seconds=fc.run_seconds,
                steps=fc.steps,
                cost=fc.cost,
                cost_unit=fc.cost_unit,
                mfu_source=fc.mfu_source,
                calibrated=fc.calibrated,
            )
        )

    def order(o: Option) -> tuple:
        kind = shardings.get(o.sharding)
        # equal forecasts (no row tells a sharding's speed apart): the simpler setup first
        took = o.run_seconds if o.run_seconds is not None else math.inf
        return (not o.fits, took, kind.offload, kind.sharded, o.gradient_checkpointing, o.grad_accum)

    return sorted(out, key=order)


def plan_summary(options: Sequence[Option], budget: Budget) -> str:
    """The line above the plan's table (after the profile's name), the CLI's and the app's:
    ``8 setups on CPU (1 process); 8 fit, keeping 5% of each memory budget free; fastest first``."""
    if not budget.gpus:
        n = budget.ranks_per_node
        where = f"CPU ({n} process{'es' if n > 1 else ''})"
    elif budget.card == NO_CARD:
        where = f"{budget.gpus} GPU{'s' if budget.gpus > 1 else ''} of no named card"
    else:
        where = f"{budget.gpus} x {budget.card}"
    fits = sum(o.fits for o in options)
    timed = any(o.run_seconds is not None for o in options)
    order = "fastest first" if timed or not options else "fitting setups first, simplest first (no time to order by)"
    return (
        f"{len(options)} setups on {where}; {fits} fit, keeping {budget.margin:.0%} of each memory budget free; {order}"
    )


#: the plan's table: the CLI prints it, the app's plan screen shows it
HEADERS = ("#", "method", "sharding", "micro", "accum", "ckpt", "GPU peak/card", "host peak", "time", "cost", "fits")


def plan_table(options: Sequence[Option]) -> list[list[str]]:
    """The rows of :data:`HEADERS`, one per setup, in the plan's order."""
    out = []
    for i, o in enumerate(options, 1):
        out.append(
            [
                str(i),
                o.method,
                o.sharding,
                str(o.batch_size),
                str(o.grad_accum),
                "on" if o.gradient_checkpointing else "off",
                fmt_bytes(o.gpu_peak_bytes) if o.gpu_peak_bytes is not None else "-",
                fmt_bytes(o.host_peak_bytes),
                duration_words(o.run_seconds) if o.run_seconds is not None else "-",
                f"{o.cost:,.2f}" if o.cost is not None else "-",
                "yes" if o.fits else f"no: {o.breaks}",
            ]
        )
    return out
