"""Training worker entry point: ``python -m fttui.worker.train --run-dir DIR``.

Also runs under ``torchrun`` (one process per rank; DDP over gloo on CPU, nccl on CUDA) and, for
``full-zero3-offload``, under the ``deepspeed`` launcher. Reads ``DIR/profile.json`` (the resolved
profile), appends ``start``/``step``/``end``/``error`` events to ``DIR/events.jsonl`` and prints a
few human-readable lines to stdout.

Exit codes: 0 completed, 1 failed, 2 bad config or data, 3 out of memory.

Memory limits (``limits`` section of the profile):
  host_memory: after the training stack is imported (and the CPU thread pool started), RLIMIT_AS
    is set to the process's current virtual size + the limit: the limit is the address space the
    run may add on top of the imported stack. Exceeding it surfaces as an allocation failure
    (error event kind "oom", oom_kind "cpu", exit 3).
  gpu_memory: ``torch.cuda.set_per_process_memory_fraction(limit / total)`` on every visible
    device; a no-op (with a note) without CUDA.
This module imports nothing heavy at import time: data validation fails fast, before torch loads.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
import traceback
from typing import Any

from .errors import (EXIT_BAD_INPUT, EXIT_OK, ConfigError, WorkerInputError, classify,
                     exit_code_for, one_line)
from fttui.core.data.records import load_records

try:
    from fttui.core.run.events import append_jsonl as _append_jsonl
except Exception:  # pragma: no cover - the core module is optional for the worker
    _append_jsonl = None

_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*$")
_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


def parse_size(value: Any) -> int | None:
    """``"2GiB"`` -> 2147483648. B; KB/MB/GB/TB powers of 10; KiB/MiB/GiB/TiB powers of 2.
    Empty / None -> None. Raises :class:`ConfigError` on anything else."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ConfigError(f"bad size {value!r}")
    if isinstance(value, (int, float)):
        if value <= 0:
            raise ConfigError(f"bad size {value!r}: must be > 0")
        return int(value)
    m = _SIZE_RE.match(str(value))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise ConfigError(f"bad size {value!r} (use e.g. 512MiB, 24GiB, 2GB)")
    n = int(float(m.group(1)) * _UNITS[unit])
    if n <= 0:
        raise ConfigError(f"bad size {value!r}: must be > 0")
    return n


def append_event(path: str, obj: dict[str, Any]) -> None:
    """One line, one ``os.write`` on an O_APPEND descriptor (fttui.core.run.events when available)."""
    if _append_jsonl is not None:
        _append_jsonl(path, obj)
        return
    data = (json.dumps(obj, separators=(",", ":")) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


class Emitter:
    """Writes events with the common keys ``event``, ``t``, ``rank``, ``source="worker"``."""

    def __init__(self, path: str, rank: int) -> None:
        self.path, self.rank = path, int(rank)

    def __call__(self, event: str, **fields: Any) -> dict[str, Any]:
        obj = {"event": event, "t": time.time(), "rank": self.rank, "source": "worker"}
        obj.update(fields)
        append_event(self.path, obj)
        return obj


def _env_int(*names: str, default: int) -> int:
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            try:
                return int(v)
            except ValueError:
                pass
    return default


def _vm_size() -> int:
    try:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    with open("/proc/self/statm", encoding="utf-8") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def apply_host_limit(limit: int | None) -> dict[str, Any] | None:
    if not limit:
        return None
    import resource

    base = _vm_size()
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = base + limit
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


def _check_profile(p: dict[str, Any]) -> None:
    for sec in ("model", "data", "train", "lora", "quant", "zero3", "devices", "limits"):
        if not isinstance(p.get(sec), dict):
            raise ConfigError(f"profile.json: missing section {sec!r}")
    from .model import METHODS

    if p.get("method") not in METHODS:
        raise ConfigError(f"method: unknown value {p.get('method')!r} (use one of {', '.join(METHODS)})")
    t = p["train"]
    if t.get("precision", "fp32") not in ("fp32", "fp16", "bf16"):
        raise ConfigError(f"train.precision: unknown value {t.get('precision')!r} (use fp32, fp16 or bf16)")
    for key in ("batch_size", "grad_accum"):
        if int(t.get(key, 1)) < 1:
            raise ConfigError(f"train.{key}: must be >= 1")
    if int(p["data"].get("max_seq_len", 512)) < 2:
        raise ConfigError("data.max_seq_len: must be >= 2")


def _threads(local_world: int) -> int:
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) > 0:  # the user's (or the launcher's) choice wins
        return int(omp)
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, n // max(1, local_world))


