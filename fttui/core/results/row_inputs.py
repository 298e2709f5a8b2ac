"""What a row is folded from besides the profile, the snapshot, the final status and the event
records: the figures the run layer measures with the run's cards, one typed record
(:class:`RunFigures`) complete before the fold (:func:`fttui.core.results.columns.fold_row`), the
scheduler's verdict included, so that nothing patches a row afterwards.

* :class:`Cards`: the run's cards (names in CUDA order, how many, what connects them);
* :class:`GpuFigures`, :class:`HostFigures`: per card device used, the run's own, total memory
  and its source; the host's peak and what it sums (:mod:`fttui.core.run.row.row_figures`);
* :class:`PerfFigures`: per card allocator retries, lowest headroom, MFU (:mod:`fttui.core.run.fold.perf`);
* :class:`Kept`: what the run kept (:func:`fttui.core.run.row.summary.kept_figures`);
* :class:`SlurmFacts`: a Slurm node's job and, once the job is over, Slurm's final state (the
  scheduler's verdict is the row's status: :func:`fttui.core.run.slurm.slurmend.node_verdict`).

Each field is named after the row's column it gives. Pure, stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Cards", "GpuFigures", "HostFigures", "PerfFigures", "Kept", "SlurmFacts", "RunFigures"]


@dataclass(frozen=True)
class Cards:
    """The run's cards: the first one's name (``cpu`` for a CPU run), every name in CUDA order,
    how many, and the link between them (NVLink, PCIe, ...)."""

    gpu: str | None = None
    gpu_names: Sequence[str] | None = None
    num_gpus: int | None = None
    interconnect: str | None = None


@dataclass(frozen=True)
class GpuFigures:
    """Per card, in the order of the row's cards: device used, the run's own, total (MB), and
    where the run's own figure came from (NVML or the reserved memory plus the context)."""

    peak_gpu_mem_mb: Sequence[float | None] | None = None
    peak_gpu_proc_mb: Sequence[float | None] | None = None
    gpu_mem_total_mb: Sequence[float | None] | None = None
    gpu_mem_source: str | None = None


@dataclass(frozen=True)
class HostFigures:
    """The host's peak (MB) and what it sums (``host_measure``), the process tree's sampled peak
    and its build steps'."""

    peak_host_rss_mb: float | None = None
    host_measure: str | None = None
    peak_tree_rss_mb: float | None = None
    peak_build_rss_mb: float | None = None


@dataclass(frozen=True)
class PerfFigures:
    """Per card allocator retries, lowest headroom (MB) and MFU; any card near OOM; FLOPs per token."""

    alloc_retries: Sequence[Any] | None = None
    min_headroom_mb: Sequence[float | None] | None = None
    mfu: Sequence[float | None] | None = None
    near_oom: bool | None = None
    flops_per_token: float | None = None


@dataclass(frozen=True)
class Kept:
    """What the run kept: the run and step it resumed, its latest evaluation, where its model or
    checkpoints went and its last resumable checkpoint."""

    resumed_from: str | None = None
    resumed_step: int | None = None
    eval_loss: float | None = None
    eval_step: int | None = None
    output_dir: str | None = None
    checkpoint: str | None = None


#: the keys of a node's ``command.json`` ``slurm`` that the row keeps (``env.slurm``)
SLURM_KEYS = ("job_id", "job_run", "node_rank", "node", "nodes", "restart")


@dataclass(frozen=True)
class SlurmFacts:
    """A Slurm node's run: which job and node (``command.json``'s ``slurm``) and, once the job is
    over, Slurm's final state and who said it (``squeue``, ``sacct``, ``sacct -c``, ``scontrol``)."""

    node: Mapping[str, Any] = field(default_factory=dict)
    state: str | None = None
    source: str | None = None

    @classmethod
    def of(cls, slurm: Mapping[str, Any], job: Any = None) -> SlurmFacts:
        """The facts of a node (``slurm``: its ``command.json``'s object) and of its job's
        final state (a :class:`fttui.monitor.slurm.JobState`, ``None`` while unknown)."""
        node = {k: slurm.get(k) for k in SLURM_KEYS}
        return cls(node, job.state, job.source) if job is not None else cls(node)

    def to_dict(self) -> dict[str, Any]:
        """The row's ``env.slurm``."""
        out = dict(self.node)
        if self.state is not None:
            out.update(state=self.state, source=self.source)
        return out


@dataclass(frozen=True)
class RunFigures:
    """The figures of a row that the run layer measures: how the run was sharded (``method``, and
    ``sharding`` as read back from the engine or wrapper, else as asked), the world size its
    profile states, its wall time (s, launch to end), a stall, the versions and the environment
    (``env``: the worker's, the cards' topology, the sharding read back), its directory, what ran
    otherwise than stated (``mismatch``), a probe trial's setting (``param``) and the typed groups
    above. A figure the run did not measure is ``None``."""

    method: str | None = None
    sharding: str | None = None
    stated_world_size: int | None = None
    wall_s: float | None = None
    stalled: bool | None = None
    versions: dict[str, Any] | None = None
    env: dict[str, Any] | None = None
    run_dir: str | None = None
    mismatch: dict[str, Any] | None = None
    param: str | None = None
    cards: Cards = Cards()
    gpu: GpuFigures = GpuFigures()
    host: HostFigures = HostFigures()
    perf: PerfFigures = PerfFigures()
    kept: Kept = Kept()
    slurm: SlurmFacts | None = None
    #: an out of memory's training phase and its explanation (fttui.core.run.row.oomexplain)
    oom_phase: str | None = None
    oom_explained: str | None = None
    #: what held the card's memory at a CUDA out of memory (fttui.core.run.row.oomheld)
    oom_held: str | None = None

    def row_env(self) -> dict[str, Any] | None:
        """The row's ``env``: the run's environment, with the Slurm node's facts (``slurm``)."""
        if self.slurm is None:
            return self.env
        return {**(self.env or {}), "slurm": self.slurm.to_dict()}
