"""From a resolved profile to a launched, supervised run.

The training command is an argument list, never a shell string. The launcher is an existing one:
plain ``python -m`` for one process, ``torch.distributed.run`` (torchrun) for several processes
or machines and for FSDP, and DeepSpeed's own launcher for the ZeRO shardings, because
``accelerate launch --cpu`` silently ignores a DeepSpeed config (see docs/launchers.md).

Ports: a single-node run needs no agreed port, so torchrun gets ``--standalone`` (it picks a free
port itself) and the deepspeed / accelerate launchers get ``devices.main_port`` when it is free,
another free port otherwise. A run over several machines uses ``main_addr:main_port`` as the
rendezvous that node 0 hosts; node 0 checks before launch that the port is free on this machine.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from fttui.core.base import rank_timing, shardings
from fttui.core.base.errors import FttuiError, ProfileError
from fttui.core.profiles.trackers import missing_tracker
from fttui.core.profiles.typed import Profile
from fttui.core.run.files import rundir
from fttui.core.run.files.events import ForecastEvent, write_event
from fttui.core.run.files.runfiles import CommandFile, ResumeFrom
from fttui.core.run.launching.resume import Resume
from fttui.core.run.processes import proctree

WORKER_MODULE = "fttui.worker.train"


def port_free(port: int, host: str = "") -> bool:
    """Whether a TCP server could listen on ``port`` here (what torchrun's / DeepSpeed's store
    does on node 0: SO_REUSEADDR, all interfaces)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, int(port)))
        except OSError:
            return False
    return True


def free_port(preferred: int | None = None) -> int:
    """``preferred`` when it is free on this machine, else a port the kernel hands out."""
    if preferred and port_free(preferred):
        return int(preferred)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def build_command(
    profile: Profile, run_dir: Path, python: str | None = None, resume_from: str | None = None
) -> list[str]:
    """The argv of the training command for this (resolved) profile; ``resume_from``: the
    checkpoint folder the worker continues from (``fttui run --resume``)."""
    prof = profile
    py = python or sys.executable
    dev = prof.devices
    nproc = dev.processes_per_node()
    nodes = dev.nodes
    resume = ["--resume-from", str(resume_from)] if resume_from else []
    worker = ["-m", WORKER_MODULE, "--run-dir", str(run_dir), *resume]
    launcher = prof.launcher()
    src = prof.source or "?"
    check_launcher(prof, launcher)
    if launcher == "python":
        if nproc * nodes != 1:
            raise ProfileError(
                src,
                "devices.launcher",
                "the python launcher runs one process only",
                'use launcher = "auto" or "torchrun" for several processes',
            )
        return [py, *worker]
    if launcher == "torchrun":
        cmd = [py, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}"]
        if nodes == 1:
            cmd.append("--standalone")
        else:
            cmd += [
                f"--nnodes={nodes}",
                f"--node-rank={dev.node_rank}",
                f"--master-addr={dev.main_addr}",
                f"--master-port={dev.main_port}",
            ]
        return [*cmd, *worker]
    port = dev.main_port
    if nodes == 1:
        # One machine: a port the kernel hands out, never main_port (29500 by default): two runs
        # started at once (a probe beside a run, two tests) both found 29500 free, then one
        # failed with EADDRINUSE when its rank 0 listened.
        port = free_port()
    if launcher == "accelerate":
        cmd = [
            py,
            "-m",
            "accelerate.commands.launch",
            f"--num_processes={nproc * nodes}",
            f"--num_machines={nodes}",
            f"--machine_rank={dev.node_rank}",
            f"--main_process_ip={dev.main_addr}",
            f"--main_process_port={port}",
        ]
        if nproc * nodes > 1:
            # accelerate's torch.distributed launcher (its name notwithstanding, also for CPU
            # ranks: the worker trains on CPU over gloo); "--cpu" would start one process only.
            cmd.append("--multi_gpu")
        elif dev.gpus == 0:
            cmd.append("--cpu")
        return [*cmd, *worker]
    if launcher == "deepspeed":
        cmd = [py, "-m", "deepspeed.launcher.runner", f"--num_gpus={nproc}"]
        if nodes > 1:
            cmd += [
                "--no_ssh",
                f"--num_nodes={nodes}",
                f"--node_rank={dev.node_rank}",
                f"--master_addr={dev.main_addr}",
                f"--master_port={port}",
            ]
        else:
            cmd += [f"--master_port={port}"]
        return [*cmd, "--module", WORKER_MODULE, "--run-dir", str(run_dir), *resume]
    raise ProfileError(
        src, "devices.launcher", f"unknown launcher {launcher!r}", "use auto, python, torchrun, accelerate or deepspeed"
    )