class Setup:
    """What a worker process builds once: profile, torch state, limits, model and tokenizer."""

    profile: dict[str, Any]
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


def read_profile(run_dir: str) -> dict[str, Any]:
    try:
        with open(os.path.join(run_dir, "profile.json"), encoding="utf-8") as f:
            profile = json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{os.path.join(run_dir, 'profile.json')}: not found") from None
    except ValueError as e:
        raise ConfigError(f"{os.path.join(run_dir, 'profile.json')}: malformed JSON ({e})") from None
    if not isinstance(profile, dict):
        raise ConfigError("profile.json: expected a JSON object")
    _check_profile(profile)
    return profile


def setup(run_dir: str, state: dict[str, Any], profile: dict[str, Any] | None = None) -> Setup:
    """Import the stack, apply the memory limits, build the model and the tokenizer."""
    su = Setup()
    su.t_boot = time.perf_counter()
    su.run_dir = run_dir
    su.rank = state["rank"]
    su.world = world = _env_int("WORLD_SIZE", default=1)
    su.local_rank = local_rank = _env_int("LOCAL_RANK", default=0)
    local_world = _env_int("LOCAL_WORLD_SIZE", default=world)
    prefix = f"[rank {su.rank}] " if world > 1 else ""

    def log(msg: str) -> None:
        print(prefix + msg, flush=True)

    su.log = log
    su.profile = profile = profile if profile is not None else read_profile(run_dir)
    method = profile["method"]
    m, d, t, lim = profile["model"], profile["data"], profile["train"], profile["limits"]
    host_limit = parse_size(lim.get("host_memory"))
    gpu_limit = parse_size(lim.get("gpu_memory"))
    precision = t.get("precision", "fp32")

    # Fast fail on bad data, before the training stack is imported.
    su.records = None
    source = d.get("source") or "synthetic"
    if source != "synthetic":
        su.records = load_records(source, d.get("format") or "auto")

    import torch

    torch.set_num_threads(_threads(local_world))
    su.use_cuda = use_cuda = torch.cuda.is_available() and int(profile["devices"].get("gpus", 1)) > 0
    if precision == "fp16" and not use_cuda:
        raise ConfigError("train.precision: fp16 needs a CUDA GPU; use bf16 or fp32 on CPU")
    if method == "full-zero3-offload" and "LOCAL_RANK" not in os.environ:
        raise ConfigError("method full-zero3-offload: launch the worker with the deepspeed launcher "
                          "(devices.launcher = \"deepspeed\"); plain python is not supported")
    if use_cuda:
        torch.cuda.set_device(local_rank)

    import transformers  # noqa: F401  (import everything before the host limit)
    from transformers import TrainingArguments  # noqa: F401

    from . import callback as _callback  # noqa: F401
    from .model import build_model
    from .tokenizer import load_tokenizer

    if method != "full":
        import peft  # noqa: F401
    if method in ("qlora", "lora-int8"):
        import bitsandbytes  # noqa: F401
    transformers.utils.logging.disable_progress_bar()

    su.tok = load_tokenizer(m)
    # Start the CPU thread pool before the address-space limit (thread stacks count against it).
    (torch.ones(64, 64) @ torch.ones(64, 64)).sum().item()
    limits = {"host_memory": lim.get("host_memory") or "", "gpu_memory": lim.get("gpu_memory") or ""}
    host_applied = apply_host_limit(host_limit)
    if host_applied:
        limits.update(host_applied)
        log(f"host memory limit: {lim.get('host_memory')} on top of {host_applied['vm_base_bytes'] >> 20} MiB "
            "virtual size after imports (RLIMIT_AS)")
    gpu_applied = apply_gpu_limit(gpu_limit, log)
    if gpu_applied:
        limits.update(gpu_applied)
    su.limits = limits

    t_model = time.perf_counter()
    su.model, su.info = build_model(profile, use_cuda=use_cuda, local_rank=local_rank)
    info = su.info
    log(f"model built: {m.get('name_or_path')} ({m.get('init')}), method {method}, dtype {info['dtype']}, "
        f"params total {info['params_total']:,}, trainable {info['params_trainable']:,} "
        f"({time.perf_counter() - t_model:.2f}s)")
    return su


