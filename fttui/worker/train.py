"""Training worker entry point: ``python -m fttui.worker.train --run-dir DIR``.

Also runs under ``torchrun`` (one process per rank; DDP over gloo on CPU, nccl on CUDA; FSDP for
an ``fsdp*`` sharding) and, for a ``zero*`` sharding, under the ``deepspeed`` launcher (or
torchrun). Reads ``DIR/profile.json`` (the resolved profile), appends ``phase``/``start``/``step``/``end``/``error``
events to ``DIR/events.jsonl`` and prints a
few human-readable lines to stdout.

Exit codes: 0 completed, 1 failed, 2 bad config or data, 3 out of memory.

This module owns the run itself (dataset, callback, ``trainer.train()``) and the one place every
failure becomes an ``error`` event; the setup is :mod:`.startup` (memory limits: :mod:`.limits`),
the Trainer :mod:`.trainer`, the model :mod:`.model`.
This module imports nothing heavy at import time: data validation fails fast, before torch loads.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from fttui.core.run.files.rundir import RunDir
from fttui.core.run.fold.phases import BUILDING_OPS, FIRST_STEP, PREPARING_DATA
from fttui.core.run.row.summary import row_so_far

from .errors import EXIT_BAD_INPUT, EXIT_OK, WorkerInputError, classify, exit_code_for, one_line
from .limits import fixed_address_layout
from .startup import Emitter, env_int, read_profile, setup
from .trainer import make_trainer, plan

# Emitter, setup and make_trainer are also imported from here (bench/probe_vs_accelerate.py).
__all__ = ["Emitter", "setup", "make_trainer", "run", "main"]


def run(run_dir: str, state: dict[str, Any], resume_from: str | None = None) -> int:
    keep = plan(read_profile(run_dir), run_dir)  # a bad value fails before the model loads
    if resume_from is not None:
        check_checkpoint(resume_from)
    su = setup(run_dir, state)
    profile, log = su.profile, su.log
    state["profile"], state["log"] = profile, log
    d, t = profile.data, profile.train
    from fttui.integrations.hf import FttuiCallback

    from .data import build_dataset, split_eval
    from .environment import environment

    emit = state["emit"]
    emit("phase", phase=PREPARING_DATA)
    vocab = su.model.get_input_embeddings().num_embeddings
    dataset, dinfo = build_dataset(d, su.tok, vocab, t.seed, records=su.records)
    dataset, eval_dataset = split_eval(dataset, d.eval_ratio if keep.eval else 0.0, t.seed)
    n_eval = len(eval_dataset) if eval_dataset is not None else 0
    log(
        f"dataset: {dinfo['name']}, {len(dataset)} samples"
        + (f" (+{n_eval} held out for evaluation)" if n_eval else "")
        + (f" ({dinfo['dropped']} dropped: no response token within max_seq_len)" if dinfo["dropped"] else "")
        + f", max_seq_len {d.max_seq_len}, tokenizer {getattr(su.tok, 'name', '?')}"
    )

    start_fields = {
        "config": profile.to_dict(),
        "params_total": su.info["params_total"],
        "params_trainable": su.info["params_trainable"],
        "world_size": su.world,
        "micro_batch": t.batch_size,
        "grad_accum": t.grad_accum,
        "max_seq_len": d.max_seq_len,
        "num_samples": len(dataset),
        "eval_samples": n_eval,
        "keep": {
            "save": keep.save,
            "save_steps": keep.save_steps,
            "output_dir": keep.output_dir,
            "eval_steps": keep.eval_steps if n_eval else None,
            "report_to": keep.report_to,
            "resume_from": resume_from,
        },
        "env": environment(),
        "limits": su.limits,
        "method": profile.method,
        "dtype": su.info["dtype"],
        "structure": su.info.get("structure"),
        "build": su.info.get("build"),  # how this rank built its model (fttui.worker.partition)
        "device": "cuda" if su.use_cuda else "cpu",
        "setup_time": round(time.perf_counter() - su.t_boot, 3),
    }
    deepspeed = profile.sharding_kind().deepspeed
    # The run's events: fttui's Trainer callback, as for a script, with what the worker knows
    # (start_fields, the trainer's runtime evidence). DeepSpeed builds its engine (and JIT-builds
    # its ops on a first run) inside train(), before the callbacks' on_train_begin: there the
    # first step begins (first_step).
    from .passfloor import pass_floor

    callback = FttuiCallback(
        run_dir,
        via="worker",
        start=lambda trainer: {**start_fields, **_runtime(trainer)},
        printer=log,
        mark=False,
        first_step=deepspeed,
        strict=True,
        end=lambda trainer: pass_floor(trainer, d.max_seq_len, log),
    )
    callback.eval_at_end = n_eval > 0
    state["counters"] = counters = callback.c
    from .trackers import RowToTrackers

    to_trackers = RowToTrackers(lambda: row_so_far(RunDir(run_dir)), emit)
    from .allochist import StopAfter, history_steps, start

    steps = history_steps(profile, run_dir)  # on a card: what holds the memory, for the first steps
    cbs = [callback, to_trackers]
    if start(steps):
        log(f"allocator history on ({'the whole run' if steps is None else f'the first {steps} steps'})")
        cbs += [StopAfter(steps)] if steps is not None else []
    trainer = make_trainer(su, profile, dataset, cbs, eval_dataset)
    state["trainer"] = trainer
    callback.bind(trainer)
    to_trackers.trainer = trainer
    emit("phase", phase=BUILDING_OPS if deepspeed else FIRST_STEP)
    t_train = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume_from)
    log(
        f"training done: {counters.step} steps, {counters.samples} samples, {counters.tokens} tokens "
        f"in {time.perf_counter() - t_train:.2f}s"
    )
    if keep.recovery and trainer.is_world_process_zero():
        _drop_recovery_checkpoints(run_dir, log)
    if keep.save != "none":
        counters.enter("save")
        _save_final(trainer, su.tok, keep.output_dir, emit, log)
        counters.enter(None)
    _close_process_group(trainer)
    return EXIT_OK


def check_checkpoint(path: str) -> None:
    """A checkpoint to resume from is a folder with the Trainer's ``trainer_state.json``."""
    if not os.path.isfile(os.path.join(path, "trainer_state.json")):
        raise WorkerInputError(f"--resume-from {path}: not a checkpoint (no trainer_state.json)")