def check_launcher(prof: Profile, launcher: str) -> None:
    """ProfileError (one line) when the launcher cannot run the profile's sharding.

    ZeRO: python starts no process group for DeepSpeed, and ``accelerate launch`` ignores a
    DeepSpeed config handed to the Trainer (``--cpu``: one plain process). FSDP: the Trainer
    refuses FSDP outside a process group (plain python, or accelerate with one process, which
    fttui starts with ``--cpu`` on CPU), and DeepSpeed's launcher is for DeepSpeed."""
    sharding = prof.sharding_asked()
    kind = shardings.find(sharding)
    allowed = kind.launchers if kind is not None else ()
    if not allowed:
        return
    procs = prof.world_size()
    if launcher in allowed and not (launcher == "accelerate" and procs == 1):
        return
    ok = [a for a in allowed if not (a == "accelerate" and procs == 1)]
    raise ProfileError(
        prof.source or "?",
        "devices.launcher",
        f"sharding {sharding} cannot run under the {launcher} launcher"
        + (" with one process" if launcher == "accelerate" and launcher in allowed else ""),
        "set devices.launcher = " + " or ".join(f'"{a}"' for a in ["auto", *ok]),
    )


def child_env(profile: Profile, probe: bool = False) -> dict[str, str]:
    """Environment variables added to the training processes (recorded in command.json).
    ``probe``: a probe's trials, whose boundary must repeat to the byte: the rank timing is off
    (its answering thread's stack and the flight recorder's entries take address space at moments
    no trial controls; a probe finds a boundary, not a straggler). Off too under a host memory
    budget (``limits.host_memory``), so that a fresh run under it fails where the probe said."""
    env = {
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    }
    prof = profile
    on_cpu = prof.devices.gpus == 0
    if prof.limits.host_memory:
        # Fewer malloc arenas make a host-memory boundary steadier between processes.
        env["MALLOC_ARENA_MAX"] = "1"
        # Allocations of 32 KiB and more mmapped (and returned on free): a probe's trials in one
        # process stay comparable with a fresh run under the same budget, and blocks of 32 to
        # 128 KiB no longer land in a heap hole or on its top depending on what came before (a
        # fresh process's peak at one value spread 0.36 MiB with 128 KiB, 0.03 with 32 KiB; a few
        # % of samples/s: docs/bench-probe.md).
        env["MALLOC_MMAP_THRESHOLD_"] = "32768"
        # Python's string hashes seed dict and set layouts, so with random seeds the address
        # space a process maps differs by a Python arena (1 MiB) from one process to the next.
        env["PYTHONHASHSEED"] = "0"
        # The same mappings at the same places in every process: the worker turns address-space
        # randomisation off for itself (fttui.worker.limits.fixed_address_layout).
        env["FTTUI_FIXED_LAYOUT"] = "1"
        # Python's small objects from glibc's heap instead of pymalloc's 1 MiB arenas, and the
        # heap grown by what it needs instead of 128 KiB more: with both defaults a trial's peak
        # address space moved by whole activations (0.64 MiB at 326 tokens of tiny-lora) between
        # fresh processes at one value, and went up and down between neighbouring values; with
        # these it grows evenly and repeats (docs/bench-probe.md, "A boundary that repeats").
        env["PYTHONMALLOC"] = "malloc"
        env["MALLOC_TOP_PAD_"] = "0"
    elif on_cpu:
        # CPU training: activations live in host memory. Tensors of 4 MiB and more are mmapped
        # and returned on free, so the process's peak RSS follows its live tensors (glibc's
        # heap would otherwise keep the high-water mark of freed blocks: +70% measured on a
        # 13M-parameter model at batch 16 x 512) and the estimate can predict it; smaller
        # allocations stay on the heap (a 128 KiB threshold halves the tiny profiles' samples/s).
        env["MALLOC_ARENA_MAX"] = "1"
        env["MALLOC_MMAP_THRESHOLD_"] = str(4 << 20)
        # A fixed mmap threshold also fixes glibc's trim threshold at 128 KiB: every step gave
        # the heap's free top back and faulted it in again (~140 page faults per sample, 5% of
        # the CPU time on bench/measure_cost.py's training). Up to 32 MiB of free heap top stays
        # mapped instead: no faults in the steady state, peak RSS +0..19 MiB (docs/benchmarks.md).
        env["MALLOC_TRIM_THRESHOLD_"] = str(32 << 20)
    nproc = prof.devices.processes_per_node()
    if probe or prof.limits.host_memory:
        env[rank_timing.RANK_TIMING_ENV] = "0"
    else:  # where a hang is (fttui.core.run.processes.hang)
        env.update(rank_timing.flight_recorder_env(os.environ))
    if on_cpu and nproc > 1:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc))
    if on_cpu and prof.limits.host_memory and "OMP_NUM_THREADS" not in os.environ:
        # One torch thread per process under a host budget (unless the user set it): with two,
        # a fresh process's peak at one value took one of two values 0.36 MiB apart (two threads'
        # scratch buffers alive together or one after the other), and a value next to the
        # boundary fitted in 2 of 10 processes; with one it repeats (docs/bench-probe.md).
        env["OMP_NUM_THREADS"] = "1"
    return env