def training_args(profile: dict[str, Any], run_dir: str, world: int, use_cuda: bool):
    """TrainingArguments from the resolved profile."""
    from transformers import TrainingArguments

    from .model import deepspeed_config

    t = profile["train"]
    precision = t.get("precision", "fp32")
    optim = t.get("optimizer") or "adamw_torch"
    warmup = float(t.get("warmup_ratio") or 0.0)
    max_steps = int(t.get("max_steps", -1) or -1)
    ta_kwargs: dict[str, Any] = dict(
        output_dir=os.path.join(run_dir, "trainer"),
        per_device_train_batch_size=int(t.get("batch_size", 1)),
        gradient_accumulation_steps=int(t.get("grad_accum", 1)),
        num_train_epochs=float(t.get("epochs", 1.0)),
        max_steps=max_steps if max_steps > 0 else -1,
        learning_rate=float(t.get("lr", 2e-4)),
        lr_scheduler_type=t.get("lr_scheduler") or "linear",
        # transformers 5 has no warmup_ratio: a float in [0, 1) for warmup_steps is a ratio.
        warmup_steps=min(max(warmup, 0.0), 0.999) if warmup > 0 else 0,
        weight_decay=float(t.get("weight_decay", 0.0)),
        optim=optim,
        seed=int(t.get("seed", 42)),
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
        use_cpu=not use_cuda,
        remove_unused_columns=False,
        fp16=precision == "fp16",
        bf16=precision == "bf16",
        log_level="warning",
    )
    if world > 1 and not use_cuda:
        ta_kwargs["ddp_backend"] = "gloo"
    if profile["method"] == "full-zero3-offload":
        ta_kwargs["deepspeed"] = deepspeed_config(profile, world)
    try:
        return TrainingArguments(**ta_kwargs)
    except ValueError as e:
        raise ConfigError(f"training arguments: {one_line(e)}") from e


