"""Under a host-memory limit every worker process gets the same address-space layout.

RLIMIT_AS counts mapped address space; with randomised placement the same imports map a MiB more
or less from one process to the next (docs/bench-probe.md), which decided the verdict at a
probe's boundary. The launcher asks for a fixed layout (``FTTUI_FIXED_LAYOUT=1`` in the child
environment under a host limit); the worker re-executes itself once with randomisation off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fttui.core.profiles import load_profile
from fttui.core.run.launching.launch import child_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADDR_NO_RANDOMIZE = 0x0040000

# What a worker's main does first, then the personality it runs with and its argv.
SCRIPT = ("import sys; from fttui.worker.limits import fixed_address_layout; fixed_address_layout(); "
          "print(open('/proc/self/personality').read().strip(), sys.argv[1:])")


def _run(env_add: dict[str, str]) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "FTTUI_FIXED_LAYOUT"}
    env.update(env_add, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, "-c", SCRIPT, "a", "b"], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout.split(maxsplit=1)
    return int(out[0], 16), out[1].strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux personality(2)")
def test_worker_reexecs_with_a_fixed_layout_when_asked():
    personality, argv = _run({"FTTUI_FIXED_LAYOUT": "1"})
    assert personality & ADDR_NO_RANDOMIZE
    assert argv == "['a', 'b']"  # the same command line after the re-exec
    personality, _ = _run({})
    assert not personality & ADDR_NO_RANDOMIZE


def test_launcher_asks_for_it_only_under_a_host_limit():
    limited = child_env(load_profile("tiny-lora", ['limits.host_memory="48MiB"']))
    assert limited["FTTUI_FIXED_LAYOUT"] == "1" and limited["PYTHONHASHSEED"] == "0"
    assert "FTTUI_FIXED_LAYOUT" not in child_env(load_profile("tiny-lora", []))


# ---------------------------------------------------------------- the base the limit is set on

def test_limit_base_rounds_to_its_granularity_and_by_default_not_at_all():
    from fttui.worker.limits import BASE_GRANULARITY, limit_base

    mib = 1 << 20
    # a page: a run's and a probe's workers get exactly the budget above their own bases (rounded
    # to a MiB they got rooms up to a MiB apart: see limit_base)
    assert BASE_GRANULARITY == 4096
    # the bases measured in fresh processes of tiny-lora's probe worker (docs/bench-probe.md)
    bases = [762384384, 762437632, 762503168, 762531840, 762580992]
    assert max(bases) - min(bases) < mib // 4
    assert [limit_base(b) for b in bases] == bases  # whole pages already
    assert {limit_base(b, granularity=mib) for b in bases} == {728 * mib}
    for b in [1, mib - 1, mib, mib + 1, 727 * mib + 12345]:
        r = limit_base(b, granularity=mib)
        assert r % mib == 0 and b <= r < b + mib
    assert limit_base(5 * mib, granularity=mib) == 5 * mib and limit_base(5 * mib + 1, granularity=mib) == 6 * mib


LIMIT_SCRIPT = """
import json, resource
from fttui.worker.limits import apply_host_limit, vm_size
got = apply_host_limit(48 << 20)
soft = resource.getrlimit(resource.RLIMIT_AS)[0]
line = next(l for l in open("/proc/self/limits") if l.startswith("Max address space"))
print(json.dumps({**got, "soft": soft, "proc_limits": int(line.split()[3]), "vm_after": vm_size()}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc")
def test_host_limit_is_the_rounded_base_plus_the_budget_and_reports_true_figures():
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, "-c", LIMIT_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    got = json.loads(out)
    from fttui.worker.limits import BASE_GRANULARITY

    assert got["host_memory_bytes"] == 48 << 20
    # what the process runs under, read two ways, is what the limits info says
    assert got["rlimit_as_bytes"] == got["soft"] == got["proc_limits"]
    rounded = got["rlimit_as_bytes"] - got["host_memory_bytes"]
    assert rounded % BASE_GRANULARITY == 0
    assert got["vm_base_bytes"] <= rounded < got["vm_base_bytes"] + BASE_GRANULARITY
    # vm_base_bytes is the measured address space (not rounded): the process is still about that size
    assert abs(got["vm_after"] - got["vm_base_bytes"]) < 1 << 20


TRIM_SCRIPT = """
import ctypes, json
from fttui.worker.limits import trim_heap
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def heap():
    line = next(l for l in open("/proc/self/maps") if "[heap]" in l)
    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
    return hi - lo
blocks = (ctypes.c_void_p * 4096)()  # allocated first: nothing of the test's own above the blocks
for i in range(4096):
    blocks[i] = libc.malloc(4096)  # 16 MiB of small blocks on the heap
grown = heap()
for i in reversed(range(4096)):
    libc.free(blocks[i])
freed = heap()
trimmed = trim_heap()
print(json.dumps({"grown": grown, "freed": freed, "after": heap(), "trimmed": trimmed}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_trim_heap_gives_the_free_heap_top_back():
    # a trim threshold above what is freed: free() itself leaves the top mapped, as after the imports
    env = dict(os.environ, PYTHONPATH=REPO, MALLOC_TRIM_THRESHOLD_=str(64 << 20), MALLOC_MMAP_THRESHOLD_="131072")
    got = json.loads(subprocess.run([sys.executable, "-c", TRIM_SCRIPT], env=env, capture_output=True, text=True,
                                    timeout=120, check=True).stdout)
    assert got["trimmed"] is True
    assert got["freed"] >= got["grown"] - (1 << 20)  # free() gave nothing back
    assert got["after"] < got["freed"] - (15 << 20)  # the trim gave the 16 MiB back