def _drop_recovery_checkpoints(run_dir: str, log) -> None:
    """The checkpoints this run saved only to recover from an OOM (``train.on_oom = "shrink"``
    with ``save`` ``end`` or ``none``): training completed, so they go (the row names none)."""
    import shutil

    from fttui.core.run.files.events import SaveEvent, read_events
    from fttui.core.run.launching.resume import is_checkpoint

    for ev in read_events(os.path.join(run_dir, "events.jsonl")):
        path = ev.path if isinstance(ev, SaveEvent) and ev.kind == "checkpoint" else None
        if isinstance(path, str) and is_checkpoint(Path(path)):
            shutil.rmtree(path, ignore_errors=True)
            log(f"removed {path} (kept for out-of-memory recovery only)")


def _save_final(trainer, tok, output_dir: str, emit, log) -> None:
    """The trained adapter (peft) or model in ``output_dir``, in the Trainer's format
    (``save_model``: every rank takes part, the lowest writes), with the tokenizer when it is a
    transformers one; a ``save`` event (``kind`` ``model``) says where, how long it took and the
    lowest rank's peak resident memory after it."""
    t0 = time.perf_counter()
    trainer.save_model(output_dir)
    if trainer.is_world_process_zero():
        if callable(getattr(tok, "save_pretrained", None)):
            tok.save_pretrained(output_dir)
        took = time.perf_counter() - t0
        from fttui.integrations.hf_info import proc_memory

        emit(
            "save",
            step=int(trainer.state.global_step),
            kind="model",
            path=output_dir,
            save_time=round(took, 3),
            peak_rss_mb=proc_memory().get("peak_rss_mb"),
        )
        log(f"saved the trained {'adapter' if _is_peft(trainer.model) else 'model'} to {output_dir} ({took:.1f}s)")


def _is_peft(model) -> bool:
    return hasattr(model, "peft_config")


def _runtime(trainer) -> dict[str, Any]:
    """The start event's evidence of what runs (:func:`.runtime.runtime_info`: ``wrapper``,
    ``optimizer``, ``distributed``, ``deepspeed``, ...); never stops a run."""
    try:
        from .runtime import runtime_info

        return runtime_info(trainer)
    except Exception as e:  # evidence only
        return {"runtime_info_error": repr(e)[:300]}


