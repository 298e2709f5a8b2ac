"""The link test run before a launch (``fttui plan --link``; issue 43 item 2), through the launcher
and rendezvous a run of the plan's profile uses, its figure parsed and kept per machine set
(:mod:`fttui.core.experiments.link`):

- one node: torchrun ``--standalone`` on this machine's ranks (:func:`measure_here`), as a
  one-node run starts them;
- several nodes: an ``srun`` step of one task per node over that many nodes
  (:func:`measure_nodes`), the same step a ``fttui submit`` job runs first
  (:func:`fttui.core.run.slurm.slurmjob.link_test_argv`); srun asks Slurm for the nodes (or takes
  them from the allocation it runs in: ``salloc``), and the ranks meet at the first node on the
  job's link port, as the job's run does. Without Slurm it is one line (exit 2).

The test's failure (its launcher's exit, no result, a result that cannot be read) is a
:class:`~fttui.core.experiments.link.LinkError`: one line, its own exit code
(:data:`~fttui.core.base.constants.EXIT_LINK_FAILED`). A test that runs past :data:`TIMEOUT_S`
(``FTTUI_LINK_TIMEOUT``; Slurm's queue included) is ended, its process group stopped (srun then
gives its nodes, or its place in the queue, back), and is a failure too, with the launcher's last
words (``srun: job 12 queued and waiting for resources``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fttui.core.base.errors import FttuiError
from fttui.core.experiments.link import LinkError, LinkFigure, parse_result, store

__all__ = ["LINKTEST_MODULE", "TIMEOUT_S", "failure_line", "measure_here", "measure_nodes"]

#: the worker module that runs the test
LINKTEST_MODULE = "fttui.integrations.linktest"
#: how long the link test may take (an srun step's wait for its nodes included) before it is ended
#: and called failed; ``FTTUI_LINK_TIMEOUT`` sets another
TIMEOUT_S = 300.0

#: lines of a launcher's output that say nothing of why it failed
_NOISE = re.compile(
    r"^[=\-*#\s]*$|ChildFailedError|^Traceback|^File \"|^\^+$|^Root Cause|^Failures:|^<NO_OTHER_FAILURES>"
    r"|^(time|host|rank|local_rank|exitcode|error_file|traceback)\s*:|^\[[\d-]+\]:?$|^warnings\.warn"
)
#: a raised exception's line (a rank's ``RuntimeError: ...``), then a line that names a failure
_SAID = (
    re.compile(r"\b\w*(Error|Exception)\b: "),
    re.compile(r"\berror:|\bfatal:|refused|failed|not found|No such", re.IGNORECASE),
)


def failure_line(text: str) -> str:
    """The line of a failed test's output that says why: the last exception a rank raised, else
    the last line naming a failure (srun's ``error:``), else the last that is not a launcher's
    frame."""
    useful = [ln.strip() for ln in text.splitlines() if ln.strip() and not _NOISE.search(ln.strip())]
    for said in _SAID:
        named = [ln for ln in useful if said.search(ln)]
        if named:
            return named[-1]
    return (useful or ["no output"])[-1]


def _run_test(argv: list[str], env: dict[str, str], out: Path, source: str, launcher: str) -> LinkFigure:
    """Run the test's ``launcher`` (``argv``, its own process group: ended with it on a timeout or
    Ctrl-C), then parse its result file (not kept yet)."""
    from fttui.core.base.envnumbers import env_float
    from fttui.core.run.processes.proctree import KILLED_WAIT_S, stop_group

    limit = env_float("FTTUI_LINK_TIMEOUT", TIMEOUT_S)
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,
        )
    except OSError as e:
        raise LinkError(f"link test: {launcher}: {e}") from None
    try:
        stdout, stderr = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        try:
            stdout, stderr = proc.communicate(timeout=KILLED_WAIT_S)
        except subprocess.TimeoutExpired:
            stdout, stderr = "", ""
        raise LinkError(
            f"link test: no result after {limit:g} s, {launcher} ended (its last words: "
            f"{failure_line(stderr + stdout)})"
        ) from None
    except BaseException:  # Ctrl-C: the launcher's group goes with the plan
        stop_group(proc)
        raise
    if proc.returncode != 0:
        raise LinkError(f"link test failed ({launcher} exit {proc.returncode}): {failure_line(stderr + stdout)}")
    return parse_result(out, source=source)


def _env(on_gpu: bool) -> dict[str, str]:
    env = dict(os.environ)
    if not on_gpu:  # CPU ranks talk over gloo even where CUDA is there
        env["FTTUI_LINK_BACKEND"] = "gloo"
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def measure_here(ranks: int, on_gpu: bool, python: str | None = None) -> LinkFigure:
    """The link test on this machine's ``ranks`` processes through torchrun (``--standalone``, as
    a one-node run's rendezvous); its figure kept."""
    with tempfile.TemporaryDirectory(prefix="fttui-link-") as tmp:
        out = Path(tmp) / "link.json"
        argv = [
            python or sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={max(1, ranks)}",
            "--standalone",
            "-m",
            LINKTEST_MODULE,
            "--out",
            str(out),
        ]
        fig = _run_test(argv, _env(on_gpu), out, "fttui plan --link (torchrun on this machine)", "torchrun")
    store(fig)
    return fig


def measure_nodes(nodes: int, on_gpu: bool, gpus_per_node: int = 0, python: str | None = None) -> LinkFigure:
    """The link test over ``nodes`` nodes as an ``srun`` step, one task per node (what a
    ``fttui submit`` job runs first); its figure kept for the nodes Slurm gave. The result file is
    written by the first node into ``FTTUI_HOME/links/`` (a folder every node shares, as ``fttui
    submit`` needs). No Slurm here: :class:`FttuiError` (exit 2)."""
    from fttui.core.base import paths
    from fttui.core.run.slurm.slurmjob import link_test_argv
    from fttui.monitor.slurm import SlurmUnavailable, check_controller

    try:
        check_controller()
    except SlurmUnavailable as e:
        raise FttuiError(
            f"the link between {nodes} nodes is measured as a Slurm job step (srun), and Slurm is not reachable "
            f"here ({e}); run the plan where Slurm's clients reach the cluster (SLURM_CONF names its "
            "configuration when it is not in /etc), or plan one node (devices.nodes = 1)"
        ) from None
    if shutil.which("srun") is None:
        raise FttuiError(f"the link between {nodes} nodes is measured with srun, and srun is not found here")
    folder = paths.home() / "links"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = Path(tempfile.mkdtemp(prefix="measuring-", dir=folder))
    try:
        out = tmp / "link.json"
        argv = link_test_argv(out, python or sys.executable, nodes=nodes, gpus_per_node=gpus_per_node or None)
        fig = _run_test(argv, _env(on_gpu), out, f"fttui plan --link (srun over {nodes} nodes)", "srun")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if len(set(fig.nodes)) != nodes:  # one node twice: Slurm gave fewer nodes than asked
        raise LinkError(f"link test: asked for {nodes} nodes, the ranks ran on {', '.join(fig.nodes)}")
    store(fig)
    return fig
