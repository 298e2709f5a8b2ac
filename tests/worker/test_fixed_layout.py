"""Under a host-memory limit every worker process gets the same address-space layout.

RLIMIT_AS counts mapped address space; with randomised placement the same imports map a MiB more
or less from one process to the next (docs/bench-probe.md), which decided the verdict at a
probe's boundary. The launcher asks for a fixed layout (``FTTUI_FIXED_LAYOUT=1`` in the child
environment under a host limit); the worker re-executes itself once with randomisation off.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fttui.core.profiles import load_profile
from fttui.core.run.launch import child_env

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
