"""bench/measure_cost.py's helpers on a tiny configuration: both sides run, the fttui figure is
read from the row and the ratio is the quotient of the two figures (the timing itself is the
benchmark's business, docs/benchmarks.md)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("measure_cost", ROOT / "bench" / "measure_cost.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_both_sides_run_and_the_ratio_is_their_quotient(tmp_path):
    mc = _bench()
    samples, seq = 40, 32  # 5 steps of batch 8
    home = mc.make_home(samples, seq, root=str(tmp_path))
    f = mc.run_fttui(home, threads=1)
    p = mc.run_plain(home, 1, samples, seq_len=seq)
    assert f["steady"] > 0 and p["steady"] > 0
    assert f["threads"] == p["threads"] == 1
    # the fttui figure is the row's, as `fttui results --format json` prints it
    rows = json.loads(mc.subprocess.run([mc.sys.executable, "-m", "fttui", "results", "--format", "json"],
                                        env=dict(mc.base_env(1), FTTUI_HOME=str(home)), cwd=str(home),
                                        capture_output=True, text=True, check=True).stdout)
    (row,) = [r for r in rows if r["run_id"] == f["run_id"]]
    assert row["samples_per_s"] == f["steady"]
    assert (row["samples"], row["batch_size"], row["max_seq_len"], row["status"]) == (samples, 8, seq, "completed")
    assert mc.ratio(f["steady"], p["steady"]) == pytest.approx(f["steady"] / p["steady"])
    with pytest.raises(ValueError):
        mc.ratio(f["steady"], 0)
    text = mc.table([(f, p)], "tiny")
    assert f"{f['steady']:.1f}" in text and f"{mc.ratio(f['steady'], p['steady']):.3f}" in text
