"""`fttui attach` and `fttui cancel` of a Slurm job (`fttui submit`, or a node's run of one).

attach: Slurm's state while the job waits (``PENDING (Resources), start ...``), then one line per
node as the job runs (its step, throughput, host memory and cards, read from that node's run
directory on the shared filesystem), then each node's row and the job's verdict once Slurm says
the job is over. cancel: ``scancel``, then the same end.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from fttui.core.base.constants import EXIT_CODES, EXIT_ERROR, EXIT_INTERRUPTED
from fttui.core.run.files.rundir import RunDir
from fttui.core.run.files.runfiles import SlurmJobFile, SlurmNodeJob
from fttui.core.run.files.statusfile import FinalStatus
from fttui.core.run.processes import liveness

#: how long after Slurm ended the job its nodes' statuses may take to appear (a supervisor's grace)
SETTLE_S = 120.0


def job_dir_of(rd: RunDir) -> RunDir:
    """The job directory of a node's run (``fttui submit``'s), else the run itself."""
    node = rd.slurm_node()
    job_run = node.job_run if node is not None else None
    if rd.is_slurm_job() or not job_run:
        return rd
    job = RunDir(rd.path.parent / job_run)
    return job if job.exists() else rd


def _job_id(rd: RunDir) -> str | None:
    """The Slurm job id of a job directory or of a node's run (``None`` before sbatch answered)."""
    sl = rd.slurm()
    return sl.job_id if sl is not None else None


def _as_dict(record: SlurmNodeJob | SlurmJobFile | FinalStatus | None) -> dict[str, Any] | None:
    """A run file's record as the file holds it, for a JSON document; ``None`` for none."""
    return record.to_dict() if record is not None else None


def _members(job: RunDir) -> list[RunDir]:
    from fttui.core.run.slurm.slurmjob import job_nodes

    if job.is_slurm_job():
        return job_nodes(job)
    return [job]


def settle(job: RunDir, timeout: float = SETTLE_S) -> bool:
    """Wait until Slurm says the job is over and every node's run (and the job directory) has
    its status with Slurm's cause; ``True`` when it did within ``timeout``."""
    from fttui.core.run.supervising.recover import recover_all

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        recover_all([*_members(job), job] if job.is_slurm_job() else [job])
        # a job directory gets its status once every node's has one (their rows stored first)
        st = job.final_status()
        if st is not None and (job.is_slurm_job() or st.row_saved):
            return True
        time.sleep(1.0)
    return False


def _shown(row: dict, key: str) -> Any:
    """A row's figure as a summary line says it: ``-`` for none (never ``None``)."""
    value = row.get(key)
    return "-" if value is None else value


def summary(job: RunDir) -> list[str]:
    """The job's verdict and one line per node's row."""
    st = job.final_status()
    said = st.status if st is not None else "not finished"
    lines = [f"job {job.run_id}: {said}" + (f" ({st.error})" if st is not None and st.error else "")]
    total = 0
    for r in _members(job):
        row = r.row() or {}
        sl = (row.get("env") or {}).get("slurm") or {}
        total += int(row.get("samples") or 0)
        lines.append(
            f"  node {sl.get('node_rank', '?')} ({sl.get('node', '?')}): {r.run_id}  {row.get('status', '-')}"
            f"  steps {_shown(row, 'steps')}/{_shown(row, 'total_steps')}  samples {_shown(row, 'samples')}"
            f"  samples/s {_shown(row, 'samples_per_s')}  peak host RSS {_shown(row, 'peak_host_rss_mb')} MB"
            + (f"  error: {row['error']}" if row.get("error") else "")
        )
    if job.is_slurm_job():
        lines.append(f"  samples of the job (the nodes' sum): {total}")
    return lines


def job_json(job: RunDir) -> str:
    return json.dumps(
        {
            "run_id": job.run_id,
            "run_dir": str(job.path),
            "slurm": _as_dict(job.slurm()),
            "status": _as_dict(job.final_status()),
            "nodes": [
                {"run_id": r.run_id, "status": _as_dict(r.final_status()), "row": r.row()}
                for r in _members(job)
                if r is not job
            ],
        },
        indent=1,
        default=str,
    )


def cancel_job(rd: RunDir, as_json: bool) -> int:
    from fttui.core.run.slurm.executor import SlurmJob

    job = job_dir_of(rd)
    SlurmJob(rd=job).cancel()
    print(f"cancelling Slurm job {_job_id(job)} ({job.run_id}): scancel ...", file=sys.stderr)
    done = settle(job)
    if as_json:
        print(job_json(job))
    else:
        for line in summary(job):
            print(line)
    return 0 if done else 1


def _out(line: str, as_json: bool) -> None:
    print(line, file=sys.stderr if as_json else sys.stdout, flush=True)


def attach_job(rd: RunDir, as_json: bool = False, interval: float = 2.0) -> int:
    """Follow a Slurm job in plain lines until it is over (Ctrl-C detaches; the job goes on)."""
    from fttui.cli.live import progress_line
    from fttui.core.run.control.watch import RunFollower

    job = job_dir_of(rd)
    jid = _job_id(job)
    _out(f"fttui: Slurm job {jid}, run {job.run_id} ({job.path})", as_json)
    said: str | None = None
    followers: dict[str, RunFollower] = {}
    printed: dict[str, str] = {}
    try:
        while not job.has_status():
            label = liveness.state_label(job)
            if label != said:
                said = label
                _out(f"slurm job {jid}: {label}", as_json)
            for r in _members(job):
                if r is job:
                    continue
                f = followers.setdefault(r.run_id, RunFollower(r))
                snap = f.poll()
                node = r.slurm_node()
                text = progress_line(snap) if snap.step else snap.status
                if printed.get(r.run_id) != text:
                    printed[r.run_id] = text
                    rank, name = (node.node_rank, node.node) if node is not None else (None, None)
                    _out(f"node {rank} ({name}): {text}", as_json)
            from fttui.core.run.control.brief import is_live_label

            if not is_live_label(label):
                break
            time.sleep(interval)
    except KeyboardInterrupt:
        print(f"\nfttui: detached; the job goes on: fttui attach {job.run_id}", file=sys.stderr)
        return EXIT_INTERRUPTED
    settle(job)
    if as_json:
        print(job_json(job))
    else:
        for line in summary(job):
            print(line, flush=True)
    final = job.final_status()
    return EXIT_CODES.get(str(final.status if final is not None else None), EXIT_ERROR)


__all__ = ["attach_job", "cancel_job", "settle", "summary", "job_dir_of", "job_json"]
