"""The end of a run: its final status and its summary row."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fttui.core.base.bounded import read_tail
from fttui.core.profiles.stored import stored_profile
from fttui.core.results.columns import RowInputs, fold_row, rounded
from fttui.core.results.row_inputs import Cards, Kept, RunFigures, SlurmFacts
from fttui.core.run.files import rundir
from fttui.core.run.files.events import EvalEvent, Event, LaunchEvent, SaveEvent, read_events
from fttui.core.run.files.sample_records import read_samples
from fttui.core.run.files.statusfile import FinalStatus
from fttui.core.run.fold.perf import row_perf
from fttui.core.run.fold.ranks import clash_mismatch
from fttui.core.run.fold.snapshot import RunSnapshot, to_int
from fttui.core.run.launching.resume import is_checkpoint
from fttui.core.run.processes.oomkill import KillEvidence, verdict
from fttui.core.run.row import commerror, exitabort
from fttui.core.run.row.row_figures import (
    gpu_figures,
    host_figures,
    lowest_start,
    mismatch,
    row_cards,
    sharding_read_back,
    stated_sharding,
)

if TYPE_CHECKING:
    from fttui.monitor.slurm import JobState


def _signal_name(rc: int | None) -> str | None:
    if rc is None or rc >= 0:
        return None
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def _last_log_line(rd: rundir.RunDir) -> str:
    data = read_tail(rd.log_path, 4096) or b""
    lines = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def final_status(
    rd: rundir.RunDir,
    snap: RunSnapshot,
    rc: int | None,
    cancel_reason: str | None,
    error: str | None = None,
    *,
    kill: KillEvidence | None = None,
) -> FinalStatus:
    """Classify how the run ended: completed, failed, oom or cancelled. ``kill``: what could be
    read about a SIGKILL (the kernel's counts of OOM kills, its log): with the host's memory at
    the last sample, :func:`fttui.core.run.processes.oomkill.verdict` says whether it was the
    OOM killer's, and the status's error says which evidence decided."""
    sig = _signal_name(rc)
    err = snap.error or {}
    if error:
        return FinalStatus("failed", rc, sig, error=error)
    if cancel_reason is not None:
        return FinalStatus("cancelled", rc, sig, error=cancel_reason)
    if err.get("kind") == "oom":
        return FinalStatus(
            "oom",
            rc,
            sig,
            oom_kind=err.get("oom_kind") or "unknown",
            error=err.get("message"),
            error_step=err.get("step"),
            error_rank=err.get("rank"),
        )
    if rc == 0 and snap.status == "completed":
        return FinalStatus("completed", rc, sig)
    if rc != 0 and not err and rd.kind_and_group()[0] == "command":
        # a command reports its OOM in its output only (the worker writes an error event)
        from fttui.core.run.row.oomtext import oom_in_log

        found = oom_in_log(rd.log_path)
        if found is not None:
            return FinalStatus("oom", rc, sig, oom_kind=found[0], error=found[1], error_step=snap.step)
    killed_by_oom, evidence = False, ""
    if rc == -signal.SIGKILL:
        host = snap.host
        killed_by_oom, evidence = verdict(kill, getattr(host, "ram_used_mb", None), getattr(host, "ram_total_mb", None))
    if killed_by_oom:
        return FinalStatus(
            "oom",
            rc,
            sig,
            oom_kind="host-kill",
            error_step=snap.step,
            error=f"killed by SIGKILL: the kernel's OOM killer ({evidence})",
        )
    comm = commerror.in_log(rd.log_path, snap.world_size) if rc not in (0, None) else None
    if comm is not None:  # a collective timed out, a peer was lost, NCCL failed: the cause and the rank
        return FinalStatus(
            "failed", rc, sig, error=comm.text(), error_step=err.get("step") or snap.step, error_rank=comm.rank
        )
    if err:
        return FinalStatus(
            "failed", rc, sig, error=err.get("message"), error_step=err.get("step"), error_rank=err.get("rank")
        )
    if rc not in (0, None) and snap.status == "completed" and exitabort.in_log(rd.log_path):
        # the training ended on every reporting rank, then a rank aborted at its exit
        return FinalStatus("failed", rc, sig, error=exitabort.text(rc), error_step=snap.step)
    if evidence:
        return FinalStatus(
            "failed",
            rc,
            sig,
            error=f"training process killed by SIGKILL, not taken for the kernel's OOM killer ({evidence})",
            error_step=snap.step,
        )
    if sig:
        return FinalStatus("failed", rc, sig, error=f"training process killed by {sig}", error_step=snap.step)
    if rc == 0 and rd.kind_and_group()[0] == "command":
        # a command's exit 0 is its success (docs/commands.md), Trainer or not; say when nothing
        # reported training, so that a row without figures is not read as a training run
        return FinalStatus("completed", rc, sig, error=None if _training_seen(snap) else NO_TRAINING_SEEN)
    if rc == 0:
        return FinalStatus("failed", rc, sig, error="training process exited without finishing (no end event)")
    return FinalStatus("failed", rc, sig, error=f"exit code {rc}: {_last_log_line(rd)}".rstrip(": "))


#: The words of a command that exited 0 without any training reported (no Trainer, no printed bar).
NO_TRAINING_SEEN = (
    "no training seen: no Trainer reported to fttui and no training progress was printed "
    "(the row has the process's memory and time only)"
)


def _training_seen(snap: RunSnapshot) -> bool:
    """A start event, a step or an end was folded (from the callback, the worker or the log)."""
    return snap.config is not None or snap.step is not None or snap.train_time is not None or bool(snap.ranks)


def build_row(
    rd: rundir.RunDir,
    snap: RunSnapshot,
    status: FinalStatus,
    *,
    t_launch: float | None,
    t_end: float,
    stalled: bool = False,
    cuda_visible: str | None = None,
    recorded_by: str = "supervisor",
    slurm_job: JobState | None = None,
) -> dict[str, Any]:
    """The run's summary row (the store's columns): :func:`row_inputs` folded
    (:func:`fttui.core.results.columns.fold_row`)."""
    moment = (
        _local(t_launch or t_end),
        _local(t_end),
        rounded(t_end - t_launch, 2) if t_launch else None,
    )
    return fold_row(row_inputs(rd, snap, status, moment, stalled, cuda_visible, recorded_by, slurm_job))


def _local(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


#: the moment of a row: when the run began and ended (local time) and its wall time (s)
Moment = tuple[str, str, float | None]
#: what the cards' topology was: ``env.topology`` and the interconnect's label
Topology = tuple[dict[str, Any] | None, str]


def row_inputs(
    rd: rundir.RunDir,
    snap: RunSnapshot,
    status: FinalStatus,
    moment: Moment,
    stalled: bool,
    cuda_visible: str | None,
    recorded_by: str,
    slurm_job: JobState | None = None,
    topology: Topology | None = None,
) -> RowInputs:
    """Everything a run's row is folded from, complete: the stated profile, the snapshot, the
    final status (a Slurm node's with Slurm's verdict, :func:`fttui.core.run.slurm.slurmend.node_verdict`),
    the event records and the run's figures (:class:`~fttui.core.results.row_inputs.RunFigures`).
    Its cards are the run's (:mod:`fttui.core.run.row.row_figures`): those ``cuda_visible`` names (a
    ``CUDA_VISIBLE_DEVICES`` value) when given, else those the GPU samples recorded as visible to
    the supervisor, whose environment the training inherits. Per card also allocator retries,
    lowest headroom and MFU (:mod:`fttui.core.run.fold.perf`). ``recorded_by``: who wrote the row
    (``"supervisor"``, or ``"recovered"`` when a later command wrote it for a supervisor that
    died). ``slurm_job``: the Slurm job's final state, for a node's run (its ``env.slurm``).
    ``topology``: the cards' topology as measured before (:func:`settled_row`), else measured now."""
    stored = rd.profile()
    prof = stored if stored is not None else stored_profile({})  # a directory without its profile.json
    kind, group = rd.kind_and_group()
    used = []  # a command's cards: those its processes had memory on
    if kind == "command":
        from fttui.core.run.launching.command import row_profile

        used = [
            c
            for c in (snap.gpu.gpus if snap.gpu is not None and snap.gpu.available else [])
            if (snap.gpu_peak_proc_mb.get(c.index) or 0) > 0
        ]
        prof = row_profile(prof, snap.config, len(used))
    env = dict(snap.env or {})
    nproc = prof.devices.processes_per_node() if stored is not None else 1
    # a command states no world size: the Trainer's (its start event), else unknown
    ws_stated = None if kind == "command" else prof.world_size() if stored is not None else 1
    versions = {k: env.get(k) for k in _VERSIONS if k in env}
    gpus_asked = int(prof.devices.gpus if prof.devices.gpus is not None else 1)
    cards = used if used and cuda_visible is None else row_cards(snap, gpus_asked, nproc, cuda_visible)
    gpu_names = [c.name or "" for c in cards]
    if not cards and gpus_asked > 0:  # no GPU sample: the worker's own list (CUDA order)
        gpu_names = list(env.get("gpu_names") or [])[: max(1, nproc)]
    num_gpus = len(gpu_names)
    if topology is None and len(cards) >= 2:
        from fttui.core.results.rows import interconnect_label
        from fttui.monitor import gpu_topology

        topo = gpu_topology([c.index for c in cards])
        topology = (
            topo,
            interconnect_label(num_gpus, (topo or {}).get("nvlink_links"), (topo or {}).get("common_ancestor")),
        )
    if topology is not None and len(cards) >= 2:
        env["topology"] = topology[0]
    stated = {
        "batch_size": prof.train.batch_size,
        "grad_accum": prof.train.grad_accum,
        "max_seq_len": prof.data.max_seq_len,
        "world_size": prof.world_size() if stored is not None else None,
        "precision": prof.train.precision,
    }
    events = read_events(rd.events_path)
    method, sharding_asked = stated_sharding(prof)
    stated["sharding"] = sharding_asked
    differs = (
        mismatch(stated, snap, events) if stored is not None and kind != "command" else {}
    )  # a command states nothing
    # processes that claimed one rank (fttui.core.run.fold.ranks): the world they stated, the processes seen
    first = lowest_start(events)
    differs.update(clash_mismatch(snap.rank_clash, to_int(first.world_size) if first else None, snap.world_size))
    # The sharding that ran, read back from the engine or wrapper (the worker stops a run whose
    # sharding is not the one asked for); the one asked for when the run ended before it said.
    read_back = sharding_read_back(events)
    if read_back:
        env["sharding"] = read_back
    slurm = rd.slurm()
    gpu = gpu_figures(snap, cards)
    figures = RunFigures(
        method=method,
        sharding=(read_back or {}).get("ran") or sharding_asked,
        stated_world_size=ws_stated,
        wall_s=moment[2],
        stalled=bool(stalled),
        versions=versions,
        env={k: v for k, v in env.items() if k not in versions},
        run_dir=str(rd.path),
        mismatch=differs,
        cards=Cards(
            gpu=gpu_names[0] if gpu_names else "cpu",
            gpu_names=gpu_names,
            num_gpus=num_gpus,
            interconnect=topology[1] if topology is not None and len(cards) >= 2 else "",
        ),
        gpu=gpu,
        host=host_figures(snap),
        perf=row_perf(snap, cards, gpus_asked > 0),
        kept=kept_figures(rd, events),
        slurm=SlurmFacts.of(slurm.to_dict(), slurm_job) if slurm is not None else None,
        **_oom_figures(rd, status, events, prof, snap, gpu),
    )
    return RowInputs(
        run_id=rd.run_id,
        kind=kind,
        group_id=group,
        profile=prof,
        snap=snap,
        status=status,
        started_at=moment[0],
        ended_at=moment[1],
        events=tuple(events),
        figures=figures,
        recorded_by=recorded_by,
    )


