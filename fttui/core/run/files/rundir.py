"""Run directories: layout, creation, discovery, and reading and writing their files (see
docs/architecture.md). Whether a run is live (its processes, Slurm) is :mod:`fttui.core.run.processes.liveness`;
cancelling one is :mod:`fttui.core.run.processes.cancel`."""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fttui.core.base import paths
from fttui.core.base.errors import FttuiError
from fttui.core.base.redact import mask
from fttui.core.profiles.frozen import thaw
from fttui.core.profiles.stored import stored_profile
from fttui.core.profiles.typed import Profile
from fttui.core.run.files.runfiles import CommandFile, ExitFile, SlurmJobFile, SlurmNodeJob, SupervisorFile
from fttui.core.run.files.statusfile import FinalStatus

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
    def snapshot_path(self) -> Path:
        """The allocator's snapshot at a CUDA out of memory (:mod:`fttui.core.run.files.memsnap`)."""
        return self.path / "memory_snapshot.pickle"

    @property
    def tensors_path(self) -> Path:
        """The rank's parameters, gradients and optimizer states at that snapshot (``memsnap``)."""
        return self.path / "memory_tensors.json"

    @property
    def cancel_path(self) -> Path:
        return self.path / "cancel"

    @property
    def exit_path(self) -> Path:
        """How the training exited, written by its log writer (:mod:`fttui.core.run.supervising.logtee`)."""
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
        """``command.json`` (:class:`~fttui.core.run.files.runfiles.CommandFile`); ``None`` when missing."""
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
        """``supervisor.json`` (:class:`~fttui.core.run.files.runfiles.SupervisorFile`); ``None`` before
        the supervisor wrote it."""
        return SupervisorFile.from_dict(read_json(self.supervisor_path))

    def write_supervisor(self, sup: SupervisorFile) -> None:
        write_json_atomic(self.supervisor_path, sup.to_dict())

    def slurm_node(self) -> SlurmNodeJob | None:
        """A Slurm node's run: ``command.json``'s ``slurm`` (:mod:`fttui.core.run.slurm.slurmnode`);
        ``None`` for any other run."""
        cmd = self.command()
        return cmd.slurm if cmd is not None else None

    def slurm(self) -> SlurmNodeJob | SlurmJobFile | None:
        """The Slurm job this directory belongs to: a node's run (``command.json``'s ``slurm``,
        :mod:`fttui.core.run.slurm.slurmnode`) or a submitted job (``slurm.json``,
        :mod:`fttui.core.run.slurm.slurmjob`); ``None`` for a run of this machine alone."""
        node = self.slurm_node()
        return node if node is not None else SlurmJobFile.from_dict(read_json(self.path / "slurm.json"))

    def is_slurm_job(self) -> bool:
        """A job directory of ``fttui submit`` (its nodes' runs are directories of their own)."""
        return self.kind_and_group()[0] == "slurm"

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
        """``exit.json`` (:class:`~fttui.core.run.files.runfiles.ExitFile`: ``returncode``, ``t``) once
        the training has exited, else ``None``."""
        return ExitFile.from_dict(read_json(self.exit_path))

    def write_exit(self, info: ExitFile) -> None:
        write_json_atomic(self.exit_path, info.to_dict())

    def write_cancel(self) -> None:
        """The ``cancel`` file, which asks the supervisor to stop the run (it polls for it);
        :func:`fttui.core.run.processes.cancel.request_cancel` also signals the training when the supervisor
        is gone."""
        fd = os.open(self.cancel_path, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)


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


def find(run: str | None, live: Callable[[RunDir], bool] | None = None) -> RunDir | None:
    """A run by id, id prefix or path; None = the latest run for which ``live`` holds (the latest
    live run: :func:`fttui.core.run.processes.liveness.find`), else the latest run. FttuiError (one line
    listing them) when a prefix matches several runs."""
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
    chosen = [r for r in runs if live(r)] if live is not None else []
    if chosen:
        return chosen[-1]
    return runs[-1] if runs else None