def _close_process_group(trainer) -> None:
    """Tear the process group down before the interpreter exits: left to the exit handlers,
    gloo's threads can abort a rank ("terminate called without an active exception").

    ``destroy_process_group`` only unregisters the group: the DDP wrapper's reducer keeps it alive
    until the interpreter finalises, where the same abort happens (seen under load, about one
    run in four). So the Trainer's wrapped model and optimizer are released first.

    Without a process group (one process, no DeepSpeed) there is nothing to tear down: the four
    full collections of a heap holding torch and transformers cost about a second of CPU at the
    end of every such run (measured on tiny-lora: 1.9 of 18.5 s under cProfile; since the stack's
    objects are frozen after import, :func:`.startup.stack_imported`, a collection here costs
    hundredths of a second)."""
    import gc

    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    trainer.accelerator.free_memory()  # drops accelerate's references to the DDP model and optimizer
    trainer.model_wrapped = trainer.model = trainer.optimizer = trainer.lr_scheduler = None
    gc.collect()
    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()
    gc.collect()


def _phase(counters, state: dict[str, Any]) -> dict[str, Any]:
    """The error event's ``phase`` and ``phase_step``: the training phase the counters hold (the
    Trainer callback's marks), else the startup phase the worker announced last."""
    if counters is not None and counters.phase:
        return {"phase": counters.phase, "phase_step": counters.phase_step()}
    if counters is not None and counters.step:
        return {"phase": None, "phase_step": None}  # training ran: between its marked phases
    return {"phase": getattr(state.get("emit"), "phase", None), "phase_step": None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fttui.worker.train", description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", required=True, help="run directory holding profile.json")
    ap.add_argument(
        "--resume-from",
        default=None,
        metavar="CHECKPOINT",
        help="a Trainer checkpoint folder to continue from (fttui run --resume)",
    )
    # The deepspeed launcher passes --local_rank (unless --no_local_rank); torchrun uses env only.
    ap.add_argument("--local_rank", "--local-rank", dest="local_rank", type=int, default=None, help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    fixed_address_layout()  # under a host-memory limit: the same layout in every process
    if ns.local_rank is not None:
        os.environ.setdefault("LOCAL_RANK", str(ns.local_rank))
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the supervisor writes the status
    for k, v in (
        ("HF_HUB_OFFLINE", "1"),
        ("TRANSFORMERS_VERBOSITY", "error"),
        ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
        ("TOKENIZERS_PARALLELISM", "false"),
        ("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1"),
        ("HF_HUB_DISABLE_TELEMETRY", "1"),
    ):
        os.environ.setdefault(k, v)
    import warnings

    # transformers 5 calls its own deprecated aliases internally (v6 renames); keep the log readable.
    warnings.filterwarnings("ignore", message=r".*deprecated and will be removed in v6.*", category=FutureWarning)
    run_dir = ns.run_dir
    rank = env_int("RANK", "LOCAL_RANK", default=0)
    emit = Emitter(os.path.join(run_dir, "events.jsonl"), rank)
    state: dict[str, Any] = {"rank": rank, "emit": emit, "counters": None}
    try:
        return run(run_dir, state, ns.resume_from)
    except Exception as exc:  # every failure becomes one error event
        kind, oom_kind = classify(exc)
        code = exit_code_for(exc)
        message = one_line(exc)
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        tb_lines = "".join(tb).rstrip("\n").splitlines()[-20:]
        counters = state.get("counters")
        if oom_kind == "cuda" and state.get("profile") is not None:  # what held the card's memory, at once
            from .allochist import dump_at_oom

            dump_at_oom(run_dir, state.get("trainer"), state["profile"], state.get("log"))
        try:
            emit(
                "error",
                kind=kind,
                oom_kind=oom_kind,
                message=message,
                step=counters.step if counters is not None else 0,
                longest_seq=counters.fed_seq() if counters is not None else None,
                traceback=tb_lines,
                **_phase(counters, state),
            )
        except (OSError, TypeError, ValueError) as e2:  # pragma: no cover - nowhere left to report but stderr
            print(f"fttui worker: cannot write the error event: {e2}", file=sys.stderr)
        if isinstance(exc, WorkerInputError):
            print(f"error: {message}", file=sys.stderr, flush=True)
        else:
            print("".join(tb), file=sys.stderr, end="", flush=True)
            print(f"error ({kind}{'/' + oom_kind if oom_kind else ''}): {message}", file=sys.stderr, flush=True)
        return code if code != EXIT_OK else EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