def _oom_figures(
    rd: rundir.RunDir, status: FinalStatus, events: list[Event], prof, snap: RunSnapshot, gpu
) -> dict[str, Any]:
    """``oom_phase`` and ``oom_explained`` of a run that ended out of memory
    (:mod:`fttui.core.run.row.oomexplain`), and ``oom_held`` when a CUDA one left its snapshot
    (:mod:`fttui.core.run.row.oomheld`): the micro batch and accumulation that ran (its start
    event's, else the stated), the card's memory as the budget when no limit was set; an OOM
    retry's attempt (whose launch recorded no estimate) takes the first attempt's."""
    if status.status != "oom":
        return {}
    from fttui.core.run.launching.oomretry import attempt_of
    from fttui.core.run.row.oomexplain import explain

    a = attempt_of(rd)
    first = rundir.RunDir(rd.path.parent / a.first) if a is not None and a.first and "/" not in a.first else None
    earlier = read_events(first.events_path) if first is not None and first.path.is_dir() else []

    micro = to_int(getattr(snap, "micro_batch", None)) or prof.train.batch_size
    accum = to_int(getattr(snap, "grad_accum", None)) or prof.train.grad_accum
    totals = [t for t in (gpu.gpu_mem_total_mb or []) if isinstance(t, (int, float))]
    card = min(totals) * 2**20 if totals else None  # MiB, as the samples record them
    got = explain(events, micro, accum, prof.data.max_seq_len, card, earlier)
    from fttui.core.run.row.oomheld import oom_held

    held = oom_held(rd, events, micro, prof.data.max_seq_len, earlier)
    return {"oom_phase": got.phase, "oom_explained": got.text, "oom_held": held}


