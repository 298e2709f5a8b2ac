"""The row is declared once (fttui.core.results.columns): a figure measured by the training is
three files (its event field, the Trainer callback that measures it, its declaration), and it
reaches the stored row; the store's columns, the trackers' parameters, the labels and
``--group-by`` are the declaration's (issue 21)."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from fttui.core.results import columns

ROOT = Path(__file__).resolve().parents[2]

# the three edits that add a measured figure ("fake_longest": here, the samples counted so far)
EDITS = {
    "fttui/core/base/event_records.py": ("    torch_ooms: int | None = None\n",  # the step event's
                                 "    torch_ooms: int | None = None\n    fake_longest: int | None = None\n"),
    "fttui/integrations/hf.py": ('peak_rss_mb=mem.get("peak_rss_mb"),',
                                 'peak_rss_mb=mem.get("peak_rss_mb"), fake_longest=self.c.samples,'),
    "fttui/core/results/columns.py": (
        "    # schema 7: commands (issue 17)\n",
        '    Figure("fake_longest", "INTEGER", lambda c: max((e.fake_longest for e in c.events if e.event == "step"\n'
        '                                                     and e.fake_longest is not None), default=None),\n'
        '           scope=RUN, label="the longest sample"),\n'
        "    # schema 7: commands (issue 17)\n"),
}

# in the copy: the Trainer callback writes two steps, the row is folded from the run's events and
# stored; no training run. No Trainer either: transformers' TrainerCallback (a base class whose
# hooks do nothing) is stood in for, which keeps the import of transformers, torch and peft (about
# 6 CPU-s) out of this check of fttui's own files.
PROBE = r"""
import json, os, sys, types
sys.modules["transformers"] = types.SimpleNamespace(TrainerCallback=type("TrainerCallback", (), {}))
from types import SimpleNamespace
from fttui.core.results.store import Store
from fttui.core.run.files.rundir import RunDir
from fttui.core.run.row.summary import row_so_far
from fttui.integrations.hf import FttuiCallback

run_dir = sys.argv[1]
cb = FttuiCallback(run_dir, via="worker", strict=True)
cb.active, cb.t0, cb.total_steps, cb.trainer = True, 0.0, 2, object()
for step, samples in ((1, 4), (2, 9)):
    cb.c.samples = samples
    cb.on_step_end(None, SimpleNamespace(global_step=step, epoch=0.5), None)
row = row_so_far(RunDir(run_dir))
with Store(os.path.join(run_dir, "store.sqlite")) as store:
    store.put(row)
    print(json.dumps(store.get(row["run_id"])))
"""


def _changed(a: Path, b: Path) -> list[str]:
    """Files under ``fttui/`` that differ between two trees (added or removed included)."""
    out = []
    for root, dirs, files in os.walk(b / "fttui"):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            rel = (Path(root) / name).relative_to(b)
            if not (a / rel).exists() or not filecmp.cmp(a / rel, b / rel, shallow=False):
                out.append(str(rel))
    return sorted(out)


def test_a_measured_figure_takes_three_files_and_reaches_the_stored_row(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "fttui", tree / "fttui", ignore=shutil.ignore_patterns("__pycache__"))
    for rel, (old, new) in EDITS.items():
        path = tree / rel
        text = path.read_text()
        assert text.count(old) == 1, rel
        path.write_text(text.replace(old, new))
    assert _changed(ROOT, tree) == sorted(EDITS)
    assert len(EDITS) <= 3
    run_dir = tmp_path / "runs" / "20260101-000000-fake-0000"
    run_dir.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(tree), "FTTUI_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(run_dir)], env=env, capture_output=True, text=True,
                          cwd=tree, timeout=240)  # cwd: not this checkout's fttui first on the path
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    assert row["fake_longest"] == 9  # the largest over the step events, folded from what the callback wrote
    assert row["steps"] == 2
    assert "fake_longest" not in columns.COLUMNS  # the real tree is untouched


def test_every_view_of_the_row_is_the_declaration():
    from fttui.core.results import labels
    from fttui.core.results.store import COLUMNS

    assert list(COLUMNS) == [f.name for f in columns.FIGURES]
    assert labels._LABEL_KEYS == columns.LABEL_KEYS
    assert set(columns.GROUP_BY) <= set(COLUMNS) and set(columns.SETTINGS) <= set(COLUMNS)
    text = (ROOT / "fttui" / "cli" / "report_cmd.py").read_text()
    assert "choices=list(GROUP_BY)" in text
    assert columns.effective_batch(4, 2, 3) == 24 and columns.effective_batch(None, 2, 3) is None
