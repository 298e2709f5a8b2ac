"""Security rules: no shell strings, secrets masked, private files."""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

from fttui.core.base.redact import Redactor, redact_env
from fttui.core.results.store import Store

ROOT = Path(__file__).resolve().parents[2]


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node


def test_no_shell_strings_anywhere():
    """No os.system / os.popen, no shell=True, and every subprocess call gets an argument list."""
    bad = []
    for path in sorted((ROOT / "fttui").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for call in _calls(tree):
            f = call.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
            if owner == "os" and name in ("system", "popen"):
                bad.append(f"{path.relative_to(ROOT)}:{call.lineno}: os.{name}")
            for kw in call.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    bad.append(f"{path.relative_to(ROOT)}:{call.lineno}: shell=")
            if owner == "subprocess" and name in ("Popen", "run", "call", "check_call", "check_output"):
                if call.args and isinstance(call.args[0], (ast.Constant, ast.JoinedStr)):
                    bad.append(f"{path.relative_to(ROOT)}:{call.lineno}: a string command")
    assert not bad, bad


def test_redactor_masks_secret_env_values_and_token_shapes():
    env = {"HF_TOKEN": "hf_" + "a" * 34, "MY_API_KEY": "s3cr3tvalue", "PATH": "/usr/bin", "SHORT_TOKEN": "abc"}
    r = Redactor(env)
    line = (f"loading with token {env['HF_TOKEN']} key={env['MY_API_KEY']} path=/usr/bin "
            f"other hf_{'b' * 36} gh ghp_{'c' * 36}\n").encode()
    out = r(line).decode()
    assert "a" * 34 not in out and "s3cr3tvalue" not in out and "b" * 36 not in out and "c" * 36 not in out
    assert "path=/usr/bin" in out and out.count("***") == 4
    assert redact_env(env) == {"HF_TOKEN": "***", "MY_API_KEY": "***", "PATH": "/usr/bin", "SHORT_TOKEN": "***"}


def test_store_and_run_files_are_private(fttui_home, tmp_path):
    from fttui.core.base import paths
    from fttui.core.run import rundir

    with Store() as s:
        s.put({"run_id": "x", "status": "completed"})
    assert stat.S_IMODE(os.stat(paths.store_path()).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(paths.home()).st_mode) == 0o700
    rd = rundir.create({"name": "p"}, ["true"], {})
    assert stat.S_IMODE(os.stat(rd.path).st_mode) == 0o700
    for f in (rd.profile_path, rd.command_path):
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o600
