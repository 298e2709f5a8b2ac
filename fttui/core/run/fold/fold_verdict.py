"""The phases-and-verdict part of :class:`fttui.core.run.fold.state.RunState`: the status as the events
tell it (the highest of :data:`STATUS_ORDER`), the first error (an OOM wins over a generic one),
the exit, the supervisor's final status (which wins), stalls, the startup phases
(:mod:`fttui.core.run.fold.phases`), when the run started, its latest evaluation and checkpoint. Pure."""

from __future__ import annotations

from typing import Any

from fttui.core.base.event_records import AttemptEvent, ErrorEvent, EvalEvent, ExitEvent, RetryEvent, SaveEvent
from fttui.core.run.files.statusfile import FinalStatus
from fttui.core.run.fold.phases import PhaseFold
from fttui.core.run.fold.snapshot import to_int
from fttui.monitor import num

__all__ = ["VerdictFold", "STATUS_ORDER"]

# Higher wins when several sources disagree; a final status (set_final) always wins.
STATUS_ORDER = {"starting": 0, "running": 1, "completed": 2, "failed": 3, "oom": 4, "cancelled": 5}


class VerdictFold:
    def __init__(self) -> None:
        self.status = "starting"
        self.final: FinalStatus | None = None
        self.error: dict[str, Any] | None = None
        self.returncode: int | None = None
        self.signal: int | None = None
        self.started_t: float | None = None
        self.stalled = ""  # the stall's message while stalled (fttui.core.run.processes.guard.stall_message)
        self.hang: str | None = None  # where the latest stall's ranks were (fttui.core.run.processes.hang)
        self.phases = PhaseFold()
        self.eval: tuple[int, float] | None = None  # (step, loss) of the latest evaluation
        self.checkpoint_step: int | None = None
        self.attempt: AttemptEvent | None = None  # the run's attempt event (fttui.core.run.launching.oomretry)
        self.retried_as: str | None = None  # the next attempt's run id (its retry event)

    def set_status(self, status: str) -> None:
        if STATUS_ORDER.get(status, 0) > STATUS_ORDER.get(self.status, 0):
            self.status = status

    def started(self, t: float | None) -> None:
        """The launch or the first start event: elapsed time counts from the earliest."""
        if t is not None and (self.started_t is None or t < self.started_t):
            self.started_t = t

    def on_kept(self, ev: EvalEvent | SaveEvent | AttemptEvent | RetryEvent) -> None:
        match ev:
            case AttemptEvent():  # this run is an attempt that recovers from an OOM
                self.attempt = ev
            case RetryEvent():  # the attempt that continued this run
                self.retried_as = ev.next_run if isinstance(ev.next_run, str) else None
            case EvalEvent():  # rank 0's evaluation on the held-out split (the latest step wins)
                step, loss = to_int(ev.step), num(ev.eval_loss)
                if step is not None and loss is not None and (self.eval is None or step >= self.eval[0]):
                    self.eval = (step, loss)
            case SaveEvent():  # a saved checkpoint
                step = to_int(ev.step)
                if step is not None and ev.kind == "checkpoint":
                    self.checkpoint_step = max(step, self.checkpoint_step or 0)

    def on_error(self, ev: ErrorEvent) -> None:
        kind = ev.kind if ev.kind in ("oom", "error") else "error"
        err = {
            "kind": kind,
            "oom_kind": ev.oom_kind,
            "message": ev.message,
            "step": to_int(ev.step),
            "rank": to_int(ev.rank) or 0,
        }
        # keep the first error, except that an OOM explains a later/earlier generic error better
        if self.error is None or (self.error.get("kind") != "oom" and kind == "oom"):
            self.error = err
        self.set_status("oom" if kind == "oom" else "failed")

    def on_exit(self, ev: ExitEvent, step: int | None) -> None:
        rc = to_int(ev.returncode)
        sig = to_int(ev.signal)
        self.returncode, self.signal = rc, sig
        if (rc is not None and rc != 0) or sig:
            if self.error is None:
                msg = f"training killed by signal {sig}" if sig else f"training exited with code {rc}"
                self.error = {"kind": "error", "oom_kind": None, "message": msg, "step": step, "rank": None}
            self.set_status("failed")
        elif rc == 0 and self.status in ("starting", "running"):
            self.set_status("completed")

    def set_final(self, final: FinalStatus) -> None:
        self.final = final
        if self.returncode is None:
            self.returncode = final.returncode

    def current(self) -> str:
        return (self.final.status if self.final else None) or self.status

    def fields(self) -> dict[str, Any]:
        err = self.error or {}
        final = self.final
        phase, phase_since = self.phases.current()
        return dict(
            status=self.current(),
            error=dict(self.error) if self.error else None,
            returncode=self.returncode,
            signal=self.signal,
            final=final is not None,
            message=(final.error if final else None) or err.get("message"),
            oom_kind=(final.oom_kind if final else None) or err.get("oom_kind"),
            row_saved=final.row_saved if final else None,
            eval_loss=self.eval[1] if self.eval else None,
            eval_step=self.eval[0] if self.eval else None,
            checkpoint_step=self.checkpoint_step,
            started_t=self.started_t,
            stalled=bool(self.stalled),
            stall_message=self.stalled or None,
            hang=self.hang,
            phase=phase,
            phase_since=phase_since,
            startup_ended_t=self.phases.ended_t,
            phase_history=tuple(self.phases.history),
            attempt=(to_int(self.attempt.attempt) if self.attempt else None) or 1,
            recovered=self.attempt.message if self.attempt and isinstance(self.attempt.message, str) else None,
            retried_as=self.retried_as,
        )
