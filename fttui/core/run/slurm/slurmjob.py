"""``fttui submit``: a profile as one Slurm batch job over N nodes.

The job's directory ``runs/<run id>/`` (kind ``slurm`` in ``command.json``) holds the resolved
profile as submitted (``devices.nodes``, GPUs per node, and the job's ``output/`` folder that
every node shares), the batch script ``job.sbatch``, ``slurm.json`` (the job id sbatch gave) and
Slurm's output ``slurm-<job id>.out``. The script runs ``srun --ntasks-per-node=1 ... fttui run
--job <run id>`` on every node: each node's ``fttui run`` reads the allocation from Slurm's
environment and runs its part under a supervisor of its own, in a run directory of its own
(:mod:`fttui.core.run.slurm.slurmnode`). Everything is an argument list (``sbatch``, ``scancel``), never
a shell string; the script quotes every value it holds.

Probes and sweeps over several nodes submit one job per trial or cell (``fttui submit`` once per
value): a trial is judged by its own run's verdict, and a fresh allocation per trial is what a
later ``fttui submit`` of the chosen value gets (docs/cluster.md says why).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fttui.core.base.errors import FttuiError
from fttui.core.profiles.typed import Profile
from fttui.core.run.files import rundir
from fttui.core.run.files.runfiles import SlurmJobFile

KIND = "slurm"
SCRIPT = "job.sbatch"
_TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$|^\d+-\d+$")


@dataclass(frozen=True)
class SubmitOptions:
    nodes: int
    gpus_per_node: int | None = None
    partition: str | None = None
    time: str | None = None
    account: str | None = None
    sbatch_args: tuple[str, ...] = field(default_factory=tuple)
    link_test: bool = True


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _one_line(what: str, value: str) -> None:
    """A value that goes into the batch script must not break its line: a newline (or a carriage
    return, which bash reads as part of a word and sbatch as a line's end) would make the rest a
    line of its own, a command or a directive nobody asked for (issue 36)."""
    if _CONTROL.search(value):  # repr: the newline shown as \n, as every control character
        raise FttuiError(
            f"{what} {value!r}: holds a control character (a newline, a carriage return, a tab); "
            "give the value on one line"
        )


def check_options(opts: SubmitOptions) -> None:
    """One line (exit 2) for options Slurm would refuse later or fttui cannot run."""
    for what, value in (
        ("--partition", opts.partition),
        ("--time", opts.time),
        ("--account", opts.account),
        *(("--sbatch-arg", a) for a in opts.sbatch_args),
    ):
        if value is not None:
            _one_line(what, value)
    if opts.nodes < 1:
        raise FttuiError(f"--nodes {opts.nodes}: give 1 or more nodes")
    if opts.gpus_per_node is not None and opts.gpus_per_node < 0:
        raise FttuiError(f"--gpus-per-node {opts.gpus_per_node}: give 0 or more")
    if opts.time is not None and not _TIME.match(opts.time.strip()):
        raise FttuiError(f"--time {opts.time!r}: Slurm's forms are MINUTES, HH:MM:SS, D-HH[:MM[:SS]] (e.g. 2:00:00)")
    for arg in opts.sbatch_args:
        if "\n" in arg or not arg.startswith("-"):
            raise FttuiError(f"--sbatch-arg {arg!r}: give one sbatch option per flag, e.g. --sbatch-arg=--qos=high")
        if arg.split("=")[0] in (
            "--nodes",
            "-N",
            "--ntasks-per-node",
            "--ntasks",
            "-n",
            "--output",
            "-o",
            "--het-group",
            "--wrap",
        ):
            raise FttuiError(
                f"--sbatch-arg {arg}: fttui submit sets {arg.split('=')[0]} itself "
                "(one task per node; --nodes for the count)"
            )


def job_profile(resolved: Profile, opts: SubmitOptions, run_path: Path) -> Profile:
    """The profile each node runs: ``devices.nodes``, the GPUs per node asked for, and the
    job's output folder (every node's, on the shared filesystem) unless the profile names one."""
    prof = resolved
    changes: dict[str, Any] = {"devices.nodes": opts.nodes, "devices.node_rank": 0}
    if opts.gpus_per_node is not None:
        changes["devices.gpus"] = opts.gpus_per_node
    if not prof.train.output_dir:
        changes["train.output_dir"] = str(run_path / "output")
    return prof.with_settings(changes)


def link_test_argv(
    out: str | os.PathLike[str], python: str, nodes: int | None = None, gpus_per_node: int | None = None
) -> list[str]:
    """The link test (:mod:`fttui.integrations.linktest`) as an ``srun`` step, one task per node:
    the job's first step (``fttui submit``, inside the allocation: no ``nodes``), or on its own over
    ``nodes`` nodes (``fttui plan --link`` of a profile of several nodes: srun asks Slurm for them,
    or takes them from the allocation it runs in, with ``gpus_per_node`` cards each)."""
    argv = ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    if nodes is not None:
        argv += [f"--nodes={nodes}", "--job-name=fttui-link"]
    if gpus_per_node:
        argv.append(f"--gpus-per-node={gpus_per_node}")
    return [*argv, python, "-m", "fttui.integrations.linktest", "--out", str(out)]


def link_test_lines(run_path: Path, python: str) -> list[str]:
    """The job's first step (``fttui submit``; ``--no-link-test`` leaves it out): the link test
    (:func:`link_test_argv`) on every node, one task each, then its result parsed and kept per
    machine set (:mod:`fttui.core.experiments.link`); a failed test is said in Slurm's output and
    the training goes on."""
    q = shlex.quote
    out = run_path / "link.json"
    return [
        "# The link test: an all-reduce over the nodes through srun and the job's rendezvous, its figure",
        "# kept per machine set for later plans (fttui submit --no-link-test leaves it out)",
        f"{shlex.join(link_test_argv(out, python))} "
        f"&& {q(python)} -m fttui.core.experiments.link {q(str(out))} "
        "|| echo 'fttui: the link test failed; the training goes on'",
    ]


def script_text(resolved: Profile, opts: SubmitOptions, run_path: Path, python: str | None = None) -> str:
    """The batch script (``job.sbatch``): Slurm's options, then one ``fttui run --job`` per node."""
    q = shlex.quote
    name = str(resolved.name or "run")
    home = str(rundir.paths.home())
    check_options(opts)
    for what, value in (
        ("the profile's name", name),
        ("FTTUI_HOME", home),
        ("the run directory", str(run_path)),
        ("the Python", python or sys.executable),
    ):
        _one_line(what, value)
    lines = [
        "#!/bin/bash",
        f"# fttui submit --profile {name} --nodes {opts.nodes}: job run {run_path.name}",
        "# Every node runs `fttui run --job RUN`: it reads its rank, the first node's address and the",
        "# job's rendezvous port from Slurm's environment and writes its own run directory (docs/cluster.md).",
        f"#SBATCH --job-name={q('fttui-' + name)}",
        f"#SBATCH --nodes={opts.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --output={q(str(run_path / 'slurm-%j.out'))}",
        "#SBATCH --open-mode=append",
    ]
    if opts.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={opts.gpus_per_node}")
    for flag, setting in (("partition", opts.partition), ("time", opts.time), ("account", opts.account)):
        if setting:
            lines.append(f"#SBATCH --{flag}={q(setting)}")
    lines += [f"#SBATCH {q(a)}" for a in opts.sbatch_args]
    lines += ["", f"export FTTUI_HOME={q(home)}"]
    if opts.link_test:
        lines += link_test_lines(run_path, python or sys.executable)
    lines += [
        f"exec srun --ntasks-per-node=1 --kill-on-bad-exit=1 {q(python or sys.executable)} -m fttui run "
        f"--job {q(run_path.name)}",
        "",
    ]
    return "\n".join(lines)


