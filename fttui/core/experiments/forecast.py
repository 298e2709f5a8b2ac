"""How long a run will take, and what it costs, before it is launched (``fttui estimate``'s forecast).

A step's time is the work it feeds the ranks, in model FLOPs, over the rate the ranks reach, plus a
fixed cost per forward and backward pass (per micro batch: the operators' own overhead, data
loading; the optimizer's share spread over the passes)::

    step_seconds = grad_accum x (micro_batch x fed_tokens_per_sample x flops_per_token(seq) / rate
                                 + fixed)
    run_seconds  = warm-up + steps x step_seconds

``fed_tokens_per_sample``: tokens the model computes on, padding included (a batch is padded to its
longest sample: :mod:`fttui.core.data.lengths`); synthetic data feeds exactly ``max_seq_len``.
``flops_per_token``: :mod:`fttui.core.models.flops` (the same count as the rows' MFU).

``rate`` (FLOP/s per training process) is calibrated from the store (:mod:`.calibration`): completed rows of the same
card, then the nearest in model, method, sharding and precision, each row giving
``tokens_padded_per_s x flops_per_token / ranks``; on a GPU it is carried as MFU (rate / the card's
peak, :mod:`fttui.core.models.peaks`), so rows of another card of known peak still count. Two or
more rows of one setup at different micro-batch sizes also give ``fixed`` (least squares of the
time per micro batch on its FLOPs); otherwise ``fixed`` is 0 and the forecast says so. The
rows also give the warm-up: their training time beyond steps x their steady step time (the first
steps), added once. Without a matching row: a stated default MFU on a card of known peak, a stated default rate on a
CPU, and
a stated default fixed cost per pass and decoder layer (:data:`DEFAULT_PASS_S_PER_LAYER`): the words
say "uncalibrated". A GPU profile with neither (no card visible or named, or a card of no known peak,
and no row of it) gets no time at all (``step_seconds`` and ``run_seconds`` None): a CPU's default
rate says nothing of a card; the words say what is missing and how to name the card.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from fttui.core.base import shardings
from fttui.core.base.methods import Method
from fttui.core.experiments.calibration import (
    RANKS_CPU,
    calibration_rows,
    fit_fixed,
    row_rate,
    warmup_s,
)
from fttui.core.experiments.stepmodel import step_model
from fttui.core.models.flops import ModelShape, flops_per_token
from fttui.core.models.peaks import find_peak, peak_tflops
from fttui.core.profiles.typed import Profile

DEFAULT_MFU: dict[str, float] = {
    Method.FULL: 0.35,
    Method.LORA: 0.30,
    Method.LORA_EMB: 0.30,
    Method.QLORA: 0.20,
    Method.LORA_INT8: 0.12,
}
DEFAULT_CPU_FLOPS = 5e9  # per training process, fp32, when no CPU row calibrates
#: a forward and backward pass's own cost per decoder layer (the operators' overhead, whatever the
#: work), when no row calibrates: the pass floors measured on tiny 2-layer Llamas (docs/forecast.md,
#: 3.8-4.0 ms on CPU ranks of the development machine, 10.9 ms on an H100 in eager mode). Without
#: it an uncalibrated forecast priced 4 x 8 and 1 x 32 the same, and the planner could not order them.
DEFAULT_PASS_S_PER_LAYER = {"cpu": 1.9e-3, "gpu": 5.4e-3}
#: host <-> card copies of an offloading sharding, bytes/s one way per card: a stated default
#: (PCIe 4.0 x16: 32 GB/s raw, about 20 in practice), not measured on this project's machines
HOST_LINK_BYTES_PER_S = 20e9
#: the card of a GPU profile when no GPU is visible here and none is named (``--card``)
NO_CARD = "unknown GPU"
#: how to name the card a GPU run will use, said wherever a forecast lacks it
NAME_THE_CARD = "name the card the run will use with --card NAME (`fttui estimate --help` lists the cards fttui knows)"
#: the start of ``mfu_source`` when no time is forecast (the rest says why)
UNTIMED = "not forecast: "
#: the start of ``mfu_source`` when no row calibrates the forecast (the defaults it rests on follow)
UNCALIBRATED = "uncalibrated: no stored run to calibrate from, so "


@dataclass(frozen=True)
class Forecast:
    step_seconds: float | None  # None: no time can be told (a GPU profile of no known card: mfu_source says why)
    run_seconds: float | None
    steps: int
    tokens: int  # real (non-padding) tokens the run trains on
    fed_tokens_per_sample: float
    flops_per_token: float
    mfu: float | None
    flop_rate: float | None  # FLOP/s per training process (None with no time)
    fixed_seconds: float  # per micro batch (forward and backward)
    step_fixed_seconds: float  # per optimizer step, outside the passes (measured rows only)
    warmup_seconds: float  # once per run, beyond steps x step_seconds (the calibrating rows')
    mfu_source: str
    calibrated: bool
    rows: list[str] = field(default_factory=list)
    cost: float | None = None
    cost_unit: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def words(self) -> str:
        if self.run_seconds is None or self.step_seconds is None:
            return f"not forecast for the {self.steps} steps: {self.mfu_source.removeprefix(UNTIMED)}"
        took = duration_words(self.run_seconds)
        cost = f", {self.cost:,.2f} {self.cost_unit}".rstrip() if self.cost is not None else ""
        mfu = f"MFU {self.mfu:.0%}, " if self.mfu is not None and self.calibrated else ""  # else: said as a default
        return f"{self.steps} steps x {self.step_seconds:.3g} s = {took}{cost} ({mfu}{self.mfu_source})"


def duration_words(seconds: float) -> str:
    """A forecast duration in words: ``18.5 s``, ``4.2 min``, ``88.0 h``."""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def _first(v: Any) -> Any:
    if isinstance(v, str) and v.startswith("["):
        try:
            v = json.loads(v)
        except ValueError:
            return None
    return v[0] if isinstance(v, list) and v else v


def offload_bytes(e: Any) -> tuple[float, float]:
    """(bytes per micro batch, bytes per optimizer step) one rank copies between the host and its
    card under an offloading sharding, from an estimate's host breakdown (the node's offloaded
    parts, shared by its ranks): offloaded parameters go up for the forward and again for the
    backward of every micro batch; offloaded gradients go down and the updated parameters back up
    once a step. (0, 0) without offloading."""
    hb = getattr(e, "host_breakdown", None) or {}
    inputs = getattr(e, "inputs", None) or {}
    ranks = max(1, int(inputs.get("gpus") or inputs.get("cpu_processes") or 1))
    return (
        2 * float(hb.get("offload_param_partitions") or 0) / ranks,
        2 * float(hb.get("offload_gradients") or 0) / ranks,
    )


def planned_steps(profile: Profile, samples: int, world: int) -> int:
    """Optimizer steps the Trainer will run: ``max_steps`` when > 0, else epochs x batches."""
    t = profile.train
    max_steps = int(t.max_steps or -1)
    if max_steps > 0:
        return max_steps
    per_step = int(t.batch_size or 1) * int(t.grad_accum or 1) * max(1, world)
    per_epoch = max(1, math.ceil(samples / per_step))
    return max(1, math.ceil(float(t.epochs or 1.0) * per_epoch))


def forecast(
    profile: Profile,
    shape: ModelShape,
    *,
    samples: int,
    fed_tokens_per_sample: float,
    real_tokens_per_sample: float,
    rows: Iterable[Mapping[str, Any]],
    card: str,
    cards: int,
    price_per_card_hour: float | None = None,
    price_unit: str = "",
    link_bytes: tuple[float, float] = (0.0, 0.0),
    attn_len: float | None = None,
    link: Any = None,
) -> Forecast:
    """The forecast of one profile on ``cards`` x ``card`` (``card == "cpu"``: CPU processes).
    ``attn_len``: the fed tokens' mean padded length, each token weighted (the attention term's
    length; ``fed_tokens_per_sample`` when not given: synthetic data feeds every sample at it).
    ``link_bytes``: :func:`offload_bytes`, the host copies of an offloading sharding, timed at
    :data:`HOST_LINK_BYTES_PER_S` unless the calibrating rows ran the same sharding (their rate
    has them already). ``link``: a measured :class:`~fttui.core.experiments.link.LinkFigure`; over
    several ranks the step's communication (:func:`~fttui.core.experiments.comm.comm_per_step`) is
    added at its bandwidth and latency, unless the calibrating rows ran the same sharding."""
    p = profile
    t = p.train
    world = max(1, cards) * max(1, int(p.devices.nodes or 1))
    method = str(p.method)
    precision = str(t.precision or "fp32")
    gc = bool(t.gradient_checkpointing)
    fpt = flops_per_token(shape, method, attn_len or fed_tokens_per_sample, gc).total
    accum = max(1, int(t.grad_accum or 1))
    per_step = int(t.batch_size or 1) * accum
    pass_flops = int(t.batch_size or 1) * fed_tokens_per_sample * fpt
    steps = planned_steps(profile, samples, world)
    chosen, score = calibration_rows(profile, rows, card)
    peak = None if card == RANKS_CPU else peak_tflops(card, precision)
    fixed, mfu, warm, model = 0.0, None, 0.0, None
    if chosen:
        warm = warmup_s(chosen)
        same_card = str(chosen[0].get("gpu")) == card
        model = step_model(chosen, shape, method, overlap=card != RANKS_CPU) if score == 15 and same_card else None
        fit = fit_fixed(chosen) if score == 15 and model is None else None
        # calibration_rows keeps the rows with a rate, on a GPU those of a card of known peak: none is left out
        if card == RANKS_CPU or peak is None:
            rates = [row_flops for r in chosen if (row_flops := row_rate(r)) is not None]
            rate = sum(rates) / len(rates)
        else:
            mfus = [
                row_flops / (row_peak * 1e12)
                for r in chosen
                if (row_flops := row_rate(r)) is not None
                and (row_peak := peak_tflops(str(r.get("gpu")), r.get("precision"))) is not None
            ]
            mfu = sum(mfus) / len(mfus)
            rate = mfu * peak * 1e12
        how = {
            15: "the same model, method, sharding and precision",
            14: "the same model, method and sharding",
            12: "the same model and method",
        }.get(score, "the nearest setup")
        here = "CPU" if card == RANKS_CPU else "this card"
        where = here if same_card else f"{chosen[0].get('gpu')}, scaled by peak rates"
        source = f"calibrated from {len(chosen)} stored run{'s' if len(chosen) != 1 else ''} of {how} on {where}"
        if model is not None:
            rate, fixed, warm = 1.0 / model.seconds_per_flop, model.fixed_pass_s, model.warmup_s
            source += f"; {model.words}"
        elif fit is not None:
            rate, fixed = 1.0 / fit[0], fit[1]
            source += f"; fixed {fixed:.3g} s per micro batch {fit[2]}"
        else:
            source += "; no fixed cost per micro batch: one size measured"
        if warm:
            source += f"; warm-up {warm:.3g} s"
        calibrated = True
    elif peak is not None:
        mfu = DEFAULT_MFU.get(method, 0.3)
        rate = mfu * peak * 1e12
        source = f"{UNCALIBRATED}a default MFU of {mfu:.0%} for {method}"
        calibrated = False
    elif card != RANKS_CPU:  # no rate to tell a card's time by: none is made up from a CPU's
        return _untimed(
            card,
            precision,
            steps,
            steps * per_step * world * real_tokens_per_sample,
            fed_tokens_per_sample,
            fpt,
            price_unit,
        )
    else:
        rate = DEFAULT_CPU_FLOPS
        source = f"{UNCALIBRATED}a default {rate / 1e9:g} GFLOP/s per CPU process"
        calibrated = False
    if not chosen:
        per_layer = DEFAULT_PASS_S_PER_LAYER["cpu" if card == RANKS_CPU else "gpu"]
        fixed = per_layer * max(1, shape.layers)
        source += f" and {fixed * 1e3:.3g} ms fixed per micro batch, {per_layer * 1e3:g} ms per layer"
    step_s = model.step_seconds(pass_flops, accum) if model is not None else accum * (pass_flops / rate + fixed)
    if model is not None and mfu is not None and peak:
        mfu = accum * pass_flops / step_s / (peak * 1e12)  # what the rows' MFU measures: whole steps
    if any(link_bytes) and card != RANKS_CPU and not (chosen and score & 2):
        link_s = (accum * link_bytes[0] + link_bytes[1]) / HOST_LINK_BYTES_PER_S
        step_s += link_s
        source += f"; host copies of the offload {link_s:.3g} s/step at {HOST_LINK_BYTES_PER_S / 1e9:g} GB/s (default)"
    if link is not None and world > 1 and link.bandwidth > 0 and not (chosen and score & 2):
        from fttui.core.experiments.comm import comm_per_step
        from fttui.core.experiments.link import us

        comm = comm_per_step(
            shardings.of(method, p.sharding)[1],
            shape.params_total,
            shape.params_trainable,
            world,
            accum=accum,
            checkpointing=gc,
            layers=shape.layers,
            precision=precision,
            bandwidth=link.bandwidth,
            latency_s=link.latency_s,
        )
        step_s += comm.seconds
        source += (
            f"; communication {comm.seconds:.3g} s/step ({comm.bytes / 2**20:.3g} MiB a rank, "
            f"{comm.collectives} collectives) over the measured link ({link.bandwidth / 1e9:.3g} GB/s, "
            f"{us(link.latency_s)})"
        )
    run_s = warm + steps * step_s
    cost = None
    if price_per_card_hour is not None:
        cost = price_per_card_hour * max(1, cards) * max(1, world // max(1, cards)) * run_s / 3600
    return Forecast(
        step_seconds=float(f"{step_s:.6g}"),
        run_seconds=float(f"{run_s:.6g}"),
        steps=steps,
        tokens=int(round(steps * per_step * world * real_tokens_per_sample)),
        fed_tokens_per_sample=round(fed_tokens_per_sample, 2),
        flops_per_token=round(fpt, 1),
        mfu=None if mfu is None else round(mfu, 4),
        flop_rate=round(rate, 1),
        fixed_seconds=round(fixed, 6),
        step_fixed_seconds=round(model.fixed_step_s, 6) if model is not None else 0.0,
        warmup_seconds=round(warm, 3),
        mfu_source=source,
        calibrated=calibrated,
        rows=[str(r.get("run_id")) for r in chosen],
        cost=None if cost is None else float(f"{cost:.6g}"),
        cost_unit=price_unit,
    )


def no_rate_words(card: str, precision: str) -> str:
    """Why a GPU profile's time is not forecast on ``card`` (no calibrating row, no known peak)."""
    if card == NO_CARD:
        return f"{UNTIMED}no GPU is visible here and no card is named; {NAME_THE_CARD}"
    rate = "peak rate" if find_peak(card) is None else f"{precision} peak rate"
    return (
        f"{UNTIMED}fttui knows no {rate} of {card!r} and the store has no row of it to calibrate from "
        "(a run on it stores one; `fttui estimate --help` lists the cards fttui knows)"
    )