def check_rendezvous(profile: Profile) -> None:
    """Several machines: node 0 hosts the rendezvous store on ``main_port`` (all interfaces), so
    the port must be free there; a clash would otherwise surface as a DistNetworkError
    (EADDRINUSE) after the training stack has loaded. Other nodes connect and wait for node 0
    (up to torchrun's rendezvous timeout, 10 minutes)."""
    prof = profile
    dev = prof.devices
    nodes = dev.nodes
    if nodes <= 1 or prof.launcher() == "python" or dev.node_rank != 0:
        return
    port = dev.main_port
    if not port_free(port):
        raise ProfileError(
            prof.source or "?",
            "devices.main_port",
            f"port {port} is already in use on this machine, and node 0 of a {nodes}-node run "
            "listens on it for the other nodes",
            f"pick a free port, the same on every node: e.g. --set devices.main_port={free_port()}",
        )


def validate_before_launch(profile: Profile, gpu_count: tuple[int, str | None] | None = None) -> None:
    """Checks that need no torch and must fail before anything is written."""
    from fttui.core.run.launching.preflight import preflight

    prof = profile
    preflight(prof, gpu_count)
    check_trackers(prof)
    check_rendezvous(prof)


def check_trackers(profile: Profile) -> None:
    """Every tracker of ``train.report_to`` can run here (its package is installed), else one
    line naming the pip package; nothing is imported."""
    prof = profile
    missing = missing_tracker(prof.train.report_to)
    if missing is not None:
        name, what = missing
        raise ProfileError(
            prof.source or "?", "train.report_to", f"tracker '{name}' {what}", "or leave it out of train.report_to"
        )


def with_output_dir(profile: Profile) -> Profile:
    """The profile with a relative ``train.output_dir`` made absolute from the current folder
    (the worker runs elsewhere, and a resumed run must find the same folder)."""
    out = profile.train.output_dir
    if not out or os.path.isabs(os.path.expanduser(out)):
        return profile
    return profile.with_settings({"train.output_dir": os.path.abspath(os.path.expanduser(out))})


def prepare(
    resolved: Profile,
    run_id: str | None = None,
    gpu_count: tuple[int, str | None] | None = None,
    *,
    kind: str = "run",
    group: str | None = None,
    resume: Resume | None = None,
) -> rundir.RunDir:
    """Validate, then create the run directory with the profile and the command (``kind`` and
    ``group``: see :func:`fttui.core.run.files.rundir.create`). ``resume``
    (:func:`~fttui.core.run.launching.resume.plan_resume`): the worker continues from that run's
    checkpoint, and ``command.json`` names it (``resume``: ``run_id``, ``checkpoint``, ``step``)
    for the row."""
    from fttui.core.run.launching.command import command_of

    if command_of(resolved) is not None:  # fttui run -- CMD, or a profile's [command]
        return prepare_command(resolved, run_id, group=group)
    prof = resolved  # the run's typed profile, from here on
    validate_before_launch(prof, gpu_count)
    prof = with_output_dir(prof)
    rid = run_id or rundir.new_run_id(prof.name or "run")
    run_path = rundir.paths.runs_dir() / rid
    argv = build_command(prof, run_path, resume_from=resume.checkpoint if resume else None)
    rd = rundir.create(prof.to_dict(), argv, child_env(prof, probe=kind == "probe"), run_id=rid, kind=kind, group=group)
    if resume is not None:
        resumed = ResumeFrom(run_id=resume.run_id, checkpoint=resume.checkpoint, step=resume.step)
        rd.write_command(replace(rd.command() or CommandFile(), resume=resumed))
    return rd


