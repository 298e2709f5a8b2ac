"""What the planner reads of this machine and the store (the CLI and the app share it): the
cards (NVML, or the recorded ones of ``FTTUI_FAKE_GPUS``), the host's memory, the store's rows,
the data's cached lengths and the price file; :func:`run_plan` hands them to
:func:`fttui.core.experiments.plan.plan`. :func:`write_profile` saves a chosen setup as a profile,
:func:`verify` runs the fastest setups for real.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from fttui.core.base.errors import SizeError
from fttui.core.base.units import MIB, parse_size
from fttui.core.experiments.forecast import NO_CARD
from fttui.core.experiments.plan import DEFAULT_MARGIN, Budget, Option, PlanError, plan
from fttui.core.profiles.typed import Profile

__all__ = [
    "machine_budget",
    "run_plan",
    "trial_group",
    "trial_run",
    "verify",
    "write_path",
    "write_profile",
    "PlanError",
]


def _size(text: str, what: str) -> int:
    try:
        return parse_size(text)
    except SizeError as e:
        raise PlanError(f"{what}: {e}") from None


def _cards() -> list[Any]:
    from fttui.monitor import make_gpu_sampler, run_cards

    with make_gpu_sampler() as sampler:
        return list(run_cards(sampler.sample()))


def _host_total() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:  # no figure: the host is not checked
        return None


def machine_budget(
    profile: Profile,
    *,
    gpus: int | None = None,
    gpu_memory: str | None = None,
    host_memory_limit: str | None = None,
    card: str | None = None,
    margin: float = DEFAULT_MARGIN,
    cards: Sequence[Any] | None = None,
) -> Budget:
    """The budget to plan for: ``gpus`` cards per node (default: the profile's ``devices.gpus``;
    0 plans CPU ranks), each of ``gpu_memory`` (default: this machine's first card, else the
    profile's ``limits.gpu_memory``: then a cap on PyTorch's allocator, ``Budget.gpu_cap``), named
    ``card`` (default: this machine's first card); the host:
    ``host_memory_limit`` per process above the imported stack (default: the profile's
    ``limits.host_memory``), else the node's RAM. ``cards``: the cards seen here (the app's
    sampler's ``run_cards``), else read now."""
    dev, limits = profile.devices, profile.limits
    n = int(dev.gpus or 0) if gpus is None else int(gpus)
    if n < 0:
        raise PlanError(f"--gpus {n}: give 0 (CPU) or more cards")
    if not 0 <= margin < 1:
        raise PlanError(f"--margin {margin}: give a share between 0 and 1, e.g. 0.05")
    host_limit = host_memory_limit or limits.host_memory or ""
    host = _size(host_limit, "--host-memory-limit") if host_limit else _host_total()
    if n == 0:
        return Budget(
            gpus=0,
            card="cpu",
            host_bytes=host,
            host_per_process=bool(host_limit),
            margin=margin,
            cpu_processes=max(1, int(dev.cpu_processes or 1)),
        )
    here = list(cards) if cards is not None else _cards()
    size = gpu_memory or limits.gpu_memory or ""
    # a limit without --gpu-memory is the cap the runs enforce on PyTorch's allocator
    cap = not gpu_memory and bool(limits.gpu_memory)
    if size:
        gpu_bytes = _size(size, "--gpu-memory")
    elif here and here[0].mem_total_mb:
        gpu_bytes = int(here[0].mem_total_mb * MIB)
    else:
        raise PlanError("no card visible here to read its memory: give --gpu-memory SIZE (e.g. 24GiB)")
    name = card or (str(here[0].name) if here and here[0].name else NO_CARD)
    return Budget(
        gpus=n,
        card=name,
        gpu_bytes=gpu_bytes,
        host_bytes=host,
        host_per_process=bool(host_limit),
        margin=margin,
        gpu_cap=cap,
    )


def run_plan(
    profile: Profile,
    budget: Budget,
    *,
    effective_batch: int | None = None,
    methods: Sequence[str] | None = None,
    prices: Any = None,
    tokenise: bool = True,
    link: Any = None,
) -> list[Option]:
    """The plan of ``profile`` on ``budget`` with the store's rows and the data's lengths (measured
    now when not cached; with ``tokenise=False`` the app's screen takes an unmeasured file at
    ``max_seq_len`` per sample and says so); ``prices``
    (:class:`fttui.core.results.prices.Prices`) prices a card-hour. The kinds this installation
    cannot run (:func:`fttui.core.run.launching.extras.uninstalled_shardings`) are left out.
    ``link``: the measured link the communication is timed over (:func:`fttui.core.experiments.plan.plan`)."""
    from fttui.core.experiments.datalens import NotCached, data_stats
    from fttui.core.experiments.quick_forecast import NOT_MEASURED, worst_case
    from fttui.core.results.store import Store
    from fttui.core.run.launching.extras import uninstalled_shardings

    unmeasured: list[bool] = []

    def stats_for(p: Profile, micro: int):
        try:
            return data_stats(p, micro, tokenise=tokenise)[0]
        except NotCached:
            worst = worst_case(p)
            if worst is None:
                raise
            unmeasured.append(True)
            return data_stats(worst, micro)[0]

    price = None
    if prices is not None:
        price = prices.price_of(budget.card)
        if price is None:
            raise PlanError(
                f"--prices {prices.source or ''}: no price for {budget.card!r} "
                f"(it has: {', '.join(sorted(prices.table)) or 'none'})"
            )
    with Store() as store:
        rows = store.rows()
    options = plan(
        profile,
        budget,
        rows,
        effective_batch=effective_batch,
        methods=methods,
        stats_for=stats_for,
        price_per_card_hour=price,
        price_unit=prices.unit if prices is not None else "",
        left_out=tuple(uninstalled_shardings()),
        link=link,
    )
    if unmeasured:
        options = [replace(o, mfu_source=f"{o.mfu_source}; {NOT_MEASURED}") for o in options]
    return options


_BARE = re.compile(r"[A-Za-z0-9_-]+")  # a TOML key that needs no quotes


def written_settings(
    base: Profile, option: Option, gpus: int | None = None, host_memory_limit: str | None = None
) -> dict[str, Any]:
    """The dotted keys a written profile sets on top of the one it extends: the ``--set`` values
    the plan was made with (as ``--set`` stated them, :func:`~fttui.core.profiles.overrides.stated_overrides`),
    the setup's own keys, the cards per node, and the host limit the plan was made for."""
    from fttui.core.profiles.overrides import stated_overrides

    out = stated_overrides(base.overrides, base.to_dict())
    out.update(option.settings())
    if gpus is not None:
        out["devices.gpus"] = int(gpus)
    if host_memory_limit:
        out["limits.host_memory"] = str(host_memory_limit)
    return out


def write_path(name: str, folder: str | os.PathLike[str] = "profiles") -> Path:
    """Where ``--write NAME`` saves (``folder/NAME.toml``); a name that is a path, or a file that
    exists (never written over), is a :class:`PlanError`. Checked again before writing."""
    if not name or "/" in name or name.startswith(".") or name.endswith(".toml"):
        raise PlanError(f"--write {name!r}: give a profile name (letters, digits, -), not a path")
    path = Path(folder) / f"{name}.toml"
    if path.exists():
        raise PlanError(f"--write {name}: {path} exists; choose another name")
    return path


def write_profile(
    name: str,
    base: Profile,
    option: Option,
    folder: str | os.PathLike[str] = "profiles",
    gpus: int | None = None,
    host_memory_limit: str | None = None,
) -> Path:
    """Save ``option`` as the profile ``name`` (``folder/name.toml``, extending the planned profile,
    with what :func:`written_settings` says); an existing file is never written over."""
    from fttui.core.profiles.values import toml_literal

    path = write_path(name, folder)
    parent = base.name or ""
    lines = [
        f"# fttui run --profile {name}",
        f"# written by fttui plan: {option.label()}",
        f"extends = {json.dumps(str(parent))}",
    ]
    sections: dict[str, list[str]] = {}
    for key, value in written_settings(base, option, gpus, host_memory_limit).items():
        section, _, field = key.rpartition(".")
        line = f"{field if _BARE.fullmatch(field) else json.dumps(field)} = {toml_literal(value)}"
        if section:
            sections.setdefault(section, []).append(line)
        else:
            lines.append(line)
    for section, entries in sections.items():
        lines += ["", f"[{section}]", *entries]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "x", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


#: how long ``verify`` waits for a launched run's supervisor to record itself
START_WAIT_S = 600.0


def trial_group(profile: Profile) -> str:
    """The store group of one plan's trials (``--verify``, ``--measure``)."""
    from fttui.core.run.files import rundir

    return rundir.new_run_id(f"plan-{profile.name or 'profile'}")


#: how long a trial's run is given to end after its cancel before it is called ended anyway
CANCEL_WAIT_S = 30.0


class TrialInterrupted(KeyboardInterrupt):
    """Ctrl-C during a trial, once its run was cancelled and ended: ``rundir`` is that run's."""

    def __init__(self, rundir: Any) -> None:
        super().__init__()
        self.rundir = rundir


def trial_run(
    profile: Profile,
    option: Option,
    budget: Budget,
    steps: int,
    *,
    group: str,
    timeout_s: float | None = None,
    longest: int | None = None,
    stop: Callable[[], bool] | None = None,
) -> tuple[Any, str]:
    """Launch ``option`` for real, one fresh run (``steps`` steps, kind ``sweep`` in ``group``), at
    its micro batch and the data's longest sample after truncation (synthetic samples of that
    length: every batch is the longest real batch), under the profile's memory limits, and wait
    for its verdict: ``completed``, ``oom``, ``failed``..., or ``timeout`` when it ran past
    ``timeout_s`` (then cancelled). Returns (its run directory, the verdict). A stop asked
    (``stop()`` true; without ``stop``, a Ctrl-C during the call,
    :class:`~fttui.core.experiments.ctrl_c_flag.CtrlCFlag`), even while the run is launched, cancels
    the run, waits for it to end and raises :class:`TrialInterrupted` with its run directory."""
    if stop is None:
        from fttui.core.experiments.ctrl_c_flag import CtrlCFlag

        with CtrlCFlag() as flag:
            return trial_run(
                profile, option, budget, steps, group=group, timeout_s=timeout_s, longest=longest, stop=flag
            )
    import time
    from functools import partial

    from fttui.core.experiments.datalens import data_stats
    from fttui.core.experiments.quick_forecast import launch_forecast
    from fttui.core.profiles import apply_overrides
    from fttui.core.run.launching.executors import LocalRun

    if longest is None:
        longest = int(data_stats(profile, 1)[0].tokens["max"])
    world = budget.ranks_per_node * max(1, int(profile.devices.nodes or 1))
    over = {
        **option.settings(),
        "train.max_steps": steps,
        "train.save": "none",
        "data.source": "synthetic",
        "data.max_seq_len": longest,
        "data.num_samples": option.batch_size * option.grad_accum * world * steps,
    }
    over["devices.gpus" if budget.gpus else "devices.cpu_processes"] = budget.ranks_per_node
    run = apply_overrides(profile, over)
    if stop():  # asked before anything was launched
        raise TrialInterrupted(None)
    ex = LocalRun(run, kind="sweep", group=group, forecast=partial(launch_forecast, run))
    rd = ex.start()
    started = time.monotonic()

    def ended() -> None:
        ex.cancel()
        until = time.monotonic() + CANCEL_WAIT_S
        while ex.alive() and time.monotonic() < until:
            time.sleep(0.2)

    timed_out = False
    # a supervisor slow to start (a loaded machine) is waited for, up to START_WAIT_S
    while ex.final_state() is None and (
        ex.alive() if rd.supervisor() is not None else time.monotonic() - started < START_WAIT_S
    ):
        if stop():  # first: a stop asked while the run was launched is seen here
            ended()
            raise TrialInterrupted(rd)
        if timeout_s is not None and time.monotonic() - started > timeout_s:
            timed_out = True
            ended()
            break
        time.sleep(0.2)
    final = ex.final_state()
    if timed_out and (final is None or final.status != "completed"):
        return rd, "timeout"
    return rd, final.status if final is not None else "failed"


def verify(
    profile: Profile,
    options: Sequence[Option],
    k: int,
    budget: Budget,
    *,
    steps: int = 2,
    on_result: Any = None,
) -> list[dict[str, Any]]:
    """``--verify K``: launch the K fastest setups that fit, one fresh run each
    (:func:`trial_run`: ``steps`` steps at the longest real batch, the group of one plan in the
    store, kind ``sweep``); each result says whether the setup held (``completed``), ran out of
    memory (``oom``) or failed otherwise. ``on_result`` is called with each result as it comes."""
    from fttui.core.experiments.datalens import data_stats

    if k < 1:
        raise PlanError(f"--verify {k}: give the number of setups to run, 1 or more")
    longest = int(data_stats(profile, 1)[0].tokens["max"])
    group = trial_group(profile)
    out = []
    for o in [o for o in options if o.fits][:k]:
        rd, status = trial_run(profile, o, budget, steps, group=group, longest=longest)
        res = {
            "setup": o.label(),
            "settings": o.settings(),
            "run_id": rd.run_id,
            "status": status,
            "held": True if status == "completed" else False if status == "oom" else None,
            "max_seq_len": longest,
        }
        out.append(res)
        if on_result is not None:
            on_result(res)
    return out