def prepare_job(resolved: Profile, opts: SubmitOptions, run_id: str | None = None) -> tuple[Profile, Path, str]:
    """Check everything before anything is written: the options, and the profile as every node
    will run it (the launcher and its settings; the GPUs are the allocation's, not this machine's)."""
    from fttui.core.run.launching.launch import build_command, check_trackers
    from fttui.core.run.launching.oomretry import check_slurm
    from fttui.core.run.launching.preflight import preflight

    check_options(opts)
    check_slurm(resolved)
    rid = run_id or rundir.new_run_id(str(resolved.name or "run"))
    run_path = rundir.paths.runs_dir() / rid
    prof = job_profile(resolved, opts, run_path)
    gpus = int(prof.devices.gpus or 0)
    preflight(prof, (gpus, None if gpus else "the job asks for no GPU"))
    check_trackers(prof)
    build_command(prof, run_path)  # the launcher can run it (one line otherwise)
    return prof, run_path, script_text(prof, opts, run_path)


def submit(resolved: Profile, opts: SubmitOptions) -> rundir.RunDir:
    """Write the job's directory and script, then ``sbatch --parsable`` it; the job id goes to
    ``slurm.json``. sbatch's refusal is one line (exit 2) and leaves nothing behind."""
    import shutil

    prof, run_path, text = prepare_job(resolved, opts)
    if shutil.which("sbatch") is None:
        raise FttuiError(
            "sbatch not found: fttui submit runs on a machine with Slurm's clients "
            "(set SLURM_CONF when the cluster's configuration is not in /etc)"
        )
    argv = ["sbatch", "--parsable", SCRIPT]
    rd = rundir.create(prof.to_dict(), argv, {}, run_id=run_path.name, kind=KIND)
    script = rd.path / SCRIPT
    script.write_text(text)
    os.chmod(script, 0o700)
    try:
        proc = subprocess.run(argv, cwd=rd.path, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        _remove(rd)
        raise FttuiError(f"sbatch: {e}") from None
    out = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not out or not re.match(r"^\d+", out[-1]):
        _remove(rd)
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise FttuiError(f"sbatch refused the job: {err[-1] if err else f'exit {proc.returncode}'}")
    job_id, _, cluster = out[-1].partition(";")
    job = SlurmJobFile(
        job_id=job_id, cluster=cluster or None, submitted=time.time(), nodes=opts.nodes, script=str(script)
    )
    rundir.write_json_atomic(rd.path / "slurm.json", job.to_dict())
    return rd


def _remove(rd: rundir.RunDir) -> None:
    import shutil

    shutil.rmtree(rd.path, ignore_errors=True)


def job_nodes(rd: rundir.RunDir) -> list[rundir.RunDir]:
    """The run directories of the job's nodes (every attempt of a requeued job), by id."""
    root = rd.path.parent
    out = [
        rundir.RunDir(p)
        for p in root.glob(f"{rd.run_id}-*")
        if (p / "profile.json").exists() and re.fullmatch(r"(-r\d+)?-n\d+", p.name[len(rd.run_id) :])
    ]
    return sorted(out, key=lambda r: (restart_of(r), r.run_id))


def restart_of(rd: rundir.RunDir) -> int:
    """The attempt of a requeued job a node's run belongs to (0: the first)."""
    node = rd.slurm_node()
    return (node.restart if node is not None else None) or 0


def node0(rd: rundir.RunDir) -> rundir.RunDir | None:
    """Node 0 of the job's latest attempt (the lowest rank's events: steps, ETA), if started."""
    zero = [r for r in job_nodes(rd) if r.run_id.endswith("-n0")]
    return zero[-1] if zero else None


def cancel(rd: rundir.RunDir) -> None:
    """``scancel`` the job of a job directory or of a node's run (Slurm signals every node's
    step; each supervisor stops its tree and writes its status)."""
    sl = rd.slurm()
    job = sl.job_id if sl is not None else None
    if not job:
        raise FttuiError(f"run {rd.run_id}: no Slurm job id yet (sbatch has not answered)")
    try:
        proc = subprocess.run(
            ["scancel", str(job)], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise FttuiError(f"scancel {job}: {e}") from None
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise FttuiError(f"scancel {job}: {err[-1] if err else f'exit {proc.returncode}'}")


__all__ = [
    "SubmitOptions",
    "submit",
    "restart_of",
    "prepare_job",
    "script_text",
    "link_test_lines",
    "link_test_argv",
    "job_profile",
    "check_options",
    "job_nodes",
    "node0",
    "cancel",
    "KIND",
    "SCRIPT",
]
