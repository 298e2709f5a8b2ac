"""A probe's trials and its result: the records, their table cells and their rows in the store.

Both ways a probe runs its trials (several trials in one probe-worker process, or one fresh
launch of the training command per trial, fttui.core.experiments.launched) give the same
:class:`Trial` records, the same :class:`ProbeResult` and the same store rows (``kind = "probe"``,
one per trial, :func:`trial_row`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from fttui.core.base.errors import FttuiError
from fttui.core.profiles.typed import Profile
from fttui.core.results.columns import RowInputs, fold_row
from fttui.core.results.row_inputs import Cards, GpuFigures, HostFigures, RunFigures
from fttui.core.run.files.statusfile import FinalStatus
from fttui.core.run.fold.snapshot import RunSnapshot
from fttui.core.run.row.row_figures import stated_sharding


@dataclass
class Trial:
    value: int
    status: str  # fit | oom
    load: int
    clean: bool
    fresh: bool = False
    oom_kind: str | None = None
    message: str | None = None
    steps: int = 0
    step_time_s: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    peak_gpu_mem_mb: list[float] = field(default_factory=list)
    peak_torch_reserved_mb: list[float] = field(default_factory=list)
    peak_host_rss_mb: float | None = None
    #: what ``peak_host_rss_mb`` measures: ``ranks`` (the training processes' own peaks, summed)
    #: or ``tree`` (the launched process tree, when no rank reported a step)
    host_measure: str = "ranks"
    #: the sharding that ran, read back from the engine or wrapper (launched trials); else None
    sharding: str | None = None
    #: MiB the budget left unused by a fitting trial (fttui.worker.probe.headroom_mb), else None
    headroom_mb: float | None = None
    #: MiB the batches added on the rank that decides the headroom (its peak minus its memory when
    #: training began; launched trials, fttui.core.experiments.headroom), else None
    steps_mb: float | None = None
    #: the longest sequence (tokens per sample, padding included) the trial fed
    longest_seq: int | None = None


@dataclass
class ProbeResult:
    probe_id: str
    param: str
    lo: int
    hi: int
    largest_fit: int | None
    smallest_oom: int | None
    exact: bool
    model_loads: int
    trials: list[Trial]
    wall_s: float
    note: str = ""
    #: values that fitted in some fresh processes and ran out of memory in others (a band)
    mixed: list[dict] = field(default_factory=list)
    #: extra fresh checks of each value next to the boundary, and the loads that allowed
    repeats: int = 0
    max_loads: int = 0
    #: what the trials trained on: "synthetic" (every sample max_seq_len tokens) or "data" (the
    #: data set's longest samples, probe --data); ``samples_note`` says it in words
    samples: str = "synthetic"
    samples_note: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["trials"] = [asdict(t) for t in self.trials]
        return d


def _mb_list(values: list[float], sep: str = ";") -> str:
    return sep.join(f"{x:.0f}" for x in values) or "-"


def trial_cells(t: Trial, torch_reserved: bool = True, sep: str = ";") -> list[str]:
    """One trial as table cells (the CLI's table and the app's): value, result, observed as
    (fresh / clean / no), load, GPU MB per card, [torch reserved MB,] host RSS MB, s/step,
    samples/s."""
    cells = [
        str(t.value),
        "fit" if t.status == "fit" else f"OOM ({t.oom_kind or '?'})",
        "fresh" if t.fresh else ("yes" if t.clean else "no"),
        str(t.load),
        _mb_list(t.peak_gpu_mem_mb, sep),
    ]
    if torch_reserved:
        cells.append(_mb_list(t.peak_torch_reserved_mb, sep))
    return cells + [
        "-" if t.peak_host_rss_mb is None else f"{t.peak_host_rss_mb:.0f}",
        "-" if t.step_time_s is None else f"{t.step_time_s:.3f}",
        "-" if t.samples_per_s is None else f"{t.samples_per_s:.2f}",
    ]


def parse_range(text: str) -> tuple[int, int]:
    try:
        lo_s, hi_s = text.split("..", 1)
        lo, hi = int(lo_s), int(hi_s)
    except ValueError:
        raise FttuiError(f"--range {text!r}: expected LO..HI, e.g. 1..1024") from None
    if lo < 1 or hi < lo:
        raise FttuiError(f"--range {text!r}: need 1 <= LO <= HI")
    return lo, hi


def trial_row(t: Trial, resolved: Profile, probe_id: str, param: str, index: int, data: bool = False) -> dict:
    """The store row of one trial (``kind = "probe"``, ``recorded_by = "probe"``; the one row
    builder, :func:`fttui.core.results.columns.fold_row`); ``index`` counts the probe's trials from
    1. Its stated settings are the profile's with the trial's value and the worst-case synthetic
    data (with ``data``: the data set's name, its longest samples); its measured figures are the
    trial's."""
    prof = resolved
    p = prof.with_settings(
        {
            "train.batch_size" if param == "batch_size" else "data.max_seq_len": t.value,
            "data.name": (
                f"{prof.data.name or prof.data.source} (longest samples)" if data else "synthetic (worst case)"
            ),
        }
    )
    method, sharding = stated_sharding(p)
    now = time.strftime("%Y-%m-%dT%H:%M:%S")
    snap = RunSnapshot(
        step=t.steps,
        samples_per_s=t.samples_per_s,
        tokens_per_s=t.tokens_per_s,
        tokens_padded_per_s=t.tokens_per_s,
        torch_peak_reserved_mb=dict(enumerate(t.peak_torch_reserved_mb)),
    )
    figures = RunFigures(
        param=param,
        method=method,
        sharding=t.sharding or sharding,
        stated_world_size=p.world_size(),
        cards=Cards(gpu="cpu" if not t.peak_gpu_mem_mb else None, num_gpus=len(t.peak_gpu_mem_mb)),
        gpu=GpuFigures(peak_gpu_mem_mb=t.peak_gpu_mem_mb),
        host=HostFigures(peak_host_rss_mb=t.peak_host_rss_mb, host_measure=t.host_measure),
    )
    return fold_row(
        RowInputs(
            run_id=f"{probe_id}-{index:02d}",
            kind="probe",
            group_id=probe_id,
            started_at=now,
            ended_at=now,
            profile=p,
            snap=snap,
            status=FinalStatus(t.status, oom_kind=t.oom_kind, error=t.message),
            figures=figures,
            recorded_by="probe",
            trial=t,
        )
    )


__all__ = ["Trial", "ProbeResult", "trial_cells", "parse_range", "trial_row"]