def _untimed(
    card: str,
    precision: str,
    steps: int,
    tokens: float,
    fed_tokens_per_sample: float,
    fpt: float,
    price_unit: str,
) -> Forecast:
    return Forecast(
        step_seconds=None,
        run_seconds=None,
        steps=steps,
        tokens=int(round(tokens)),
        fed_tokens_per_sample=round(fed_tokens_per_sample, 2),
        flops_per_token=round(fpt, 1),
        mfu=None,
        flop_rate=None,
        fixed_seconds=0.0,
        step_fixed_seconds=0.0,
        warmup_seconds=0.0,
        mfu_source=no_rate_words(card, precision),
        calibrated=False,
        cost=None,
        cost_unit=price_unit,
    )


def profile_shape(profile: Profile, inputs: Mapping[str, Any]) -> ModelShape:
    """The model's shape before launch: the architecture's numbers and the estimate's counts."""
    from fttui.core.models.numbers import arch_numbers

    a = arch_numbers(profile.model)
    params, lora = int(inputs.get("params") or a.params), int(inputs.get("lora_params") or 0)
    full = profile.method_kind().full
    moe = a.experts and a.sparse_layers
    return ModelShape(
        params_total=params + (0 if full else lora),
        params_trainable=params if full else lora,
        vocab=a.vocab,
        hidden=a.hidden,
        layers=a.layers,
        attn_dim=a.q_dim,
        tied=a.tied,
        experts=a.experts if moe else 0,
        top_k=a.top_k if moe else 0,
        expert_inter=a.expert_inter if moe else 0,
        sparse_layers=a.sparse_layers,
    )


