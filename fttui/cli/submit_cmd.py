"""`fttui submit`: a profile as one Slurm batch job over N nodes (:mod:`fttui.core.run.slurm.slurmjob`).

Prints the Slurm job id and the run id (``--json``: both and the job's directory); ``--dry-run``
prints the batch script and writes nothing. `fttui ls`, `attach` and `cancel` follow the job.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from fttui.cli.common import add_profile_args, resolve


def add_parser(sub) -> None:
    """The subcommand's arguments and handler."""
    p = sub.add_parser(
        "submit",
        help="run a profile as one Slurm job over several nodes (sbatch)",
        description="Write an sbatch script that runs `fttui run` on every node of the allocation "
        "(srun, one task per node: each node reads its rank, the first node's address "
        "and the job's port from Slurm), keep it in the job's run directory, submit it "
        "with sbatch and print the job id and run id. FTTUI_HOME must be a folder every "
        "node shares (docs/cluster.md).",
    )
    add_profile_args(p)
    p.add_argument("--nodes", "-N", type=int, required=True, help="number of nodes")
    p.add_argument(
        "--gpus-per-node",
        type=int,
        metavar="G",
        help="GPUs per node (Slurm's --gpus-per-node; the profile's devices.gpus otherwise)",
    )
    p.add_argument("--partition", "-P", metavar="P", help="Slurm partition")
    p.add_argument("--time", "-t", metavar="T", help="time limit (MINUTES, HH:MM:SS, D-HH:MM)")
    p.add_argument("--account", "-A", metavar="A", help="Slurm account to charge")
    p.add_argument(
        "--sbatch-arg",
        dest="sbatch_args",
        action="append",
        default=[],
        metavar="ARG",
        help="another sbatch option, one per flag (e.g. --sbatch-arg=--qos=high); repeatable",
    )
    p.add_argument(
        "--no-link-test",
        dest="link_test",
        action="store_false",
        help="leave out the job's first step: the link test (an all-reduce over the nodes, kept per machine set "
        "for later plans)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the batch script; submit and write nothing")
    p.add_argument("--json", action="store_true", help="print the job id, run id and directory as JSON")
    p.set_defaults(handler=cmd_submit)


def cmd_submit(args, resolve: Callable = resolve) -> int:
    from fttui.core.run.slurm import slurmjob

    opts = slurmjob.SubmitOptions(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        partition=args.partition,
        time=args.time,
        account=args.account,
        sbatch_args=tuple(args.sbatch_args),
        link_test=args.link_test,
    )
    resolved = resolve(args)
    if args.dry_run:
        _prof, _path, text = slurmjob.prepare_job(resolved, opts)
        print(text, end="")
        return 0
    from fttui.core.run.slurm.executor import SlurmJob

    rd = SlurmJob(resolved, opts).start()
    sl = rd.slurm()
    job = sl.job_id if sl is not None else None
    if args.json:
        print(json.dumps({"job_id": job, "run_id": rd.run_id, "run_dir": str(rd.path)}))
    else:
        print(f"submitted Slurm job {job}: run {rd.run_id}")
        print(f"  fttui attach {rd.run_id}   (fttui ls: its state; fttui cancel {rd.run_id}: scancel)")
    return 0
