"""The end summary's GPU figure on a shared card: measured on an H100 while another process held
10 GiB of it (bench/gpu_verify.sh, step visible), the row's device figure was 11,702 MB and the
run's own processes 838 MB; the summary says both, not the device's alone."""

from __future__ import annotations

import json


def _summary(tmp_path, **row):
    from fttui.cli.live import summary_lines
    from fttui.core.run.files.rundir import RunDir

    run = tmp_path / "20261125-221058-tiny-lora-9091"
    run.mkdir()
    (run / "row.json").write_text(json.dumps({"run_id": run.name, "status": "completed", "steps": 40, **row}))
    return "\n".join(summary_lines(RunDir(run)))


def test_shared_card_peak_names_the_device_and_the_run(tmp_path):
    text = _summary(tmp_path, peak_gpu_mem_mb=[11702.4], peak_gpu_proc_mb=[838.0])
    assert "peak GPU 11702 MB device, 838 MB this run" in text


def test_peak_without_per_process_figures_and_without_a_card(tmp_path):
    line = next(ln for ln in _summary(tmp_path, peak_gpu_mem_mb=[16705.0], peak_gpu_proc_mb=[]).splitlines()
                if "peak GPU" in ln)
    assert line.endswith("peak GPU 16705 MB")
    (tmp_path / "cpu").mkdir()
    assert "peak GPU memory not measured" in _summary(tmp_path / "cpu", peak_gpu_mem_mb=[])


def test_a_row_without_a_tree_peak_says_so(tmp_path):
    """A row that holds the column with no value (JSON null): its place says ``-`` (it was the
    text "-" given to the MB format: TypeError)."""
    text = _summary(tmp_path, peak_host_rss_mb=812.0, peak_tree_rss_mb=None, peak_gpu_mem_mb=[])
    assert "peak host RSS 812 MB" in text and "tree - sampled" in text
