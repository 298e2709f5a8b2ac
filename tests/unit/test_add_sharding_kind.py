"""Adding a sharding kind is one registry entry (issue 21; docs/architecture.md, "Sharding
kinds"): in a copy of the package, a fake kind added to fttui.core.base.shardings only is a
choice of the schema, loads, lists in `fttui profiles`, gets its launcher, its worker config
and its family's memory estimate, and the copy differs from the package in that one file (at most 3)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = "fttui/core/base/shardings.py"
ENTRY = '        Sharding("fsdp-hybrid", label="FSDP hybrid", **_FSDP),\n'

PROBE = """
import json
from fttui.core.profiles import load_profile
from fttui.core.memory import estimate
from fttui.worker.sharding import fsdp_arguments
r = load_profile("fake")
same_family = load_profile("fake", ["sharding=fsdp"])
print(json.dumps({"sharding": r.sharding, "launcher": r.launcher(),
                  "fsdp": fsdp_arguments(r)["fsdp"],
                  "host_peak": [estimate(p).host_peak_bytes for p in (r, same_family)]}))
"""


def _digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_a_fake_sharding_kind_is_one_registry_entry(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "fttui", src / "fttui", ignore=shutil.ignore_patterns("__pycache__"))
    registry = src / REGISTRY
    text = registry.read_text()
    anchor = "\n    )\n}\n"  # the end of KINDS (as ruff formats it)
    assert text.count(anchor) == 1
    registry.write_text(text.replace(anchor, "\n" + ENTRY + "    )\n}\n"))

    before, after = _digests(ROOT / "fttui"), _digests(src / "fttui")
    changed = sorted(f"fttui/{k}" for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert changed == [REGISTRY] and len(changed) <= 3

    proj = tmp_path / "proj"
    (proj / "profiles").mkdir(parents=True)
    (proj / "profiles" / "fake.toml").write_text(
        '# fttui run --profile fake\nextends = "tiny-lora"\nsharding = "fsdp-hybrid"\n'
        '[devices]\ngpus = 0\ncpu_processes = 2\n')
    env = {**os.environ, "PYTHONPATH": str(src), "FTTUI_HOME": str(tmp_path / "home")}
    listed = subprocess.run([sys.executable, "-m", "fttui", "profiles", "--json"], cwd=proj, env=env,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr[-2000:]
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert rows["fake"]["sharding"] == "fsdp-hybrid" and rows["fake"]["method"] == "lora"
    probe = subprocess.run([sys.executable, "-c", PROBE], cwd=proj, env=env, capture_output=True, text=True,
                           timeout=120)
    assert probe.returncode == 0, probe.stderr[-2000:]
    got = json.loads(probe.stdout)
    # the memory model reads the kind's family: the estimate of its FSDP family's, not zero
    (peak, family_peak) = got.pop("host_peak")
    assert peak == family_peak > 0
    assert got == {"sharding": "fsdp-hybrid", "launcher": "torchrun", "fsdp": "full_shard"}
