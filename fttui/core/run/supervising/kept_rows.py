"""Rows kept in ``row.json`` only: a finished run whose results store could not take its row
(corrupt, read-only, locked too long; ``status.json``'s ``row_saved`` false) keeps it in its run
directory, and the next command that opens the store stores it (:func:`store_kept_rows`, from
``recover_all``); :func:`unsaved_line` is the line a view ends such a run with.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import replace

from fttui.core.run.files import rundir
from fttui.core.run.files.runlock import release, take

log = logging.getLogger(__name__)


def store_kept_rows(runs: list[rundir.RunDir], errors: list[str] | None = None) -> list[rundir.RunDir]:
    """Store the rows that finished runs kept in ``row.json`` only because the store could not
    take them (``status.json``'s ``row_saved`` false: the store was corrupt, read-only, locked
    too long), and mark them saved; returns the runs whose row this stored. Cheap when there is
    nothing to do (each run's ``status.json`` is read; the store is opened only for a run that
    waits), idempotent (a row the store has already, imported or stored by another command, is
    kept as it is: the status is only marked) and safe with several commands at once (the
    run's recovery lock, and the status read again under it). A Slurm node's row is
    :func:`settle_slurm`'s. ``errors`` gets the store's one-line error when it still cannot be
    opened or written."""
    waiting = []
    for rd in runs:
        try:
            st = rd.final_status()
            if st is not None and st.row_saved is False and rd.row_path.exists() and rd.slurm() is None:
                waiting.append(rd)
        except OSError:
            continue
    if not waiting:
        return []
    from fttui.core.base.errors import StoreError
    from fttui.core.results.store import Store

    stored = []
    try:
        with Store() as db:
            for rd in waiting:
                if not take(rd):  # another command is at it
                    continue
                try:
                    st = rd.final_status()
                    row = rd.row()
                    if st is None or st.row_saved is not False or row is None or row.get("run_id") != rd.run_id:
                        continue
                    if db.get(rd.run_id) is None:
                        db.put(row)
                    rundir.write_json_atomic(rd.status_path, replace(st, row_saved=True).to_dict())
                    stored.append(rd)
                    log.debug("run %s: its kept row.json stored", rd.run_id)
                except OSError as e:
                    print(f"fttui: cannot mark the row of {rd.run_id} stored: {e}", file=sys.stderr)
                finally:
                    release(rd)
    except StoreError as e:
        if errors is not None:
            errors.append(str(e))
    return stored


def unsaved_line(rd: rundir.RunDir) -> str | None:
    """The line a view ends a run with when the store did not take its row (``row_saved``
    false), after trying once more (:func:`store_kept_rows`): why, where the row is, and how to
    mend the store; ``None`` when the row is stored (or is not the store's business: a Slurm
    node's until its job ends, a watch that records none)."""
    st = rd.final_status()
    if st is None or st.row_saved is not False or rd.slurm() is not None:
        return None
    errors: list[str] = []
    if store_kept_rows([rd], errors):
        return None
    from fttui.core.base import paths

    why = errors[0] if errors else f"{paths.store_path()}: another command is storing it now"
    if not rd.row_path.exists():
        return f"ROW NOT SAVED in the results store, nor in the run directory: {why}"
    return (
        f"ROW NOT SAVED in the results store (kept in {rd.row_path}): {why}; "
        "then the next `fttui results` (or `fttui ls`, the app) stores it, nothing to run again"
    )


__all__ = ["store_kept_rows", "unsaved_line"]
