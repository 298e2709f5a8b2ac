"""The lines a user reads after `fttui estimate`, `fttui plan` and a headless run, each a plain
sentence (issue 40 item 7): the memory line, the uncalibrated time line, the plan's heading and
the run summary's duration, GPU and FLOPs figures."""

from __future__ import annotations

import json

from tests.conftest import run_fttui


def test_estimate_of_a_cpu_profile_reads_plainly():
    out = run_fttui("estimate", "--profile", "tiny-lora", check=True).stdout
    lines = out.splitlines()
    assert [ln for ln in lines if ln != ln.rstrip()] == []  # no trailing spaces (item 7c)
    assert "memory from the formula, not calibrated (`--calibrate` fits it to this profile's measured rows)" in lines
    time = lines[-1]
    assert time.startswith("time: 128 steps x ")
    assert time.endswith(" (uncalibrated: no stored run to calibrate from, so a default 5 GFLOP/s per CPU process "
                         "and 3.8 ms fixed per micro batch, 1.9 ms per layer)")
    assert time.count("(") == 1  # one aside, not parentheses inside parentheses


def test_plan_heading_says_what_the_margin_is():
    lines = run_fttui("plan", "--profile", "tiny-lora", check=True).stdout.splitlines()
    assert lines[0].startswith("tiny-lora: 8 setups on CPU (1 process); 8 fit, keeping 5% of each memory budget "
                               "free; fastest first")
    assert lines[-1].startswith("time: uncalibrated: no stored run to calibrate from, so a default 5 GFLOP/s")


def _summary(tmp_path, **row) -> list[str]:
    from fttui.cli.live import summary_lines
    from fttui.core.run.files.rundir import RunDir

    run = tmp_path / "20261128-020928-python-9b8b"
    run.mkdir()
    (run / "row.json").write_text(json.dumps({"run_id": run.name, "status": "completed", **row}))
    return summary_lines(RunDir(run))


def test_a_command_runs_summary_says_no_training_time_and_no_gpu_figure(tmp_path):
    """A command that reported no training: its wall time alone, said so; no GPU figure is
    'not measured', not '- MB'."""
    lines = _summary(tmp_path, wall_s=6.0, peak_host_rss_mb=37.0, host_measure="processes", peak_gpu_mem_mb=[])
    line = next(ln for ln in lines if "wall" in ln)
    assert line.startswith("  duration 00:06 wall (no training time reported)  peak host RSS 37 MB")
    assert line.endswith("  peak GPU memory not measured") and "- MB" not in line


def test_a_cpu_runs_flops_figure_is_named(tmp_path):
    lines = _summary(tmp_path, duration_s=5.0, wall_s=16.0, flops_per_token=7.06e5, steps=3)
    assert "  duration 00:05 training, 00:16 wall  peak host RSS" in "\n".join(lines)
    assert "  model 7.06e+05 FLOPs/token" in lines


def test_a_card_named_short_is_the_one_card_it_names_or_one_line(fttui_home):
    """`--card H100` names three cards fttui knows: one line listing them, exit 2; `--card 4090`
    names one: its forecast is the full name's (a new user types the short name)."""
    from fttui.core.models.peaks import card_named

    assert card_named("4090") == "NVIDIA GeForce RTX 4090" and card_named("h100 pcie") == "NVIDIA H100 PCIe"
    assert card_named("RTX 5090", stored=["RTX 5090"]) == "RTX 5090"  # not in the table: timed from its rows only
    for cmd in (["estimate", "--profile", "llama2-7b-lora"], ["plan", "--profile", "tiny-lora", "--gpus", "1",
                                                              "--gpu-memory", "80GiB"]):
        out = run_fttui(*cmd, "--card", "H100")
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert "--card H100: 3 cards fttui knows match it (H100 80GB HBM3, H100 PCIe, H100 NVL)" in out.stderr
    short = run_fttui("estimate", "--profile", "llama2-7b-lora", "--card", "4090", check=True).stdout
    full = run_fttui("estimate", "--profile", "llama2-7b-lora", "--card", "NVIDIA GeForce RTX 4090", check=True).stdout
    assert short.splitlines()[-1] == full.splitlines()[-1] and short.splitlines()[-1].startswith("time: 69 steps x ")
