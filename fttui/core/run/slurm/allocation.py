"""The Slurm allocation a ``fttui run`` was started in, read from Slurm's environment.

``srun`` (one task per node) gives every task ``SLURM_JOB_ID``, ``SLURM_STEP_ID``,
``SLURM_STEP_NUM_NODES`` / ``SLURM_NNODES``, ``SLURM_NODEID`` (this node's index in the step),
``SLURM_STEP_NODELIST`` / ``SLURM_JOB_NODELIST`` (a host list, ``gpu[01-04,07]``),
``SLURMD_NODENAME`` and, when the job asked for GPUs, ``SLURM_GPUS_ON_NODE`` (or the card lists
``SLURM_STEP_GPUS`` / ``SLURM_JOB_GPUS``, or ``SLURM_GPUS_PER_NODE``); a requeued job also
``SLURM_RESTART_COUNT``. From these: the node rank, the number of nodes and the GPUs per node,
with nothing typed by hand. The rendezvous is the first node of the step (``scontrol show
hostnames``), reached at its ``NodeAddr`` (``scontrol show node``: node names need not resolve),
on a port every node computes alike from the job id (:func:`job_port`), so two jobs sharing a node
do not meet on one port. Node 0 checks that the port is free before it launches
(:func:`fttui.core.run.launching.launch.check_rendezvous`).

Refused in one line: a heterogeneous job (its components have different resources: one profile
cannot describe them), more than one task per node (fttui's launcher starts the node's ranks),
and a multi-node allocation entered without ``srun`` (only one node would run).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fttui.core.base.errors import FttuiError
from fttui.core.profiles.typed import Profile

#: the rendezvous port of job J is PORT_BASE + J % PORT_SPAN: below Linux's ephemeral ports
#: (32768 and up), so no client connection of the node holds it by chance
PORT_BASE = 20000
PORT_SPAN = 10000


def job_port(job_id: str | int) -> int:
    """The rendezvous port of a job: the same on every node, different for jobs whose ids differ
    by less than ``PORT_SPAN``."""
    return PORT_BASE + int(str(job_id).split("_")[0].split(";")[0]) % PORT_SPAN


#: the link test's rendezvous port in a job (``fttui submit``'s first step, before the training):
#: LINK_PORT_BASE + J % PORT_SPAN, below the training's ports
LINK_PORT_BASE = 10000


def link_port(job_id: str | int) -> int:
    """The link test's rendezvous port in job ``job_id`` (:mod:`fttui.integrations.linktest`):
    every node computes it alike, never the training's port."""
    return LINK_PORT_BASE + int(str(job_id).split("_")[0].split(";")[0]) % PORT_SPAN


@dataclass(frozen=True)
class Allocation:
    """This task's place in the job step. ``gpus_per_node`` is ``None`` when the job asked for
    no GPU through Slurm (the profile's ``devices.gpus`` then stands)."""

    job_id: str
    nodes: int
    node_rank: int
    node_name: str
    nodelist: str
    gpus_per_node: int | None
    restart: int = 0

    @property
    def port(self) -> int:
        return job_port(self.job_id)


def _int(env: Mapping[str, str], key: str) -> int | None:
    value = (env.get(key) or "").strip()
    if not value:
        return None
    m = re.match(r"^(\d+)", value)
    if m is None:
        raise FttuiError(f"Slurm's {key}={value!r} is not a number")
    return int(m.group(1))


def gpus_on_node(env: Mapping[str, str]) -> int | None:
    """GPUs Slurm gave this node: ``SLURM_GPUS_ON_NODE``, else the number of cards in
    ``SLURM_STEP_GPUS`` / ``SLURM_JOB_GPUS`` (``0,1,3``), else ``SLURM_GPUS_PER_NODE`` (``4`` or
    ``a100:4``); ``None`` when the job asked for none."""
    on_node = _int(env, "SLURM_GPUS_ON_NODE")
    if on_node is not None:
        return on_node
    for key in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        cards = [c for c in (env.get(key) or "").split(",") if c.strip()]
        if cards:
            return len(cards)
    per_node = (env.get("SLURM_GPUS_PER_NODE") or "").strip()
    if per_node:
        m = re.search(r"(\d+)$", per_node.split(",")[0])
        if m is None:
            raise FttuiError(f"Slurm's SLURM_GPUS_PER_NODE={per_node!r} names no count")
        return int(m.group(1))
    return None


