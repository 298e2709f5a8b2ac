"""``fttui run --resume RUN``: which run, its resolved profile and the last checkpoint it saved.

A run with ``train.save = "steps"`` leaves a Trainer checkpoint (model or adapter, optimizer,
scheduler, RNG states, ``trainer_state.json``) every ``save_steps`` steps; each one it finished
is a ``save`` event (``kind`` ``checkpoint``) in its ``events.jsonl``. Resuming launches a new run
(new id) with the same resolved profile, the worker continues with the Trainer's
``resume_from_checkpoint`` from the latest of those checkpoints that is still on disk, and the new
run's ``command.json`` names the run and the step (``resume``), which its row keeps
(``resumed_from``, ``resumed_step``). Everything here is checked before anything is written.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from fttui.core.base.errors import FttuiError
from fttui.core.profiles.typed import Profile
from fttui.core.run.files import rundir
from fttui.core.run.files.events import SaveEvent, read_events
from fttui.core.run.processes import liveness

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


class Resume(NamedTuple):
    run_id: str  # the run resumed
    profile: Profile  # its resolved profile, as it ran
    checkpoint: str  # the checkpoint folder to continue from
    step: int  # the optimizer step of that checkpoint


def is_checkpoint(path: Path) -> bool:
    """A finished Trainer checkpoint: a ``checkpoint-N`` folder with its ``trainer_state.json``
    (the Trainer writes it after the weights and optimizer states)."""
    return _CHECKPOINT.match(path.name) is not None and (path / "trainer_state.json").is_file()


def last_checkpoint(rd: rundir.RunDir) -> tuple[str, int] | None:
    """The latest checkpoint the run said it saved (``save`` events) that is still on disk."""
    found: list[tuple[int, str]] = []
    for ev in read_events(rd.events_path):
        if not isinstance(ev, SaveEvent) or ev.kind != "checkpoint" or not isinstance(ev.path, str):
            continue
        path = Path(ev.path)
        m = _CHECKPOINT.match(path.name)
        if m and is_checkpoint(path):
            found.append((int(m.group(1)), str(path)))
    if not found:
        return None
    step, latest = max(found)
    return latest, step


def find_run(ref: str) -> rundir.RunDir:
    """A run by id or unique id prefix; FttuiError (one line) when none or several match."""
    runs = rundir.list_runs()
    exact = [r for r in runs if r.run_id == ref]
    matches = exact or [r for r in runs if r.run_id.startswith(ref)]
    if not matches:
        raise FttuiError(f"--resume {ref}: no run matches (see `fttui ls`)")
    if len(matches) > 1:
        raise FttuiError(
            f"--resume {ref}: {len(matches)} runs match ({', '.join(r.run_id for r in matches[:3])}"
            f"{' ...' if len(matches) > 3 else ''}); give more of the run id"
        )
    return matches[0]


def plan_resume(ref: str) -> Resume:
    """What ``fttui run --resume REF`` launches; FttuiError (one line, exit 2) when the run is
    unknown, still running, or left no checkpoint."""
    rd = find_run(ref)
    prof = rd.profile()
    if prof is None:
        raise FttuiError(f"--resume {rd.run_id}: its profile.json is missing or unreadable")
    if liveness.is_live(rd):
        raise FttuiError(f"--resume {rd.run_id}: the run is still running; `fttui cancel {rd.run_id}` first")
    found = last_checkpoint(rd)
    if found is None:
        save = prof.train.save
        raise FttuiError(
            f"--resume {rd.run_id}: the run saved no checkpoint to continue from (train.save = "
            f'"{save}"; a run saves them with train.save = "steps")'
        )
    # A profile.json written before a key existed gets the key's default (a run that saved a
    # checkpoint was written with every key this version reads): RunDir.profile normalises it.
    return Resume(rd.run_id, prof, found[0], found[1])


__all__ = ["Resume", "plan_resume", "last_checkpoint", "find_run", "is_checkpoint"]
