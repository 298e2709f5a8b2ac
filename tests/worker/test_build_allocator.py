"""The glibc setting of a ZeRO-3 or FSDP rank on the host (fttui.worker.partition.return_freed_blocks):
applied only where asked, a no-op without glibc, and it does return freed blocks that glibc would
otherwise keep."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fttui.worker import partition
from fttui.worker.partition import M_MMAP_THRESHOLD, ZERO3_MMAP_THRESHOLD, return_freed_blocks


class FakeLibc:
    def __init__(self):
        self.calls = []

    def mallopt(self, param, value):
        self.calls.append((param, value))
        return 1


def test_applied_where_asked():
    libc = FakeLibc()
    assert return_freed_blocks(True, libc=libc) is True
    assert libc.calls == [(M_MMAP_THRESHOLD, ZERO3_MMAP_THRESHOLD)] == [(-3, 128 * 1024)]


def test_not_applied_where_not_asked_nor_without_glibc(monkeypatch):
    libc = FakeLibc()
    assert return_freed_blocks(False, libc=libc) is False
    assert libc.calls == []
    monkeypatch.setattr(partition, "_glibc", lambda: None)
    assert return_freed_blocks(True) is False


def test_a_refused_setting_says_so():
    class Refusing(FakeLibc):
        def mallopt(self, param, value):
            super().mallopt(param, value)
            return 0

    assert return_freed_blocks(True, libc=Refusing()) is False


@pytest.mark.parametrize("sharding,use_cuda,applied", [
    ("fsdp", False, True), ("fsdp", True, False), ("none", False, False)])
def test_fsdp_ranks_on_the_host_return_freed_blocks_too(monkeypatch, sharding, use_cuda, applied):
    """FSDP on the host receives each parameter whole and frees it once sharded, and gathers and
    frees each layer in every step: the same pattern as ZeRO-3, the same setting (2 gloo ranks,
    100m model: rank 1's peak above baseline 2.55 -> 1.00 model, docs/estimate.md)."""
    from fttui.core.profiles import load_profile

    libc = FakeLibc()
    monkeypatch.setattr(partition, "_glibc", lambda: libc)
    prof = load_profile("tiny-lora", [f"sharding={sharding}", "devices.cpu_processes=2"])
    with partition.build_context(prof, "unused", 2, use_cuda, 1) as mode:
        assert mode == ("meta" if sharding == "fsdp" else "whole")
    assert libc.calls == ([(M_MMAP_THRESHOLD, ZERO3_MMAP_THRESHOLD)] if applied else [])


# 64 blocks of 1 MiB written, then every other one freed (the others keep the heap from being
# trimmed), after glibc has raised its dynamic threshold (a 4 MiB mmapped block freed first)
_SCRIPT = r"""
import ctypes, sys
from fttui.worker.partition import return_freed_blocks
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
big = libc.malloc(4 << 20); libc.memset(big, 1, 4 << 20); libc.free(big)
applied = return_freed_blocks(sys.argv[1] == "on")
blocks = [libc.malloc(1 << 20) for _ in range(64)]
for b in blocks:
    libc.memset(b, 1, 1 << 20)
before = rss()
for b in blocks[::2]:
    libc.free(b)
print(applied, (rss() - before + (32 << 20)) >> 20)
"""


@pytest.mark.skipif(partition._glibc() is None, reason="glibc only")
def test_freed_blocks_leave_the_process_only_with_the_setting():
    def kept(mode):
        out = subprocess.run([sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, check=True)
        applied, mib = out.stdout.split()
        return applied == "True", int(mib)

    applied_off, kept_off = kept("off")
    applied_on, kept_on = kept("on")
    assert (applied_off, applied_on) == (False, True)
    assert kept_off >= 30  # glibc's dynamic threshold: the freed 32 MiB stay resident
    assert kept_on <= 4  # a fixed 128 KiB threshold: they went back to the system
