"""The one status line every view shows (how a run ended is ``status.json``'s record,
:class:`~fttui.core.run.files.statusfile.FinalStatus`, folded into the snapshot). ``status_line`` turns
a snapshot plus the facts only a view knows (the run directory is gone, the supervisor is lost, a
cancel was asked) into the text and its kind (the colour class); the CLI's live lines and the
app's status bar both print it.
"""

from __future__ import annotations

from typing import NamedTuple

from fttui.core.base.constants import FINAL_STATUSES
from fttui.core.run.fold.phases import mmss, phase_text
from fttui.core.run.fold.ranks import clash_text
from fttui.core.run.fold.snapshot import RunSnapshot

RUNNING = "running"  # the kind of every status line that is not a final status


class StatusLine(NamedTuple):
    """A status line: its ``text`` and its ``kind``, "running" or one of ``FINAL_STATUSES``
    (the view's colour class)."""

    text: str
    kind: str


GONE = StatusLine("RUN DIRECTORY DELETED: nothing more to show (the run may still be going)", "failed")
LOST = StatusLine("LOST: the supervisor is gone without writing a status", "failed")
#: what the app's status bar adds when the results store did not take a finished run's row
ROW_NOT_SAVED = (
    "ROW NOT SAVED in the results store: kept in the run's row.json, stored once the store opens"
    " (`fttui results` names the fix)"
)
CANCELLING = StatusLine("CANCELLING: waiting for the supervisor to stop the run", "cancelled")


def status_line(
    snap: RunSnapshot | None, *, gone: bool = False, lost: bool = False, cancelling: bool = False, detail: bool = False
) -> StatusLine:
    """The run's status in one line, for every view.

    ``gone``: the run directory was deleted; ``lost``: the supervisor died without a final
    status; ``cancelling``: this view asked for a cancel (the last two only count while the
    snapshot has no final status). ``detail`` (the app's status bar) also says that a starting
    run is loading the model, at which step a failed run failed and that the results store did
    not take a finished run's row (``snap.row_saved`` false: :data:`ROW_NOT_SAVED`). A user
    command's run (``snap.command``) has no model phases of fttui's: once launched and until it
    reports a training start it reads ``RUNNING: the command runs; no training step reported
    yet``. Once the worker or the
    samples name a startup phase (``snap.phase``), every view shows it until the first step:
    ``STARTING: building ops (01:12)``, the time since the phase began (``snap.phase_since``) up
    to the latest time the state has seen (``snap.last_t``). A running run close to an OOM on a
    card says so: ``RUNNING, NEAR OOM: GPU 2: 3 allocator retries`` (``snap.near_oom_reason``),
    and one whose memory creeps towards a limit: ``RUNNING, MEMORY CREEP: rank 0 reserved +40
    MiB/step: out of memory in ~120 steps (...)`` (``snap.memory_warning``).
    An attempt that recovers from an OOM says from what: ``RUNNING (attempt 2: recovered from OOM
    at step 7: batch 8 -> 4, accumulation 2 -> 4, from the checkpoint of step 5)``.
    """
    if gone:
        return GONE
    if snap is None:
        return StatusLine("STARTING", RUNNING)
    st = snap.status
    kind = st if st in FINAL_STATUSES else RUNNING
    if not snap.final:
        if lost:
            return LOST
        if cancelling:
            return CANCELLING
        if snap.phase and st in ("starting", "running") and snap.step is None:
            return StatusLine(f"STARTING: {phase_text(snap.phase)} ({phase_elapsed(snap)})", RUNNING)
        if snap.command and st == "starting":  # fttui's worker is not there to load a model
            if snap.started_t is None:
                return StatusLine("STARTING: launching the command", RUNNING)
            return StatusLine("RUNNING: the command runs; no training step reported yet", RUNNING)
        if detail and st == "starting":
            return StatusLine("STARTING: loading the model", RUNNING)
    msg = snap.message or ""
    if st == "oom":
        text = f"OUT OF MEMORY ({snap.oom_kind or 'unknown'}): {msg}"
    elif st in ("failed", "cancelled", "lost", "watched"):
        text = f"{st.upper()}: {msg}"
    elif st == "completed" and msg:  # a command that exited 0 and reported no training says so
        text = f"COMPLETED: {msg}"
    elif snap.stalled and st == "running":
        text = f"RUNNING, STALLED: {snap.stall_message or 'no step for the stall timeout'}" + (
            f"; where: {snap.hang}" if snap.hang else ""
        )
    elif snap.near_oom and st == "running":  # fttui.core.run.fold.perf: warn before the OOM
        text = f"RUNNING, NEAR OOM: {snap.near_oom_reason}"
    elif snap.memory_warning and st == "running":  # fttui.core.run.fold.memtrend: a trend that reaches a limit
        text = f"RUNNING, MEMORY CREEP: {snap.memory_warning}"
    else:
        text = st.upper()
    if detail and st == "failed" and snap.error and snap.error.get("step") is not None:
        text += f" (step {snap.error['step']})"
    if detail and snap.final and snap.row_saved is False:  # the CLI's summary ends with its own line
        text += f"; {ROW_NOT_SAVED}"
    clash = clash_text(snap.rank_clash)
    if clash:  # two processes claimed one rank (fttui.core.run.fold.ranks): every view says so
        text += f", {clash}" if text == st.upper() else f"; {clash}"
    if snap.recovered:  # an attempt that continues a run which ran out of memory (fttui.core.run.launching.oomretry)
        text += f" (attempt {snap.attempt}: {snap.recovered})"
    return StatusLine(text, kind)


def phase_elapsed(snap: RunSnapshot) -> str:
    """``mm:ss`` in the snapshot's startup phase: from ``phase_since`` to ``last_t`` (the
    snapshot's own times, so a view and a test read the same)."""
    if snap.phase_since is None or snap.last_t is None:
        return mmss(None)
    return mmss(snap.last_t - snap.phase_since)


__all__ = ["StatusLine", "status_line", "phase_elapsed", "RUNNING"]