_VERSIONS = ("python", "torch", "transformers", "peft", "accelerate", "bitsandbytes", "deepspeed", "cuda", "driver")


def settled_row(rd: rundir.RunDir, own: Mapping[str, Any], status: FinalStatus, job: JobState) -> dict[str, Any]:
    """A Slurm node's row once Slurm says how its job ended, after the node's supervisor wrote
    ``own`` (its ``row.json``): folded again from the run directory (the same events and samples,
    so the same snapshot and figures) with Slurm's verdict (``status``) and final state (``job``).
    What only that supervisor measured, at the node, is read back from its row: when the run
    began and ended, the cards' topology, who recorded it and whether it stalled."""
    snap = replay(rd).snapshot()
    wall = own.get("wall_s")
    moment = (str(own.get("started_at") or ""), str(own.get("ended_at") or ""), wall if _is_num(wall) else None)
    found = own.get("env")
    env: dict[str, Any] = found if isinstance(found, dict) else {}
    topology = (env.get("topology"), str(own.get("interconnect") or ""))
    recorded_by = str(own.get("recorded_by") or "supervisor")
    return fold_row(row_inputs(rd, snap, status, moment, bool(own.get("stalled")), None, recorded_by, job, topology))


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def kept_figures(rd: rundir.RunDir, events: list[Event]) -> Kept:
    """The row's schema-6 columns: the run it resumed (``command.json``'s ``resume``, written by
    :func:`fttui.core.run.launching.launch.prepare`), the latest evaluation (``eval`` events) and what it
    saved (``save`` events), from the lowest rank that reported them."""
    cmd = rd.command()
    resume = cmd.resume if cmd is not None else None
    evals = [e for e in events if isinstance(e, EvalEvent) and isinstance(e.step, int) and _is_num(e.eval_loss)]
    last_eval = max(evals, key=lambda e: (e.step, -int(e.rank or 0), e.t or 0), default=None)
    saves = [e for e in events if isinstance(e, SaveEvent) and isinstance(e.path, str)]
    checkpoints = [e for e in saves if e.kind == "checkpoint" and isinstance(e.step, int)]
    if _recovery_only(rd):  # kept for out-of-memory recovery only: a completed run removed them
        checkpoints = [e for e in checkpoints if is_checkpoint(Path(str(e.path)))]
    model = [e for e in saves if e.kind == "model"]
    output_dir = None
    if model:
        output_dir = model[-1].path
    elif checkpoints:
        output_dir = os.path.dirname(str(checkpoints[-1].path))
    return Kept(
        resumed_from=resume.run_id if resume is not None else None,
        resumed_step=resume.step if resume is not None else None,
        eval_loss=float(last_eval.eval_loss) if last_eval is not None and last_eval.eval_loss is not None else None,
        eval_step=last_eval.step if last_eval is not None else None,
        output_dir=output_dir,
        checkpoint=max(checkpoints, key=lambda e: e.step or 0).path if checkpoints else None,
    )