def read_allocation(env: Mapping[str, str]) -> Allocation | None:
    """The allocation of a task started by ``srun`` (``None`` outside any job step: a plain
    run); :class:`FttuiError` (one line) for the cases fttui does not run in."""
    job = (env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or "").strip()
    if not job or env.get("FTTUI_SLURM", "1") == "0":
        return None
    het = sorted(k for k in env if k.startswith("SLURM_HET_") or "_HET_GROUP_" in k or k == "SLURM_PACK_SIZE")
    if het:
        raise FttuiError(
            f"Slurm job {job} is heterogeneous ({het[0]} is set): fttui runs one profile with the same "
            "resources on every node; submit one homogeneous job (fttui submit --nodes N)"
        )
    in_step = (env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") or "").strip()
    job_nodes = _int(env, "SLURM_JOB_NUM_NODES") or _int(env, "SLURM_NNODES") or 1
    if not in_step or in_step.startswith(("batch", "extern")):
        if job_nodes > 1:
            raise FttuiError(
                f"this shell is inside the {job_nodes}-node Slurm job {job} but not in a job step: "
                "start fttui on every node with srun --ntasks-per-node=1 fttui run ..."
            )
        return None
    nodes = _int(env, "SLURM_STEP_NUM_NODES") or _int(env, "SLURM_NNODES") or 1
    tasks = _int(env, "SLURM_STEP_NUM_TASKS") or _int(env, "SLURM_NTASKS") or nodes
    if tasks != nodes:
        raise FttuiError(
            f"Slurm step {job}.{in_step} has {tasks} tasks on {nodes} node(s): fttui starts each node's "
            "ranks itself, so run one task per node (srun --ntasks-per-node=1)"
        )
    rank = _int(env, "SLURM_NODEID")
    if rank is None:
        rank = _int(env, "SLURM_PROCID") or 0
    if not 0 <= rank < nodes:
        raise FttuiError(f"Slurm's SLURM_NODEID={rank} is outside the step's {nodes} node(s)")
    nodelist = (
        env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    ).strip()
    if not nodelist:
        raise FttuiError(f"Slurm job {job}: no SLURM_STEP_NODELIST / SLURM_JOB_NODELIST to find node 0 in")
    return Allocation(
        job_id=job.split(";")[0],
        nodes=nodes,
        node_rank=rank,
        node_name=(env.get("SLURMD_NODENAME") or "").strip() or f"node{rank}",
        nodelist=nodelist,
        gpus_per_node=gpus_on_node(env),
        restart=_int(env, "SLURM_RESTART_COUNT") or 0,
    )


def rendezvous_addr(alloc: Allocation) -> str:
    """The address of the step's first node: its ``NodeAddr`` when ``scontrol`` knows it, else
    its name (which resolves on most clusters)."""
    from fttui.monitor.slurm import hostnames, node_addr

    try:
        names = hostnames(alloc.nodelist)
    except ValueError as e:
        raise FttuiError(f"Slurm job {alloc.job_id}: {e}") from None
    if not names:
        raise FttuiError(f"Slurm job {alloc.job_id}: no node in {alloc.nodelist!r}")
    return node_addr(names[0]) or names[0]


def with_allocation(resolved: Profile, alloc: Allocation, main_addr: str) -> Profile:
    """The resolved profile with the allocation's ``devices`` settings: nodes, this node's rank,
    the rendezvous address and port and, when Slurm gave GPUs, the GPUs per node (the profile's
    own ``devices.gpus`` otherwise)."""
    changes: dict[str, Any] = {
        "devices.nodes": alloc.nodes,
        "devices.node_rank": alloc.node_rank,
        "devices.main_addr": main_addr,
        "devices.main_port": alloc.port,
    }
    if alloc.gpus_per_node:
        changes["devices.gpus"] = alloc.gpus_per_node
    return resolved.with_settings(changes)


__all__ = [
    "Allocation",
    "read_allocation",
    "gpus_on_node",
    "job_port",
    "link_port",
    "LINK_PORT_BASE",
    "rendezvous_addr",
    "with_allocation",
    "PORT_BASE",
    "PORT_SPAN",
]
