"""The built wheel is a working fttui: bundled profiles and demo data inside the package, the
license and metadata, the extras (issue 16, packaging)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import ROOT, fttui_env

# one wheel for both tests: under xdist a module's fixture is built once per worker
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("wheel")]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy of the sources: an in-tree build/ folder could carry stale modules.
    src = out / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".import_linter_cache",
        ".fttui-home", "tests", "bench"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out / "dist")], check=True, capture_output=True, timeout=300)
    (whl,) = (out / "dist").glob("fttui-*.whl")
    site = out / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(whl)],
                   check=True, capture_output=True, timeout=300)
    return whl, site


def _installed(site, *args: str, cwd, timeout: float = 240) -> subprocess.CompletedProcess:
    """``python -m fttui ARGS`` from the installed wheel, outside the checkout."""
    env = fttui_env(PYTHONPATH=str(site))
    return subprocess.run([sys.executable, "-m", "fttui", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_wheel_holds_profiles_demo_data_license_and_extras(wheel):
    whl, _ = wheel
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
        meta = next(z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    shipped = {p.name for p in (ROOT / "profiles").glob("*.toml")}
    assert {n.split("/")[-1] for n in names if n.startswith("fttui/_profiles/") and n.endswith(".toml")} == shipped
    assert "fttui/_profiles/data/tiny-instruct.jsonl" in names
    assert "fttui/tui/app.tcss" in names
    assert "fttui/core/profiles/foreign/known_keys.json" in names  # `--from FILE.yaml` reads it
    # `fttui run -- CMD` puts this folder on the command's PYTHONPATH (docs/commands.md)
    assert {"fttui/integrations/autoload/sitecustomize.py", "fttui/integrations/hf.py", "fttui/integrations/hf_info.py", "fttui/integrations/hf_marks.py",
            "fttui/integrations/stackdump.py", "fttui/integrations/commwait.py", "fttui/integrations/reporter.py",
            "fttui/integrations/lightning.py", "fttui/report.py"} <= names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: Apache-2.0" in meta and "Classifier: " in meta
    for extra in ("train", "qlora", "zero3", "all", "dev"):
        assert f"Provides-Extra: {extra}" in meta
    # Watching needs no training stack: torch and friends are only in extras.
    core = [ln for ln in meta.splitlines() if ln.startswith("Requires-Dist:") and "extra ==" not in ln]
    assert not [ln for ln in core if any(p in ln for p in ("torch", "transformers", "peft", "accelerate",
                                                           "deepspeed", "bitsandbytes"))], core


def test_installed_wheel_lists_and_runs_the_bundled_profiles(wheel, tmp_path, fttui_home):
    _, site = wheel
    where = subprocess.run([sys.executable, "-c", "import fttui; print(fttui.__file__)"], cwd=tmp_path,
                           env=fttui_env(PYTHONPATH=str(site)), capture_output=True, text=True, check=True)
    assert where.stdout.strip().startswith(str(site))  # the wheel's fttui, not the checkout's
    out = _installed(site, "profiles", "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    profiles = {p["name"]: p for p in json.loads(out.stdout)}
    assert profiles["tiny-lora"]["origin"] == "bundled" and "tiny-full" in profiles
    assert str(site) in profiles["tiny-lora"]["source"] or not os.path.isabs(profiles["tiny-lora"]["source"])
    # tiny-full reads the demo data shipped in the package.
    run = _installed(site, "run", "--profile", "tiny-full", "--headless", "--set", "max_steps=2", cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "COMPLETED" in run.stdout


def test_installed_wheel_without_extras_provides_the_reporting_api(wheel, tmp_path):
    """`pip install fttui` (no extras: torch is no core requirement, above) gives the public
    reporting API (issue 42): it writes the step events without importing torch or Textual."""
    _, site = wheel
    code = ("import sys, fttui; fttui.report_step(1, samples=4, tokens=64, loss=0.25); fttui.report_end(); "
            "print(fttui.report.__file__, fttui.API_VERSION, sorted(m for m in ('torch', 'textual', 'rich') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=fttui_env(PYTHONPATH=str(site), FTTUI_RUN_DIR=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    where, version, heavy = proc.stdout.split(maxsplit=2)
    assert where.startswith(str(site)) and version == "1.0" and heavy.strip() == "[]"
    lines = [json.loads(ln) for ln in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in lines] == ["phase", "start", "step", "end"]
    assert (lines[2]["samples"], lines[2]["tokens"], lines[2]["loss"]) == (4, 64, 0.25)
