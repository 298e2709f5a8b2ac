"""Probe worker: one model load, many trials. ``python -m fttui.worker.probe --run-dir DIR ...``

Each trial trains ``--steps`` real optimizer steps (HF Trainer, the profile's optimizer,
precision and checkpointing) at one value of ``--param`` (batch_size or max_seq_len), on
synthetic samples of exactly max_seq_len tokens (the worst case: no padding), and reports
whether it fit, its peak memory and its speed as a ``trial`` event.

The order of trials is what makes the answer trustworthy:
  1. climb from ``--start``: multiplicatively (x2) for a first load, additively (+1 four times,
     then +2, +4, ...) when a boundary is already suspected, never past ``--oom-bound``
     (a value already seen to fail) or ``--hi``; every trial of the climb runs in a process that
     has not yet run out of memory (``clean``); the first trial of the process is ``fresh``: it
     pays the one-time costs a real run pays, so later trials fit a little more easily;
  2. after the first OOM, bisect in the same process between the last fit and that OOM. Those
     trials follow an OOM (``clean: false``): they only guide the next fresh process, which
     checks the suspected boundary clean (see fttui.core.experiments.probe).
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import time
import traceback
from typing import Any

from fttui.core.base.constants import PROBE_PARAMS, PROBE_STEPS
from fttui.core.profiles.schema import SYNTHETIC
from fttui.core.profiles.typed import Profile

from .errors import WorkerInputError, classify, one_line

# Not the training worker's modules before the limit: a probe worker imports them after it (1.1 MiB
# of its room), so its trials have 0.1 to 2.1 MiB less room than a run of the same stack (the base
# is rounded up to a MiB, limits.limit_base). That keeps a run at the probe's answer inside the
# budget: with the same room, the run's Trainer path needed more than the trial at the same value
# (a clean-clone CI run: runs at the largest fit of `probe --data` and of the probe screen ran out
# of memory in their first step).
from .limits import fixed_address_layout
from .startup import Emitter, setup
from .startup import env_int as _env_int


def _vm_hwm_mb(key: str = "VmHWM:") -> float | None:
    try:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _reset_hwm() -> None:
    """Reset the peak RSS of this process (Linux: write 5 to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def trial_profile(profile: Profile, param: str, value: int, steps: int, data: bool = False) -> Profile:
    """The profile of one trial: ``param`` at ``value``, ``steps`` steps of synthetic samples (or,
    with ``data``, of the data set's longest samples, the longest in the first step)."""
    p = profile.with_settings(
        {PROBE_PARAMS[param]: int(value), "train.max_steps": int(steps), "train.longest_first": bool(data)}
    )
    return p.with_settings(
        {"data.source": SYNTHETIC, "data.num_samples": p.train.batch_size * p.train.grad_accum * int(steps)}
    )


def longest_samples(su, order: list[list[int]], seq: int, k: int) -> list[dict[str, list[int]]]:
    """The ``k`` longest samples of the profile's data at ``max_seq_len = seq`` (tokenised and
    truncated as a run does), from ``order``: ``[index, raw tokens, first response token]`` of
    every record, longest first (fttui.core.experiments.datalens, the lengths ``fttui data`` caches).
    A sample with no response token within ``seq`` is left out, as a run drops it."""
    from .data import tokenize_record

    picked = [i for i, _raw, first in order if 0 <= first < seq][:k]
    return [tokenize_record(su.records[i], su.tok, seq) for i in picked]


class _StepTimes:
    def __init__(self):
        self.ends: list[float] = []

    def callback(self):
        from transformers import TrainerCallback

        outer = self

        class CB(TrainerCallback):
            def on_step_end(self, args, state, control, **kw):
                outer.ends.append(time.perf_counter())

        return CB()


def run_trial(su, param: str, value: int, steps: int, order: list[list[int]] | None = None) -> dict[str, Any]:
    import torch

    from .data import ListDataset, SyntheticDataset

    prof = trial_profile(su.profile, param, value, steps, data=order is not None)
    seq = prof.data.max_seq_len
    out: dict[str, Any] = {"value": int(value), "steps": 0}
    dataset: SyntheticDataset | ListDataset
    if order is None:
        vocab = su.model.get_input_embeddings().num_embeddings
        dataset = SyntheticDataset(prof.data.num_samples, seq, vocab, prof.train.seed)
        out["longest_seq"] = seq
    else:
        items = longest_samples(su, order, seq, prof.data.num_samples)
        if not items:
            raise WorkerInputError(f"no sample of the data has a response token within max_seq_len={seq}")
        dataset = ListDataset(items)
        out["longest_seq"] = seq if prof.data.pad_to_max else max(len(x["input_ids"]) for x in items)
        out["samples"] = len(items)
    times = _StepTimes()
    gc.collect()
    if su.use_cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    _reset_hwm()
    trainer = None
    t0 = time.perf_counter()
    try:
        from .trainer import make_trainer

        trainer = make_trainer(su, prof, dataset, [times.callback()])
        trainer.train()
        out["status"] = "fit"
    except Exception as exc:  # an OOM is a result; anything else ends the probe
        kind, oom_kind = classify(exc)
        if kind != "oom":
            raise
        out.update(status="oom", oom_kind=oom_kind, message=one_line(exc)[:300])
        if oom_kind == "cuda":  # the load's first CUDA out of memory: what held the card (allochist)
            from .allochist import dump_at_oom

            dump_at_oom(su.run_dir, trainer, prof)
    finally:
        wall = time.perf_counter() - t0
        out["steps"] = len(times.ends)
        out["peak_host_rss_mb"] = _vm_hwm_mb()
        out["peak_host_vm_mb"] = _vm_hwm_mb("VmPeak:")  # the process's peak address space (RLIMIT_AS)
        if su.use_cuda:
            out["peak_torch_reserved_mb"] = [round(torch.cuda.max_memory_reserved() / 2**20, 1)]
            out["peak_torch_alloc_mb"] = [round(torch.cuda.max_memory_allocated() / 2**20, 1)]
        else:
            out["peak_torch_reserved_mb"] = []
            out["peak_torch_alloc_mb"] = []
        step_time: float | None
        if len(times.ends) >= 2:
            step_time = (times.ends[-1] - times.ends[0]) / (len(times.ends) - 1)
        elif times.ends:
            step_time = wall
        else:
            step_time = None
        out["step_time"] = step_time
        per_step = prof.train.batch_size * prof.train.grad_accum
        if step_time and out.get("status") == "fit":
            out["samples_per_s"] = per_step / step_time
            out["tokens_per_s"] = per_step * seq / step_time
        out["wall"] = wall
        # Free everything the trial allocated; the model stays.
        if trainer is not None:
            try:
                trainer.optimizer = None
                trainer.lr_scheduler = None
            except Exception:
                pass
        del trainer
        try:
            su.model.zero_grad(set_to_none=True)
        except Exception:
            pass
        gc.collect()
        if su.use_cuda:
            torch.cuda.empty_cache()
    return out


def headroom_mb(su, r: dict[str, Any], fresh: bool) -> float | None:
    """MiB a fitting trial left unused under the budget that decides it: on a GPU the card's budget
    (``limits.gpu_memory`` or the card) minus the trial's peak reserved; under a host limit
    RLIMIT_AS minus the process's peak address space, only for the first trial of the process
    (VmPeak cannot be reset; with a fixed layout it repeats between fresh processes). With the
    growth per value of the peaks it predicts where a fresh process runs out
    (fttui.core.experiments.boundary)."""
    if r.get("status") != "fit":
        return None
    if su.use_cuda and r.get("peak_torch_reserved_mb"):
        import torch

        budget = su.limits.get("gpu_memory_bytes") if su.limits.get("applied") else None
        budget = budget or torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        return round(budget / 2**20 - r["peak_torch_reserved_mb"][0], 2)
    if fresh and su.limits.get("rlimit_as_bytes") and r.get("peak_host_vm_mb"):
        return round(su.limits["rlimit_as_bytes"] / 2**20 - r["peak_host_vm_mb"], 2)
    return None


def plan_and_run(su, emit, ns) -> dict[str, Any]:
    hi = ns.hi
    if ns.param == "max_seq_len":
        cfg = getattr(su.model, "config", None)
        limit = getattr(cfg, "max_position_embeddings", None)
        if limit and hi > limit:
            su.log(f"note: max_seq_len capped at the model's max_position_embeddings {limit}")
            hi = limit
            emit("probe_cap", hi=hi)
    bound = ns.oom_bound if ns.oom_bound and ns.oom_bound > 0 else None
    last_fit = ns.lo_fit if ns.lo_fit and ns.lo_fit > 0 else None
    first_oom = None
    clean = True
    v = ns.start
    delta = 1
    climbed = 0

    ran = [0]
    order = None
    if ns.data_order:  # probe --data: the data's longest samples instead of synthetic ones
        import json

        with open(ns.data_order, encoding="utf-8") as f:
            order = json.load(f)

    def trial(value: int) -> dict[str, Any]:
        fresh = ran[0] == 0
        emit("trial_start", value=value, clean=clean, fresh=fresh)
        r = run_trial(su, ns.param, value, ns.steps, order)
        ran[0] += 1
        r["clean"], r["fresh"] = clean, fresh
        r["headroom_mb"] = headroom_mb(su, r, fresh)
        emit("trial", **r)
        su.log(
            f"trial {ns.param}={value}: {r['status']}"
            + (f" ({r.get('oom_kind')})" if r.get("oom_kind") else "")
            + (f", peak RSS {r['peak_host_rss_mb']:.0f} MB" if r.get("peak_host_rss_mb") else "")
        )
        return r

    # 1. climb (clean trials)
    while v <= hi and (bound is None or v < bound):
        r = trial(v)
        if r["status"] == "fit":
            last_fit = v
            if v >= hi:
                break
            # additive climb: +1 four times (the guess is usually within a few values), then
            # doubling steps
            nxt = v * 2 if ns.growth == "mul" else v + delta
            climbed += 1
            if climbed >= 4:
                delta *= 2
            if bound is not None:
                nxt = min(nxt, bound - 1) if nxt >= bound else nxt
                if nxt <= v:
                    break
            v = min(nxt, hi)
        else:
            first_oom = v
            clean = False
            break
    # 2. bisect after the first OOM (guides the next fresh process)
    if first_oom is not None:
        lo = last_fit or 0
        high = first_oom
        while high - lo > 1:
            mid = (lo + high) // 2
            if mid < 1:
                break
            r = trial(mid)
            if r["status"] == "fit":
                lo = mid
            else:
                high = mid
        emit("probe_guess", largest_fit=lo or None, smallest_oom=high)
        return {"largest_fit": lo or None, "smallest_oom": high}
    return {"largest_fit": last_fit, "smallest_oom": None}


def _die_with_parent() -> None:
    """The probe's orchestrator may be killed outright: then this process must not stay."""
    parent = os.environ.get("FTTUI_PARENT_PID")
    if not parent:
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):
        os._exit(1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fttui.worker.probe")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--param", choices=list(PROBE_PARAMS), default="batch_size")
    ap.add_argument("--start", type=int, required=True)
    ap.add_argument("--hi", type=int, required=True)
    ap.add_argument("--growth", choices=["mul", "add"], default="mul")
    ap.add_argument("--lo-fit", type=int, default=0, help="largest value already seen to fit clean")
    ap.add_argument("--oom-bound", type=int, default=0, help="smallest value already seen to fail clean")
    ap.add_argument("--steps", type=int, default=PROBE_STEPS)
    ap.add_argument(
        "--data-order",
        default=None,
        metavar="FILE",
        help="JSON [[index, raw tokens, first response token], ...] of the data, longest first: "
        "trials train on the longest samples (probe --data)",
    )
    ns = ap.parse_args(argv)
    fixed_address_layout()  # under a host-memory limit: the same layout in every process
    _die_with_parent()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for k, v in (
        ("HF_HUB_OFFLINE", "1"),
        ("TRANSFORMERS_VERBOSITY", "error"),
        ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
        ("TOKENIZERS_PARALLELISM", "false"),
    ):
        os.environ.setdefault(k, v)
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    rank = _env_int("RANK", "LOCAL_RANK", default=0)
    emit = Emitter(os.path.join(ns.run_dir, "events.jsonl"), rank)
    state: dict[str, Any] = {"rank": rank, "emit": emit, "counters": None}
    try:
        su = setup(ns.run_dir, state)
        from .allochist import start
        from .environment import environment

        start(None)  # on a card, the allocator's history for every trial: they exist to run out of memory

        emit(
            "probe_start",
            param=ns.param,
            start=ns.start,
            hi=ns.hi,
            growth=ns.growth,
            params_total=su.info["params_total"],
            params_trainable=su.info["params_trainable"],
            limits=su.limits,
            env=environment(),
            setup_time=round(time.perf_counter() - su.t_boot, 3),
        )
        result = plan_and_run(su, emit, ns)
        emit("probe_end", **result)
        return 0
    except Exception as exc:
        kind, oom_kind = classify(exc)
        msg = one_line(exc)
        emit(
            "error",
            kind=kind,
            oom_kind=oom_kind,
            message=msg,
            step=0,
            traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).splitlines()[-20:],
        )
        if isinstance(exc, WorkerInputError):
            print(f"error: {msg}", file=sys.stderr, flush=True)
            return 2
        traceback.print_exc()
        return 3 if kind == "oom" else 1


if __name__ == "__main__":
    sys.exit(main())
