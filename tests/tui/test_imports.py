"""The app never loads the training stack, and starts fast."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

HEAVY = ("torch", "transformers", "peft", "deepspeed", "bitsandbytes", "accelerate",
         "matplotlib")  # matplotlib: only when a report is written

CODE = r"""
import json, sys, time
t0 = time.perf_counter()
import fttui.tui.app
t_import = time.perf_counter() - t0
# what the screens import lazily
import fttui.tui.picker, fttui.tui.run_screen, fttui.tui.results, fttui.tui.dialogs, fttui.tui.help
import fttui.tui.probe_screen, fttui.core.experiments.probe
import fttui.core.run.launching.launch, fttui.core.run.launching.preflight, fttui.core.profiles, fttui.core.run.control.watch, fttui.core.results.store
import fttui.core.results.tables, fttui.core.results.report, fttui.cli.live, fttui.monitor
import fttui.core.data.records, fttui.worker.errors  # what preflight loads to check a data file
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1].split(",")))
print(json.dumps({"heavy": heavy, "import_s": t_import}))
"""

FIRST_FRAME = r"""
import asyncio, json, time
t0, c0 = time.perf_counter(), time.process_time()
from fttui.tui.app import FttuiApp

async def main():
    app = FttuiApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        return time.perf_counter() - t0, time.process_time() - c0

wall, cpu = asyncio.run(main())
print(json.dumps({"first_frame_s": wall, "first_frame_cpu_s": cpu}))
"""


def test_app_imports_no_training_stack():
    out = subprocess.run([sys.executable, "-c", CODE, ",".join(HEAVY)], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["heavy"] == [], res


def test_first_frame_is_quick():
    out = subprocess.run([sys.executable, "-c", FIRST_FRAME], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    # The CPU the process spent until its first frame: the work the app does, whatever else the
    # machine runs (the wall time, well under 0.5 s on a quiet machine, was 3.3 s once in a busy
    # suite run; it is bench/tui_first_frame.py's figure, docs/performance.md).
    assert res["first_frame_cpu_s"] < 2.0, res
