"""The plan screen and the link (issue 43 item 2, the app): with a link figure kept for the setup's
machine set (this machine for one node, as many nodes for several) the screen's forecast times each
setup's communication over it, as `fttui plan` does, and the line below the table says the link,
where and when it was measured and "ZeRO-3 over this link: N times the DDP step"; with none kept,
it says so and the forecast counts no communication."""

from __future__ import annotations

import socket
import time

import pytest
from textual.widgets import DataTable

from fttui.core.experiments import link
from fttui.core.experiments.comm import versus_ddp
from fttui.core.experiments.plan import plan_table
from fttui.core.experiments.planning import machine_budget, run_plan
from fttui.core.profiles import apply_overrides, load_profile
from fttui.monitor import FakeGpuSampler
from fttui.tui.app import FttuiApp
from fttui.tui.picker import PickerScreen
from fttui.tui.plan_screen import PlanScreen
from tests.tui.conftest import until
from tests.tui.fixtures import FAKE_GPUS
from tests.tui.test_picker_estimate import _text

pytestmark = pytest.mark.anyio

TWO_RANKS = ["data.source=synthetic", "data.num_samples=16", "data.max_seq_len=32", "devices.gpus=0",
             "devices.cpu_processes=2", "train.batch_size=1", "train.grad_accum=1"]


def _figure(nodes: tuple[str, ...], bandwidth: float, hours_ago: float, source: str) -> link.LinkFigure:
    inter = link.interconnect("gloo")
    return link.LinkFigure(nodes=nodes, interconnect=inter, backend="gloo", world=len(nodes), bandwidth=bandwidth,
                           latency_s=2e-4, sizes=((64 << 20, bandwidth),), t=time.time() - hours_ago * 3600,
                           key=link.link_key(nodes, inter), source=source)


async def _plan_shown(app, pilot, profile) -> PlanScreen:
    screen = PlanScreen(profile)
    await app.push_screen(screen)
    await until(pilot, lambda: screen.options is not None, timeout=60, what="the plan")
    await pilot.pause()
    return screen


def _table(screen) -> list[list[str]]:
    table = screen.query_one("#plan-table", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def test_the_plan_screen_forecasts_over_the_kept_link(fttui_home):
    one = apply_overrides(load_profile("tiny-full"), TWO_RANKS)
    two = apply_overrides(one, ["devices.nodes=2"])
    here = _figure((socket.gethostname(),) * 2, 1.25e8, 2, "fttui plan --link (torchrun on this machine)")
    nodes = _figure(("n1", "n2"), 1.25e7, 1, "fttui submit (Slurm job 7's first step)")
    app = FttuiApp(gpu_sampler=FakeGpuSampler(str(FAKE_GPUS)))
    async with app.run_test(size=(200, 50)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), what="picker")
        budget = machine_budget(one, gpus=0)
        assert budget.gpus == 0 and budget.ranks_per_node == 2

        # nothing kept: it says so, and the forecast is the plan's without a link
        screen = await _plan_shown(app, pilot, one)
        said = _text(app, "#plan-link")
        assert said.startswith(f"no link figure kept for this machine ({socket.gethostname()}, gloo)"), said
        assert "communication" in said and screen.kept_link is None
        alone = _table(screen)
        assert alone == plan_table(run_plan(one, budget, tokenise=False))
        app.pop_screen()

        # this machine's figure kept: the forecast over it, the link's words, where and when
        link.store(here)
        screen = await _plan_shown(app, pilot, one)
        assert screen.kept_link == here
        over = run_plan(one, budget, tokenise=False, link=here)
        assert _table(screen) == plan_table(over) != alone  # the communication is in the times
        said = _text(app, "#plan-link")
        for part in (link.words(here), link.kept_words(here), *versus_ddp(over)):
            assert " ".join(part.split()) in said, (part, said)
        assert "times the DDP step" in said and "fttui plan --link (torchrun on this machine)" in said
        app.pop_screen()

        # two nodes: the figure of as many nodes (the job's first step), not this machine's
        link.store(nodes)
        screen = await _plan_shown(app, pilot, two)
        assert screen.kept_link == nodes
        assert _table(screen) == plan_table(run_plan(two, machine_budget(two, gpus=0), tokenise=False, link=nodes))
        said = _text(app, "#plan-link")
        assert "link of n1, n2" in said and "Slurm job 7's first step" in said, said
        print(said)
