"""One line about a run, for lists (`fttui ls`, the app's live runs): id, profile, state, step of
total, ETA and start time, read cheaply from its run directory.

``run_brief`` reads ``profile.json``, ``command.json``, ``status.json`` and only the first and
the last ``HEAD_BYTES`` / ``TAIL_BYTES`` of ``events.jsonl`` (never the whole of a long run's
file), and folds those events with the same ``RunState`` the live views use: the start events
(total steps, start time, the warm-up reference step) sit at the head, the latest steps at the
tail, and the steady seconds per step only needs those two ends (cumulative ``train_time``), so
the ETA is the one the run screen shows. ``live_briefs`` lists the live runs (supervised, or
unsupervised with the training still at work), newest first; finished runs cost a ``stat`` each.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from fttui.core.base import fmt
from fttui.core.run.files.events import read_events_window
from fttui.core.run.files.rundir import RunDir, list_runs
from fttui.core.run.fold.state import RunState
from fttui.core.run.processes import liveness

HEAD_BYTES = 64 * 1024
TAIL_BYTES = 64 * 1024

__all__ = ["RunBrief", "run_brief", "live_briefs", "is_live_label", "HEAD_BYTES", "TAIL_BYTES"]


@dataclass(frozen=True)
class RunBrief:
    """What a list shows about one run. ``state`` is ``liveness.state_label(rd)`` ("running",
    "running (unsupervised)", a final status, "lost"); ``started`` is epoch seconds."""

    run_id: str
    path: Path
    profile: str
    kind: str
    state: str
    step: int | None
    total_steps: int | None
    eta_s: float | None
    started: float | None
    eta_source: str | None = None  # "forecast" until the measured rate is steady
    # out of memory, recovered (fttui.core.run.launching.oomretry): "attempt 2: recovered from OOM at step
    # 7: batch 8 -> 4, ..." for an attempt that continues a run, "retried as RUN" for the run
    note: str = ""

    memory_warning: str | None = None  # the creep warning (fttui.core.run.fold.memtrend), the run's first

    def state_text(self) -> str:
        """The state with the note: ``completed (attempt 2: recovered from OOM at step 7: ...)``;
        and the memory creep warning in short while the run is live: ``running, MEMORY CREEP: rank
        0 RSS +32 MiB/step: out of memory in ~20 steps``."""
        from fttui.core.run.fold.insight import warning_short

        text = f"{self.state} ({self.note})" if self.note else self.state
        if self.live and self.memory_warning:
            text += f", MEMORY CREEP: {warning_short(self.memory_warning)}"
        return text

    @property
    def live(self) -> bool:
        return is_live_label(self.state)

    def step_text(self) -> str:
        """``12/20``, ``12`` (total unknown) or ``-`` (no step yet)."""
        if self.step is None:
            return "-" if self.total_steps is None else f"0/{self.total_steps}"
        return f"{self.step}/{self.total_steps}" if self.total_steps else str(self.step)

    def eta_text(self) -> str:
        """The time left of a live run (``MM:SS`` or ``H:MM:SS``); ``-`` otherwise."""
        return (fmt.eta(self.eta_s, self.eta_source) or "-") if self.live and self.eta_s is not None else "-"

    def started_text(self) -> str:
        """Local start time, ``YYYY-MM-DD HH:MM``; ``-`` when unknown."""
        if self.started is None:
            return "-"
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(self.started))


#: the first word of a live run's state: its own (``running``, ``running (unsupervised)``) or a
#: Slurm job's (``PENDING (Resources), start ...``, ``RUNNING on n[1-2]``, ``COMPLETING``, ...)
_LIVE_WORDS = ("running", "pending", "configuring", "completing", "suspended", "requeued", "resizing")


def is_live_label(state: str) -> bool:
    return state.split(" ", 1)[0].lower() in _LIVE_WORDS


def run_brief(rd: RunDir, state: str | None = None) -> RunBrief:
    """The brief of one run directory. ``state``: its ``state_label()`` when the caller has it
    already (it costs a process check for a run without ``status.json``)."""
    prof = rd.profile()
    cmd = rd.command()
    events_of = rd
    if rd.is_slurm_job():  # a Slurm job's steps and ETA are its node 0's (the lowest rank's)
        from fttui.core.run.slurm.slurmjob import node0

        events_of = node0(rd) or rd
    fold = RunState.for_profile(prof, history=2)
    fold.apply_all(read_events_window(events_of.events_path, HEAD_BYTES, TAIL_BYTES))
    final = rd.final_status()
    if final is not None:
        fold.set_final(final)
    snap = fold.snapshot()
    started = snap.started_t
    if started is None:
        started = float(cmd.created) if cmd is not None and cmd.created is not None else None
    kind, _group = rd.kind_and_group()
    name = prof.name if prof is not None else None
    return RunBrief(
        run_id=rd.run_id,
        path=rd.path,
        profile=str(name or "?"),
        kind=kind,
        state=state if state is not None else liveness.state_label(rd),
        step=snap.step,
        total_steps=snap.total_steps,
        eta_s=snap.eta_s,
        started=started,
        eta_source=snap.eta_source,
        note=recovery_note(snap),
        memory_warning=snap.memory_warning,
    )


def recovery_note(snap) -> str:
    """What a list says of a run in a chain that recovered from out of memory; "" otherwise."""
    if snap.retried_as:
        return f"retried as {snap.retried_as}"
    return f"attempt {snap.attempt}: {snap.recovered}" if snap.recovered else ""


def live_briefs(runs: list[RunDir] | None = None) -> list[RunBrief]:
    """The briefs of the live runs among ``runs`` (default: every run directory), newest first.
    A run with ``status.json`` is finished: it costs a ``stat``; a vanished directory is skipped."""
    out = []
    for rd in reversed(runs if runs is not None else list_runs()):
        try:
            if rd.status_path.exists():
                continue
            label = liveness.state_label(rd)
            if is_live_label(label):
                out.append(run_brief(rd, label))
        except OSError:
            continue
    return out