def _recovery_only(rd: rundir.RunDir) -> bool:
    """The run saved checkpoints for ``train.on_oom = "shrink"`` alone (:mod:`fttui.core.run.launching.oomretry`)."""
    from fttui.core.run.launching.oomretry import recovery_saves

    prof = rd.profile()
    return prof is not None and recovery_saves(prof, rd.kind_and_group()[0])


def replay(rd: rundir.RunDir):
    """The run's fold (:class:`fttui.core.run.fold.state.RunState`) of every event and sample it left."""
    from fttui.core.run.fold.state import RunState

    return RunState.for_profile(rd.profile()).replay(read_events(rd.events_path), read_samples(rd.samples_path))


def launch_time(events: list[Event]) -> float | None:
    """When the training's process group started (the first ``launch`` event), else None."""
    return next((e.t for e in events if isinstance(e, LaunchEvent) and isinstance(e.t, (int, float))), None)


def row_so_far(rd: rundir.RunDir, *, recorded_by: str = "worker") -> dict[str, Any]:
    """The summary row as the run stands now, from its events and samples so far: what the
    worker logs to the run's trackers when training ends, before the supervisor's row exists
    (which adds the exit and the last samples)."""
    snap = replay(rd).snapshot()
    return build_row(
        rd,
        snap,
        FinalStatus(snap.status),
        t_launch=launch_time(read_events(rd.events_path)),
        t_end=time.time(),
        recorded_by=recorded_by,
    )
