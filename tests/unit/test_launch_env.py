"""Environment fttui adds to training processes (fttui.core.run.launching.launch.child_env)."""

from fttui.core.run.launching.launch import child_env
from fttui.core.profiles import load_profile


def test_cpu_runs_mmap_big_tensors_so_peak_rss_follows_live_tensors():
    env = child_env(load_profile("tiny-lora"))
    assert env["MALLOC_MMAP_THRESHOLD_"] == str(4 << 20)
    assert env["MALLOC_ARENA_MAX"] == "1"


def test_host_budget_keeps_the_fine_threshold_and_gpu_runs_keep_glibc_defaults():
    assert child_env(load_profile("tiny-lora", ["limits.host_memory=2GiB"]))["MALLOC_MMAP_THRESHOLD_"] == "32768"
    gpu = child_env(load_profile("tiny-lora", ["gpus=1"]))
    assert "MALLOC_MMAP_THRESHOLD_" not in gpu and "MALLOC_ARENA_MAX" not in gpu


def test_cpu_runs_keep_the_heap_top_mapped_so_steps_do_not_fault_it_back():
    # a fixed mmap threshold also fixes glibc's trim threshold at 128 KiB: each step gave the
    # heap's free top back and faulted it in again (bench/measure_cost.py, docs/benchmarks.md)
    assert child_env(load_profile("tiny-lora"))["MALLOC_TRIM_THRESHOLD_"] == str(32 << 20)
    # the probe's host budget keeps its own settings, GPU runs glibc's defaults
    assert "MALLOC_TRIM_THRESHOLD_" not in child_env(load_profile("tiny-lora", ["limits.host_memory=2GiB"]))
    assert "MALLOC_TRIM_THRESHOLD_" not in child_env(load_profile("tiny-lora", ["gpus=1"]))


def test_host_budget_allocates_small_objects_from_the_heap_grown_by_what_it_needs():
    # with pymalloc's arenas and glibc's 128 KiB top pad a fresh trial's peak moved by whole
    # activations between processes at one value (tests/e2e/test_probe_peaks.py, docs/bench-probe.md)
    limited = child_env(load_profile("tiny-lora", ["limits.host_memory=2GiB"]))
    assert limited["PYTHONMALLOC"] == "malloc" and limited["MALLOC_TOP_PAD_"] == "0"
    for other in (child_env(load_profile("tiny-lora")), child_env(load_profile("tiny-lora", ["gpus=1"]))):
        assert "PYTHONMALLOC" not in other and "MALLOC_TOP_PAD_" not in other


def test_host_budget_on_cpu_trains_on_one_thread_unless_the_user_says(monkeypatch):
    # two torch threads made a fresh process's peak at one value take one of two values
    # (docs/bench-probe.md, "Not yet with two torch threads"): the probe's answer did not repeat
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert child_env(load_profile("tiny-lora", ["limits.host_memory=2GiB"]))["OMP_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS" not in child_env(load_profile("tiny-lora"))
    assert "OMP_NUM_THREADS" not in child_env(load_profile("tiny-lora", ["limits.host_memory=2GiB", "gpus=1"]))
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's choice is theirs (the process inherits it)
    assert "OMP_NUM_THREADS" not in child_env(load_profile("tiny-lora", ["limits.host_memory=2GiB"]))
