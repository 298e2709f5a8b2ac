"""Sweeps: a grid of settings, one supervised run per cell, rendered like the reference tables.

Memory grows with every dimension of the grid (batch size, sequence length, ...), so a cell
that dominates an out-of-memory cell (every setting >=, one >) is skipped and recorded as such.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fttui.core.base.errors import FttuiError
from fttui.core.profiles import ALIASES, apply_overrides
from fttui.core.profiles.typed import Profile
from fttui.core.results.tables import to_markdown
from fttui.core.run.files import rundir
from fttui.core.run.launching.executors import LocalRun


def parse_grid(specs: list[str]) -> list[tuple[str, list[int]]]:
    grid: list[tuple[str, list[int]]] = []
    for spec in specs:
        key, sep, vals = spec.partition("=")
        key = key.strip()
        if not sep or not vals.strip():
            raise FttuiError(f"--grid {spec!r}: expected KEY=V1,V2,... e.g. batch_size=1,2,4")
        try:
            values = sorted({int(v) for v in vals.split(",") if v.strip()})
        except ValueError:
            raise FttuiError(f"--grid {spec!r}: values must be integers") from None
        if not values:
            raise FttuiError(f"--grid {spec!r}: no values")
        if any(k == key for k, _ in grid):
            raise FttuiError(f"--grid {key}: given twice")
        grid.append((key, values))
    if not grid:
        raise FttuiError("give at least one --grid KEY=V1,V2,...")
    return grid


@dataclass
class Cell:
    settings: dict[str, int]
    status: str = "pending"  # completed | failed | oom | cancelled | skipped
    row: dict | None = None
    skipped_because: dict[str, int] | None = None
    run_id: str | None = None


@dataclass
class SweepResult:
    sweep_id: str
    grid: list[tuple[str, list[int]]]
    cells: list[Cell] = field(default_factory=list)
    interrupted: bool = False


def check_sweep(cell: Profile) -> None:
    """One line when a cell cannot run as a sweep's cell: the sweep starts each cell on this
    machine alone (:class:`LocalRun`), so a cell of several nodes would start node 0 and wait for
    the others forever."""
    nodes = cell.devices.nodes
    if nodes > 1:
        raise FttuiError(
            f"the sweep runs on one machine, the profile has devices.nodes = {nodes}: every node "
            "would have to launch each cell together; sweep one node's setup (nodes = 1)"
        )


def _dominates(a: dict[str, int], b: dict[str, int]) -> bool:
    return all(a[k] >= b[k] for k in b) and any(a[k] > b[k] for k in b)


class Sweeper:
    def __init__(
        self,
        resolved: Profile,
        grid: list[tuple[str, list[int]]],
        steps: int | None = 10,
        on_cell: Callable[[Cell], None] | None = None,
    ):
        self.resolved = resolved
        self.grid = grid
        self.steps = steps
        self.on_cell = on_cell or (lambda c: None)
        self.sweep_id = rundir.new_run_id(f"sweep-{resolved.name or 'profile'}")
        self.current: LocalRun | None = None  # the cell's run while it runs
        # validate every cell's settings before running any
        self.cells = []
        keys = [k for k, _ in grid]
        for combo in itertools.product(*(v for _, v in grid)):
            settings = dict(zip(keys, combo))
            check_sweep(self._cell_profile(settings))
            self.cells.append(Cell(settings))

    def _cell_profile(self, settings: dict[str, int]) -> Profile:
        over = {ALIASES.get(k, k): v for k, v in settings.items()}
        if self.steps:
            over["train.max_steps"] = self.steps
        return apply_overrides(self.resolved, over)

    def run(self) -> SweepResult:
        res = SweepResult(self.sweep_id, self.grid, self.cells)
        oom_cells: list[dict[str, int]] = []
        try:
            for cell in self.cells:
                blocker = next((o for o in oom_cells if _dominates(cell.settings, o)), None)
                if blocker is not None:
                    cell.status, cell.skipped_because = "skipped", blocker
                    self.on_cell(cell)
                    continue
                run = LocalRun(self._cell_profile(cell.settings), kind="sweep", group=self.sweep_id)
                rd = run.start()
                self.current = run
                cell.run_id = rd.run_id
                while run.final_state() is None:
                    if not run.alive():
                        break
                    time.sleep(0.3)
                self.current = None
                st = run.final_state()
                cell.status = st.status if st is not None else "failed"
                cell.row = rd.row()
                if cell.status == "oom":
                    oom_cells.append(cell.settings)
                self.on_cell(cell)
                if cell.status == "cancelled":
                    res.interrupted = True
                    break
        except KeyboardInterrupt:
            res.interrupted = True
            self.cancel_current()
            raise
        return res

    def cancel_current(self, timeout: float = 60) -> None:
        run = self.current
        if run is None:
            return
        run.cancel()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and run.final_state() is None and run.alive():
            time.sleep(0.2)


# ---------------------------------------------------------------------------------------------
def _mem_gb(row: dict | None) -> tuple[str, str]:
    """(peak memory in GB, which memory) of a row: GPU (NVML, max over cards) or host RSS."""
    if not row:
        return "", ""
    gpu = row.get("peak_gpu_mem_mb") or []
    if gpu:
        return f"{max(gpu) / 1024:.2f}", "GPU"
    rss = row.get("peak_host_rss_mb")
    return ("" if rss is None else f"{rss / 1024:.2f}"), "host RSS"


def _s_per_step(row: dict | None) -> str:
    if not row or not row.get("steps") or row.get("duration_s") is None:
        return ""
    return f"{row['duration_s'] / row['steps']:.3f}"


def cell_text(cell: Cell) -> str:
    if cell.status == "skipped":
        return "OOM (skipped)"
    if cell.status == "oom":
        return "OOM"
    if cell.status != "completed":
        return cell.status
    gb, _ = _mem_gb(cell.row)
    return f"{gb} GB / {_s_per_step(cell.row)} s"


def render_rows(res: SweepResult) -> str:
    """One row per setting, like llama2-7b-3090.csv."""
    keys = [k for k, _ in res.grid]
    headers = [*keys, "status", "peak_mem_gb", "memory", "s_per_step", "samples_per_s", "tokens_per_s", "run"]
    body = []
    for c in res.cells:
        gb, which = _mem_gb(c.row)
        row = c.row or {}
        status = c.status
        if c.status == "skipped":
            status = (
                "OOM (skipped: " + ", ".join(f"{k}={v}" for k, v in (c.skipped_because or {}).items()) + " ran out)"
            )
        elif c.status == "oom":
            status = f"OOM ({row.get('oom_kind') or '?'})"
        body.append(
            [
                *(str(c.settings[k]) for k in keys),
                status,
                gb if c.status == "completed" else "",
                which if c.status == "completed" else "",
                _s_per_step(row) if c.status == "completed" else "",
                "" if row.get("samples_per_s") is None or c.status != "completed" else f"{row['samples_per_s']:.3f}",
                "" if row.get("tokens_per_s") is None or c.status != "completed" else f"{row['tokens_per_s']:.1f}",
                c.run_id or "",
            ]
        )
    return to_markdown(headers, body)


def render_matrix(res: SweepResult) -> str:
    """Two dimensions as a matrix of "peak GB / s per step" cells, OOM cells marked."""
    if len(res.grid) != 2:
        return ""
    (k1, v1), (k2, v2) = res.grid
    by = {(c.settings[k1], c.settings[k2]): c for c in res.cells}
    headers = [f"{k1} \\ {k2}", *(str(v) for v in v2)]
    body = [[str(a), *(cell_text(by[(a, b)]) for b in v2)] for a in v1]
    which = next((_mem_gb(c.row)[1] for c in res.cells if c.status == "completed"), "GPU")
    return to_markdown(headers, body) + f"\ncells: peak {which} memory in GB / seconds per training step\n"