def profile_forecast(
    profile: Profile,
    inputs: Mapping[str, Any],
    rows: Iterable[Mapping[str, Any]],
    card: str,
    prices=None,
    batch_size: int | None = None,
    tokenise: bool = True,
    link_bytes: tuple[float, float] = (0.0, 0.0),
) -> Forecast:
    """The forecast of a resolved profile: its data's real lengths (:mod:`fttui.core.experiments.datalens`,
    synthetic data: ``max_seq_len``), its cards (``card``: ``"cpu"`` or the NVML name of the cards it
    will run on), the store's ``rows``; ``prices`` (:class:`fttui.core.results.prices.Prices`)
    prices a card-hour. ``tokenise=False``: a data file whose lengths are not cached raises
    :class:`fttui.core.experiments.datalens.NotCached` instead of being tokenised."""
    from fttui.core.experiments.datalens import data_stats

    stats, _cached = data_stats(profile, batch_size, tokenise=tokenise)
    fed = stats.random_order["fed_tokens"] / max(1, stats.samples)
    real = stats.random_order["real_tokens"] / max(1, stats.samples)
    attn = stats.random_order.get("fed_tokens_x_len", 0) / max(1, stats.random_order["fed_tokens"])
    dev = profile.devices
    cards = int(dev.gpus or 0) or int(dev.cpu_processes or 1)
    price = prices.price_of(card) if prices is not None else None
    return forecast(
        profile,
        profile_shape(profile, inputs),
        samples=stats.samples,
        fed_tokens_per_sample=fed,
        real_tokens_per_sample=real,
        rows=rows,
        card=card,
        cards=cards,
        price_per_card_hour=price,
        price_unit=(prices.unit if prices is not None else ""),
        link_bytes=link_bytes,
        attn_len=attn or None,
    )


def run_card(profile: Profile) -> str:
    """The card a profile will run on: ``"cpu"`` without GPUs, else the first visible card's NVML
    name (:data:`NO_CARD` when none is visible here)."""
    if not int(profile.devices.gpus or 0):
        return RANKS_CPU
    from fttui.monitor import make_gpu_sampler, run_cards

    with make_gpu_sampler() as sampler:
        cards = run_cards(sampler.sample())
    return str(cards[0].name) if cards and cards[0].name else NO_CARD
