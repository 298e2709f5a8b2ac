"""Run directories: layout, creation, discovery and liveness (see docs/architecture.md)."""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import time
from pathlib import Path
from typing import Any

from fttui.core.base import paths
from fttui.core.base.errors import FttuiError
from fttui.core.base.redact import mask
from fttui.core.profiles.frozen import thaw
from fttui.core.profiles.stored import stored_profile
from fttui.core.profiles.typed import Profile
from fttui.core.run.runfiles import CommandFile, ExitFile, ProcessId, SlurmJobFile, SlurmNodeJob, SupervisorFile
from fttui.core.run.status import FinalStatus

log = logging.getLogger(__name__)


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON so that a reader sees the old file or the new one, never half of one; secrets
    masked (:func:`fttui.core.base.redact.mask`)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(mask(obj), f, indent=2, sort_keys=True, default=str)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)  # a full disk leaves no half file behind
        except OSError:
            pass
        raise


def read_json(path: Path) -> Any | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None


def new_run_id(profile_name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in profile_name)[:48]
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{safe}-{secrets.token_hex(2)}"


def pid_alive(pid: int | None) -> bool:
    if not isinstance(pid, int) or isinstance(pid, bool) or not 1 < pid <= 1 << 22:
        return False  # 0, 1, -1 (kill(-1, 0) asks about every process), 10^20 (OverflowError)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) counts as dead.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


#: How far two readings of one process's start time (psutil's ``create_time``) may differ: it is
#: the boot time of ``/proc/stat``, whole seconds that the kernel derives anew at each read and
#: that step by one now and then, plus the start in clock ticks; a run's CLI once took its live
#: supervisor for a dead one across such a step (and reported it gone without a status).
CREATE_TIME_SLACK_S = 2.0


def process_matches(pid: int | None, create_time: float | None, ident: ProcessId | None = None) -> bool:
    """``pid`` is alive and is the process started then: its start in clock ticks on this boot
    (``ident``, :func:`fttui.core.run.guard.identity`) where recorded, else (older run
    directories) its ``create_time`` within :data:`CREATE_TIME_SLACK_S`."""
    if not isinstance(pid, int) or not pid_alive(pid):
        return False
    if ident is not None and ident.start_ticks is not None:
        from fttui.core.run.guard import same_process

        return same_process(pid, ident) is not False
    if not isinstance(create_time, (int, float)):
        return False  # nothing says which process it was: a live pid may be anyone's (pid 1, a reused one)
    import psutil

    try:
        return abs(psutil.Process(pid).create_time() - create_time) < CREATE_TIME_SLACK_S
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def group_members(pgid: int, exclude: int | None = None) -> list:
    """The live (not zombie) processes of process group ``pgid``, ``exclude`` (a pid) left out."""
    import psutil

    out = []
    for p in psutil.process_iter():
        try:
            if p.pid != exclude and os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.Error, OSError):
            pass
    return out