def make_trainer(su: Setup, profile: dict[str, Any], dataset, counters, callbacks):
    from transformers.trainer_callback import PrinterCallback

    from .callback import CountingTrainer
    from .data import Collator

    d = profile["data"]
    trainer = CountingTrainer(
        model=su.model,
        args=training_args(profile, su.run_dir, su.world, su.use_cuda),
        train_dataset=dataset,
        data_collator=Collator(su.tok.pad_token_id, int(d.get("max_seq_len", 512)), bool(d.get("pad_to_max"))),
        callbacks=callbacks,
        counters=counters,
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


def run(run_dir: str, state: dict[str, Any]) -> int:
    su = setup(run_dir, state)
    profile, log = su.profile, su.log
    d, t = profile["data"], profile["train"]
    from .callback import Counters, EventCallback, environment
    from .data import build_dataset

    vocab = su.model.get_input_embeddings().num_embeddings
    dataset, dinfo = build_dataset(d, su.tok, vocab, int(t.get("seed", 42)), records=su.records)
    log(f"dataset: {dinfo['name']}, {dinfo['num_samples']} samples"
        + (f" ({dinfo['dropped']} dropped: no response token within max_seq_len)" if dinfo["dropped"] else "")
        + f", max_seq_len {d.get('max_seq_len')}, tokenizer {getattr(su.tok, 'name', '?')}")

    counters = Counters()
    state["counters"] = counters
    start_fields = {
        "config": profile,
        "params_total": su.info["params_total"],
        "params_trainable": su.info["params_trainable"],
        "world_size": su.world,
        "micro_batch": int(t.get("batch_size", 1)),
        "grad_accum": int(t.get("grad_accum", 1)),
        "max_seq_len": int(d.get("max_seq_len", 512)),
        "num_samples": dinfo["num_samples"],
        "env": environment(),
        "limits": su.limits,
        "method": profile["method"],
        "dtype": su.info["dtype"],
        "structure": su.info.get("structure"),
        "device": "cuda" if su.use_cuda else "cpu",
        "setup_time": round(time.perf_counter() - su.t_boot, 3),
    }
    callback = EventCallback(state["emit"], counters, start_fields, on_cuda=su.use_cuda, printer=log)
    trainer = make_trainer(su, profile, dataset, counters, [callback])
    t_train = time.perf_counter()
    trainer.train()
    log(f"training done: {counters.step} steps, {counters.samples} samples, {counters.tokens} tokens "
        f"in {time.perf_counter() - t_train:.2f}s")
    _close_process_group()
    return EXIT_OK


def _close_process_group() -> None:
    """Tear the process group down before the interpreter exits: left to the exit handlers,
    gloo's threads can abort a rank ("terminate called without an active exception")."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fttui.worker.train", description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", required=True, help="run directory holding profile.json")
    # The deepspeed launcher passes --local_rank (unless --no_local_rank); torchrun uses env only.
    ap.add_argument("--local_rank", "--local-rank", dest="local_rank", type=int, default=None, help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    if ns.local_rank is not None:
        os.environ.setdefault("LOCAL_RANK", str(ns.local_rank))
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the supervisor writes the status
    for k, v in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_VERBOSITY", "error"), ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
                 ("TOKENIZERS_PARALLELISM", "false"), ("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1"),
                 ("HF_HUB_DISABLE_TELEMETRY", "1")):
        os.environ.setdefault(k, v)
    import warnings

    # transformers 5 calls its own deprecated aliases internally (v6 renames); keep the log readable.
    warnings.filterwarnings("ignore", message=r".*deprecated and will be removed in v6.*", category=FutureWarning)
    run_dir = ns.run_dir
    rank = _env_int("RANK", "LOCAL_RANK", default=0)
    emit = Emitter(os.path.join(run_dir, "events.jsonl"), rank)
    state: dict[str, Any] = {"rank": rank, "emit": emit, "counters": None}
    try:
        return run(run_dir, state)
    except Exception as exc:  # every failure becomes one error event
        kind, oom_kind = classify(exc)
        code = exit_code_for(exc)
        message = one_line(exc)
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        tb_lines = "".join(tb).rstrip("\n").splitlines()[-20:]
        counters = state.get("counters")
        try:
            emit("error", kind=kind, oom_kind=oom_kind, message=message,
                 step=counters.step if counters is not None else 0, traceback=tb_lines)
        except Exception as e2:  # pragma: no cover - nowhere left to report but stderr
            print(f"fttui worker: cannot write the error event: {e2}", file=sys.stderr)
        if isinstance(exc, WorkerInputError):
            print(f"error: {message}", file=sys.stderr, flush=True)
        else:
            print("".join(tb), file=sys.stderr, end="", flush=True)
            print(f"error ({kind}{'/' + oom_kind if oom_kind else ''}): {message}", file=sys.stderr, flush=True)
        return code if code != EXIT_OK else EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
