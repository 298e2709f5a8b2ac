"""`fttui plan --link` (issue 43 item 2): the link test through torchrun on 2 CPU ranks of this
machine gives a bandwidth and a latency, kept for the machine set, and the plan times each
sharding's communication over it; a later plan without --link uses the kept figure and says where
and when it was measured. A test that fails (its ranks given a network interface that does not
exist) is one line and exit 5, nothing kept. Over several nodes: tests/e2e/test_slurm.py."""

from __future__ import annotations

import json
import re

import pytest

from fttui.core.base.constants import EXIT_LINK_FAILED
from tests.conftest import fttui_env, run_fttui

pytestmark = [pytest.mark.e2e]

PLAN = ["plan", "--profile", "tiny-full", "--gpus", "0", "--set", "devices.cpu_processes=2",
        "--set", "data.max_seq_len=32", "--effective-batch", "2"]


def test_plan_link_measures_keeps_and_uses_the_link(fttui_home):
    r = run_fttui(*PLAN, "--link", timeout=300)
    assert r.returncode == 0, r.stderr
    said = re.search(r"measured the link of (\S+) \(gloo, 2 ranks\): bus bandwidth ([\d.]+) GB/s at 64 MiB, "
                     r"latency ([\d.]+) us", r.stderr)  # no exponent form
    assert said, r.stderr
    assert float(said.group(2)) > 0 and float(said.group(3)) > 0
    kept = list((fttui_home / "links").glob("*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["world"] == 2
    lines = [x for x in r.stdout.splitlines() if "over this link: " in x]
    assert lines and all("times the DDP step" in x for x in lines), r.stdout
    assert "over the measured link" in r.stdout  # the forecast's words say what it counted
    again = run_fttui(*PLAN, "--json", timeout=300)
    assert again.returncode == 0 and f"using the link of {said.group(1)}" in again.stderr, again.stderr
    assert "by fttui plan --link (torchrun on this machine), kept in " in again.stderr, again.stderr
    print("; ".join([said.group(0), *lines]))


def test_a_failed_link_test_is_one_line_and_its_own_exit_code(fttui_home):
    """The ranks cannot open their link (gloo told to use an interface this machine lacks): the
    plan ends with the rank's error in one line and exit 5, not bad input's 2; nothing is kept."""
    r = run_fttui(*PLAN, "--link", env=fttui_env(GLOO_SOCKET_IFNAME="fttui-none0"), timeout=300)
    assert r.returncode == EXIT_LINK_FAILED == 5, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fttui: link test failed (torchrun exit "), r.stderr
    assert "fttui-none0" in lines[0] and not r.stdout, lines
    assert not (fttui_home / "links").exists() or not any((fttui_home / "links").glob("*.json"))
    print(lines[0])
