"""Environment fttui adds to training processes (fttui.core.run.launch.child_env)."""

from fttui.core.run.launch import child_env
from fttui.core.profiles import load_profile


def test_cpu_runs_mmap_big_tensors_so_peak_rss_follows_live_tensors():
    env = child_env(load_profile("tiny-lora"))
    assert env["MALLOC_MMAP_THRESHOLD_"] == str(4 << 20)
    assert env["MALLOC_ARENA_MAX"] == "1"


def test_host_budget_keeps_the_fine_threshold_and_gpu_runs_keep_glibc_defaults():
    assert child_env(load_profile("tiny-lora", ["limits.host_memory=2GiB"]))["MALLOC_MMAP_THRESHOLD_"] == "131072"
    gpu = child_env(load_profile("tiny-lora", ["gpus=1"]))
    assert "MALLOC_MMAP_THRESHOLD_" not in gpu and "MALLOC_ARENA_MAX" not in gpu
