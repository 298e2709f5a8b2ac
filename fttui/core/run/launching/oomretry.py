"""Out of memory, recovered: ``train.on_oom = "shrink"`` (``fttui run --on-oom shrink``).

When a training step runs out of memory (a CUDA OOM, the CPU allocator under a host limit, the
kernel's OOM killer: the final status ``oom``), the supervisor (the process that outlives the
worker) decides here whether to try again (:func:`decide`) and prepares the next attempt
(:func:`prepare_next`): a new run directory with the same profile except half the micro batch and
twice the gradient accumulation (:func:`shrink`: the effective batch stays), continuing from the
last checkpoint the failed attempt saved (from the start when it saved none). Each attempt is a
run and a row of its own: ``command.json``'s ``resume`` names the attempt before it (the row's
``resumed_from``, ``resumed_step``), its ``attempt`` the chain, which the supervisor writes as the
attempt's first event (:class:`~fttui.core.run.files.events.AttemptEvent`); the failed attempt's last
event names the next one (:class:`~fttui.core.run.files.events.RetryEvent`), so a view can follow.

Checkpoints: an attempt can only continue from what was saved. Under ``shrink`` a run saves a
resumable checkpoint every ``train.save_steps`` steps whatever ``train.save`` says
(:func:`fttui.worker.arguments.plan`); with ``save = "end"`` or ``"none"`` only the latest one is
kept (they are for recovery), and a completed run removes it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fttui.core.base.errors import FttuiError
from fttui.core.profiles.typed import Profile
from fttui.core.run.files import rundir
from fttui.core.run.files.events import AttemptEvent, RetryEvent
from fttui.core.run.files.runfiles import Attempt, CommandFile, ResumeFrom
from fttui.core.run.files.statusfile import FinalStatus

__all__ = [
    "RETRIED_KINDS",
    "Shrink",
    "Decision",
    "shrink",
    "decide",
    "check_slurm",
    "recovery_message",
    "attempt_of",
    "attempt_event",
    "prepare_next",
    "recovery_saves",
    "after_oom",
]

#: the OOM kinds a smaller micro batch can cure: activations on the card or the host (an NCCL or
#: bitsandbytes OOM is a buffer of the library's, whatever the batch)
RETRIED_KINDS = ("cuda", "cpu", "host-kill")
#: the phases in which an OOM is not the batch's: the model, the data or DeepSpeed's engine
_BEFORE_TRAINING = ("loading-model", "preparing-data", "building-ops")


@dataclass(frozen=True)
class Shrink:
    """Micro batch and accumulation before and after: ``micro * accum == new_micro * new_accum``."""

    micro: int
    accum: int
    new_micro: int
    new_accum: int

    def words(self) -> str:
        return f"batch {self.micro} -> {self.new_micro}, accumulation {self.accum} -> {self.new_accum}"


@dataclass(frozen=True)
class Decision:
    """Whether to start another attempt: ``retry`` with ``shrink`` and the next ``attempt``
    number, or not, with ``reason`` in words (empty when there was nothing to recover from)."""

    retry: bool
    reason: str = ""
    shrink: Shrink | None = None
    attempt: int = 1


def shrink(micro: int, accum: int) -> Shrink | None:
    """Half the micro batch, twice the accumulation; ``None`` at micro batch 1. An odd micro batch
    has no half that keeps the effective batch: it goes to its largest divisor at or below its
    half (6 -> 3 x2, 9 -> 3 x3, 5 -> 1 x5), so that micro x accumulation never changes."""
    if micro <= 1:
        return None
    new = next(d for d in range(micro // 2, 0, -1) if micro % d == 0)
    return Shrink(micro, accum, new, accum * (micro // new))


def attempt_of(rd: rundir.RunDir) -> Attempt | None:
    """``command.json``'s ``attempt`` (``n``, ``first``, ...) of a run started to recover; ``None``
    for a first attempt."""
    cmd = rd.command()
    return cmd.attempt if cmd is not None else None


def attempt_event(rd: rundir.RunDir) -> AttemptEvent | None:
    """The first event of a run started to recover (its supervisor writes it), from its
    ``command.json``; ``None`` for a first attempt."""
    a = attempt_of(rd)
    if a is None:
        return None
    return AttemptEvent(
        rank=-1,
        source="supervisor",
        attempt=a.n,
        first=a.first,
        previous=a.previous,
        oom_step=a.oom_step,
        oom_kind=a.oom_kind,
        from_step=a.from_step,
        batch=a.batch,
        accum=a.accum,
        message=a.message,
    )


#: why a Slurm job's node is not retried: its nodes would have to shrink together
SLURM_NOT_RETRIED = "a Slurm job's node is not retried on its own"


def check_slurm(profile: Profile) -> None:
    """One line when a Slurm job (``fttui submit``, or ``fttui run`` in a job step) asks for
    ``train.on_oom = "shrink"``: a node's OOM ends the job's step (Slurm stops the other nodes), and
    a node is not retried on its own (every node would have to restart at the halved micro batch
    together), so the setting would do nothing."""
    if profile.train.on_oom == "shrink":
        raise FttuiError(
            f"train.on_oom = shrink: {SLURM_NOT_RETRIED} (every node would have to restart together at the "
            "halved micro batch); run the job with train.on_oom = fail, after `fttui probe` of one node's "
            "micro batch"
        )


def decide(
    profile: Profile, final: FinalStatus, *, kind: str, attempt: int, phase: str | None, slurm: bool = False
) -> Decision:
    """The supervisor's choice when attempt ``attempt`` of a run ended with ``final``.

    ``profile``: the run's typed profile (``train.on_oom``, ``max_oom_retries``, ``batch_size``,
    ``grad_accum``); ``kind``: the launch's (only ``run`` retries: a probe looks for the OOM, a
    command's batch is its script's); ``phase``: the startup phase the run was in when it ended
    (``None`` once training stepped); ``slurm``: a node of a Slurm job (its nodes would have to
    shrink together)."""
    t = profile.train
    if final.status != "oom" or t.on_oom != "shrink":
        return Decision(False)
    if kind != "run":
        return Decision(False, f"a {kind} run is not retried")
    if slurm:
        return Decision(False, SLURM_NOT_RETRIED)
    if final.oom_kind not in RETRIED_KINDS:
        return Decision(
            False, f"an out of memory of kind {final.oom_kind or 'unknown'} does not depend on the micro batch"
        )
    if phase in _BEFORE_TRAINING:
        return Decision(
            False, f"out of memory before training ({phase.replace('-', ' ')}): a smaller micro batch would not help"
        )
    if attempt > t.max_oom_retries:
        return Decision(
            False,
            f"gave up after {t.max_oom_retries} retr{'y' if t.max_oom_retries == 1 else 'ies'} (train.max_oom_retries)",
        )
    s = shrink(int(t.batch_size), int(t.grad_accum))
    if s is None:
        return Decision(False, "the micro batch is 1 already: nothing left to shrink")
    return Decision(True, s.words(), s, attempt + 1)


def recovery_message(oom_step: int | None, s: Shrink, from_step: int) -> str:
    """``recovered from OOM at step 7: batch 8 -> 4, accumulation 2 -> 4, from the checkpoint of
    step 5``: what every view and the row say of an attempt. ``oom_step``: the step that ran out
    of memory (steps done before it + 1)."""
    where = f"at step {oom_step}" if oom_step is not None else "before its first step"
    start = f"from the checkpoint of step {from_step}" if from_step else "from the start: no checkpoint yet"
    return f"recovered from OOM {where}: {s.words()}, {start}"


def recovery_saves(profile: Profile, kind: str) -> bool:
    """The run saves checkpoints for recovery only: ``on_oom = "shrink"`` in a run that would keep
    none (``save`` ``end`` or ``none``). A probe or sweep never saves."""
    return kind == "run" and profile.train.on_oom == "shrink" and profile.train.save != "steps"


def _started_from(rd: rundir.RunDir) -> tuple[str, int] | None:
    """The checkpoint ``rd`` itself continued from, when it is still there: an attempt that ran
    out of memory before saving one of its own hands on the one it was given."""
    from pathlib import Path

    from fttui.core.run.launching.resume import is_checkpoint

    cmd = rd.command()
    given = cmd.resume if cmd is not None else None
    ck, step = (given.checkpoint, given.step) if given is not None else (None, None)
    return (ck, step) if isinstance(ck, str) and isinstance(step, int) and is_checkpoint(Path(ck)) else None


def prepare_next(rd: rundir.RunDir, final: FinalStatus, decision: Decision) -> rundir.RunDir:
    """The run directory of the next attempt (its supervisor is the caller): the profile ``rd``
    ran with, shrunk, continuing from ``rd``'s last checkpoint, else from the one ``rd`` itself
    continued from (from the start without either).
    FttuiError (one line) when it cannot be prepared (the profile no longer validates)."""
    from fttui.core.run.launching import launch
    from fttui.core.run.launching.resume import Resume, last_checkpoint

    s = decision.shrink
    prof = rd.profile()
    if s is None or prof is None:
        raise FttuiError(f"{rd.run_id}: nothing to continue (no profile.json or no shrink)")
    resolved = prof.with_settings({"train.batch_size": s.new_micro, "train.grad_accum": s.new_accum})
    found = last_checkpoint(rd) or _started_from(rd)
    resume = Resume(rd.run_id, resolved, found[0], found[1]) if found else None
    kind, group = rd.kind_and_group()
    done = final.error_step
    oom_step = done + 1 if isinstance(done, int) else None
    before = attempt_of(rd)
    first = (before.first if before is not None else None) or rd.run_id
    nxt = launch.prepare(resolved, kind=kind, group=group, resume=resume)
    command = nxt.command() or CommandFile()
    if resume is None:  # from the start: the row still names the attempt it continues
        command = replace(command, resume=ResumeFrom(run_id=rd.run_id, checkpoint=None, step=0))
    from_step = found[1] if found else 0
    attempt = Attempt(
        n=decision.attempt,
        first=first,
        previous=rd.run_id,
        oom_step=oom_step,
        oom_kind=final.oom_kind,
        from_step=from_step,
        batch=[s.micro, s.new_micro],
        accum=[s.accum, s.new_accum],
        message=recovery_message(oom_step, s, from_step),
    )
    nxt.write_command(replace(command, attempt=attempt))
    return nxt


def after_oom(
    rd: rundir.RunDir, profile: Profile | None, status: FinalStatus, snap: Any
) -> tuple[FinalStatus, rundir.RunDir | None, RetryEvent | None]:
    """The supervisor's step when its run ended with ``status`` (the run's ``profile.json`` and
    last snapshot): ``(status, next run, retry event)``. An OOM that is retried gets the next
    attempt's directory (:func:`prepare_next`), the ``retry`` event to write and an error that
    names it (``...; retried as RUN (attempt 2: batch 8 -> 4, accumulation 2 -> 4)``); one that is
    not says why (``...; not retried: ...``); any other status comes back as it is."""

    if status.status != "oom" or profile is None:
        return status, None, None
    command = rd.command()
    before = attempt_of(rd)
    decision = decide(
        profile,
        status,
        kind=rd.kind_and_group()[0],
        attempt=(before.n if before is not None else None) or 1,
        phase=snap.phase,
        slurm=command is not None and command.slurm is not None,
    )
    nxt = None
    if decision.retry:
        try:
            nxt = prepare_next(rd, status, decision)
        except (FttuiError, OSError, ValueError) as e:
            decision = Decision(False, f"the next attempt could not be prepared: {e}")
    if not decision.reason:
        return status, None, None
    said = f"{status.error}; " if status.error else ""
    if nxt is None:
        return replace(status, error=f"{said}not retried: {decision.reason}"), None, None
    words = f"retried as {nxt.run_id} (attempt {decision.attempt}: {decision.reason})"
    event = RetryEvent(rank=-1, source="supervisor", next_run=nxt.run_id, attempt=decision.attempt, message=words)
    return replace(status, error=said + words), nxt, event