def prepare_command(resolved: Profile, run_id: str | None = None, *, group: str | None = None) -> rundir.RunDir:
    """The run directory of a command run (:mod:`fttui.core.run.launching.command`): the command checked
    (not empty, its program found) and its folder fixed (the profile's ``command.cwd``, else the
    current folder) before anything is written; ``command.json`` gets ``kind = "command"``,
    ``cwd`` and, under ``limits.host_memory``, ``host_limit_bytes`` (each of the command's
    processes' address space, RLIMIT_AS, set by the log writer)."""
    from fttui.core.base.errors import SizeError
    from fttui.core.base.units import parse_size
    from fttui.core.run.launching import command as cmdrun

    prof = resolved
    cwd = os.path.abspath(os.path.expanduser(str(prof.command.cwd or os.getcwd())))
    if not os.path.isdir(cwd):
        raise FttuiError(f"command folder not found: {cwd}")
    argv = cmdrun.check_command(prof.command.argv, cwd)
    if prof.limits.gpu_memory:
        raise FttuiError(
            "a command's GPU memory cannot be capped from outside it; leave out the GPU memory "
            "limit (torch.cuda.set_per_process_memory_fraction in the script does it)"
        )
    host_limit = None
    if prof.limits.host_memory:
        try:
            host_limit = parse_size(prof.limits.host_memory)
        except SizeError as e:
            raise FttuiError(f"host memory limit: {e}") from None
    prof = prof.with_settings({"command.argv": argv, "command.cwd": cwd})
    rid = run_id or rundir.new_run_id(prof.name or cmdrun.KIND)
    env = cmdrun.command_env(rundir.paths.runs_dir() / rid, host_limit=host_limit is not None)
    rd = rundir.create(prof.to_dict(), argv, env, run_id=rid, kind=cmdrun.KIND, group=group)
    rd.write_command(replace(rd.command() or CommandFile(), cwd=cwd, host_limit_bytes=host_limit))
    return rd


def start_supervisor(rd: rundir.RunDir) -> int:
    """Start the supervisor in its own session; it outlives this process."""
    argv = [sys.executable, "-m", "fttui.core.run.supervising.supervisor", str(rd.path)]
    return proctree.start_daemon(argv, rd.path / "supervisor.log")


def launch(
    resolved: Profile,
    run_id: str | None = None,
    gpu_count: tuple[int, str | None] | None = None,
    *,
    kind: str = "run",
    group: str | None = None,
    resume: Resume | None = None,
    forecast: Callable[[], dict[str, Any] | None] | None = None,
) -> rundir.RunDir:
    """Validate, create the run directory and start its supervisor. ``gpu_count`` (number
    visible, reason when none) overrides NVML's answer, for an app with an injected sampler;
    ``resume``: see :func:`prepare`; ``forecast``: makes the time forecast
    (:func:`fttui.core.experiments.quick_forecast.launch_forecast`), once the profile is valid
    (bad input writes nothing, not even a cache), recorded as the run's first event."""
    rd = prepare(resolved, run_id, gpu_count, kind=kind, group=group, resume=resume)
    fields = forecast() if forecast is not None else None
    if fields:
        write_event(rd.events_path, ForecastEvent(source="launch", **fields))
    start_supervisor(rd)
    return rd


__all__ = [
    "launch",
    "prepare",
    "prepare_command",
    "start_supervisor",
    "build_command",
    "check_launcher",
    "check_rendezvous",
    "check_trackers",
    "free_port",
    "FttuiError",
]