def group_alive(pgid: int) -> bool:
    """Some process of process group ``pgid`` is alive (zombies count as gone)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return bool(group_members(pgid))


class RunDir:
    """A run directory and the files in it."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    @property
    def run_id(self) -> str:
        return self.path.name

    # files
    @property
    def profile_path(self) -> Path:
        return self.path / "profile.json"

    @property
    def command_path(self) -> Path:
        return self.path / "command.json"

    @property
    def supervisor_path(self) -> Path:
        return self.path / "supervisor.json"

    @property
    def events_path(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def samples_path(self) -> Path:
        return self.path / "samples.jsonl"

    @property
    def log_path(self) -> Path:
        return self.path / "train.log"

    @property
    def status_path(self) -> Path:
        return self.path / "status.json"

    @property
    def row_path(self) -> Path:
        return self.path / "row.json"

    @property
    def cancel_path(self) -> Path:
        return self.path / "cancel"

    @property
    def exit_path(self) -> Path:
        """How the training exited, written by its log writer (:mod:`fttui.core.run.logtee`)."""
        return self.path / "exit.json"

    # contents
    def profile(self) -> Profile | None:
        """The run's resolved profile, typed (``profile.json`` read back by
        :func:`~fttui.core.profiles.stored.stored_profile`, the one place where the shapes older
        runs wrote are normalised); ``None`` when the file is missing or no JSON object."""
        raw = self.profile_json()
        return stored_profile(raw) if raw is not None else None

    def profile_json(self) -> dict | None:
        """``profile.json`` as written, for what it holds besides the profile: a watch run's
        ``watch`` (pid, record), an old directory's ``_kind`` / ``_group``."""
        raw = read_json(self.profile_path)
        return raw if isinstance(raw, dict) else None

    def watch_spec(self) -> dict:
        """A watch run's (``fttui watch --pid``) process and options; ``{}`` for other runs."""
        spec = (self.profile_json() or {}).get("watch")
        return spec if isinstance(spec, dict) else {}

    def command(self) -> CommandFile | None:
        """``command.json`` (:class:`~fttui.core.run.runfiles.CommandFile`); ``None`` when missing."""
        return CommandFile.from_dict(read_json(self.command_path))

    def write_command(self, command: CommandFile) -> None:
        write_json_atomic(self.command_path, command.to_dict())

    def kind_and_group(self) -> tuple[str, str | None]:
        """The launch's kind (``run``, ``probe``, ``sweep``) and group id, from command.json (run
        directories written before they moved there kept them in profile.json as ``_kind``,
        ``_group``)."""
        cmd = self.command()
        if cmd is not None and cmd.kind is not None:
            return cmd.kind, cmd.group
        prof = self.profile_json() or {}
        return str(prof.get("_kind") or "run"), prof.get("_group")

    def supervisor(self) -> SupervisorFile | None:
        """``supervisor.json`` (:class:`~fttui.core.run.runfiles.SupervisorFile`); ``None`` before
        the supervisor wrote it."""
        return SupervisorFile.from_dict(read_json(self.supervisor_path))

    def write_supervisor(self, sup: SupervisorFile) -> None:
        write_json_atomic(self.supervisor_path, sup.to_dict())

    def slurm_node(self) -> SlurmNodeJob | None:
        """A Slurm node's run: ``command.json``'s ``slurm`` (:mod:`fttui.core.run.slurmnode`);
        ``None`` for any other run."""
        cmd = self.command()
        return cmd.slurm if cmd is not None else None

    def slurm(self) -> SlurmNodeJob | SlurmJobFile | None:
        """The Slurm job this directory belongs to: a node's run (``command.json``'s ``slurm``,
        :mod:`fttui.core.run.slurmnode`) or a submitted job (``slurm.json``,
        :mod:`fttui.core.run.slurmjob`); ``None`` for a run of this machine alone."""
        node = self.slurm_node()
        return node if node is not None else SlurmJobFile.from_dict(read_json(self.path / "slurm.json"))

    def is_slurm_job(self) -> bool:
        """A job directory of ``fttui submit`` (its nodes' runs are directories of their own)."""
        return self.kind_and_group()[0] == "slurm"

    def slurm_state(self):
        """Slurm's :class:`~fttui.monitor.slurm.JobState` of the job this directory belongs to;
        ``None`` when it is no Slurm job's, not submitted yet, unknown to Slurm, or there is no
        Slurm client here."""
        job = self.slurm()
        if job is None or not job.job_id:
            return None
        from fttui.monitor.slurm import SlurmUnavailable, job_state

        try:
            return job_state(job.job_id)
        except SlurmUnavailable:
            return None

    def _slurm_live(self) -> bool | None:
        """Whether the job still runs or waits, as Slurm says (a node's processes may be on
        another machine: their pids mean nothing here); ``None`` when this is no Slurm job's or
        there is no Slurm client to ask."""
        sl = self.slurm()
        if sl is None:
            return None
        if not sl.job_id:  # fttui submit has not had sbatch's answer yet
            return None
        from fttui.monitor.slurm import SlurmUnavailable, job_state

        try:
            st = job_state(sl.job_id)
        except SlurmUnavailable:
            return None
        return bool(st is not None and st.live)

    def _status_json(self) -> dict | None:
        """``status.json`` as written (``None`` while the run is live, and when the file is no
        object with a text ``status``: a damaged file reads as a missing one, which recovery puts
        back from the stored row)."""
        st = read_json(self.status_path)
        return st if isinstance(st, dict) and isinstance(st.get("status"), str) else None

    def has_status(self) -> bool:
        """A readable final status is written (a damaged ``status.json`` is none: recovery
        writes it again, from the stored row when there is one)."""
        return self._status_json() is not None

    def final_status(self) -> FinalStatus | None:
        """``status.json`` read as the run-status contract (``None`` while the run is live, and
        when the file is no object with a text ``status``)."""
        return FinalStatus.from_dict(self._status_json())

    def row(self) -> dict[str, Any] | None:
        """``row.json``: the summary row as its supervisor (or recovery) folded it, the store's
        columns (:data:`fttui.core.results.columns.FIGURES`); ``None`` before it is written."""
        row = read_json(self.row_path)
        return row if isinstance(row, dict) else None

    def exists(self) -> bool:
        return self.path.is_dir()

    def exit_info(self) -> ExitFile | None:
        """``exit.json`` (:class:`~fttui.core.run.runfiles.ExitFile`: ``returncode``, ``t``) once
        the training has exited, else ``None``."""
        return ExitFile.from_dict(read_json(self.exit_path))

    def write_exit(self, info: ExitFile) -> None:
        write_json_atomic(self.exit_path, info.to_dict())

    def supervisor_alive(self) -> bool:
        """The supervisor of supervisor.json is running: its pid is alive and was started when
        the supervisor was (a pid reused by another process does not count)."""
        sup = self.supervisor()
        return sup is not None and process_matches(sup.pid, sup.create_time, sup.id)

    def training_alive(self) -> bool:
        """The training's process group (supervisor.json's ``train_pgid``) still has a process and
        its log writer has not recorded an exit. The group's leader is checked against its start
        time and boot (``train_id``): after a reboot or a reused pid, another group is not it."""
        sup = self.supervisor()
        pgid = sup.train_pgid if sup is not None else None
        if sup is None or pgid is None or pgid <= 1 or self.exit_path.exists():
            return False
        if sup.train_id is None:  # nothing says which group it was: it may be anyone's now (issue 36:
            return False  # `fttui cancel` of a copied run directory signalled an unrelated group)
        from fttui.core.run.guard import same_process

        # None: the leader is gone (its group's other processes keep the id: never reused while
        # they live)
        if same_process(pgid, sup.train_id) is False:
            return False
        return group_alive(pgid)

    def is_live(self) -> bool:
        """No final status yet and someone is at work: the supervisor, or (when it died) the
        training it started."""
        if self.has_status():
            return False
        slurm_live = self._slurm_live()
        if slurm_live is not None:
            return slurm_live
        sup = self.supervisor()
        if sup is None:
            # Created but the supervisor has not written its pid yet: live for a short while.
            try:
                return time.time() - self.path.stat().st_mtime < 30
            except OSError:
                return False
        return self.supervisor_alive() or self.training_alive()

    def state_label(self) -> str:
        st = self.final_status()
        if st is not None:
            return st.status
        if self.is_slurm_job():
            job = self.slurm_state()
            if job is not None:
                return job.label() if job.live else f"ended ({job.state})"
        if not self.is_live():
            return "lost"
        if self.slurm() is not None:  # a Slurm node's supervisor may be on another machine: Slurm said it runs
            return "running"
        return "running" if self.supervisor() is None or self.supervisor_alive() else "running (unsupervised)"

    def request_cancel(self) -> None:
        """Ask the supervisor to stop the run (it polls for this file); when the supervisor is
        gone and the training runs on, send SIGTERM to the training's process group."""
        fd = os.open(self.cancel_path, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
        if not self.supervisor_alive():
            self.signal_training(signal.SIGTERM)

    def signal_training(self, sig: int) -> bool:
        """Send ``sig`` to the training's process group (supervisor.json's ``train_pgid``) while
        it runs; ``True`` when it was sent."""
        sup = self.supervisor()
        pgid = sup.train_pgid if sup is not None else None
        if pgid is None or pgid <= 1 or not self.training_alive():
            return False
        try:
            os.killpg(pgid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False


def create(
    resolved: dict[str, Any],
    argv: list[str],
    env: dict[str, str],
    run_id: str | None = None,
    *,
    kind: str = "run",
    group: str | None = None,
) -> RunDir:
    """Create the run directory with ``profile.json`` (``resolved``: a profile's
    :meth:`Profile.to_dict`, or a watch run's plain dict) and the command. ``kind`` (``run``,
    ``probe``, ``sweep``) and ``group`` (the probe or sweep id) are launch arguments, not profile
    settings: they are kept in command.json."""
    resolved = thaw(resolved)  # read-only tables in a plain dict as dicts
    root = paths.ensure_dir(paths.runs_dir())
    rid = run_id or new_run_id(resolved.get("name", "run"))
    path = root / rid
    path.mkdir(mode=0o700)
    rd = RunDir(path)
    write_json_atomic(rd.profile_path, resolved)
    rd.write_command(CommandFile(argv=list(argv), env=dict(env), created=time.time(), kind=kind, group=group))
    log.debug("run directory %s (kind %s%s): %s", path, kind, f", group {group}" if group else "", " ".join(argv))
    return rd


def list_runs() -> list[RunDir]:
    """All run directories, oldest first."""
    root = paths.runs_dir()
    if not root.is_dir():
        return []
    runs = [RunDir(p) for p in root.iterdir() if p.is_dir() and (p / "profile.json").exists()]
    return sorted(runs, key=lambda r: r.run_id)


def find(run: str | None) -> RunDir | None:
    """A run by id, id prefix or path; None = the latest live run, else the latest run.
    FttuiError (one line listing them) when a prefix matches several runs."""
    if run:
        p = Path(run)
        if p.is_dir() and (p / "profile.json").exists():
            return RunDir(p)
        matches = [r for r in list_runs() if r.run_id == run or r.run_id.startswith(run)]
        if len(matches) == 1:
            return matches[0]
        exact = [r for r in matches if r.run_id == run]
        if exact:
            return exact[0]
        if matches:
            shown = ", ".join(r.run_id for r in matches[-5:])
            more = f" and {len(matches) - 5} older" if len(matches) > 5 else ""
            raise FttuiError(f"{run!r} matches {len(matches)} runs: {shown}{more}; give more of the id")
        return None
    runs = list_runs()
    live = [r for r in runs if r.is_live()]
    if live:
        return live[-1]
    return runs[-1] if runs else None
