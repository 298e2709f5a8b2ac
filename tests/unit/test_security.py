"""Security rules: no shell strings, secrets masked, private files."""

from __future__ import annotations

import ast
import json
import os
import stat
from pathlib import Path

import pytest

from fttui.core.base.redact import Redactor, redact_env
from fttui.core.results.store import Store
from tests.conftest import run_fttui

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
    from fttui.core.run.files import rundir

    with Store() as s:
        s.put({"run_id": "x", "status": "completed"})
    assert stat.S_IMODE(os.stat(paths.store_path()).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(paths.home()).st_mode) == 0o700
    rd = rundir.create({"name": "p"}, ["true"], {})
    assert stat.S_IMODE(os.stat(rd.path).st_mode) == 0o700
    for f in (rd.profile_path, rd.command_path):
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o600


# issue 28, item 6: one mask at every write boundary -------------------------------------------

def test_secret_names_and_not_figures():
    from fttui.core.base.redact import is_secret_name

    for name in ("HF_TOKEN", "--hub-token", "api-key", "--api_key", "password", "PGPASSWORD", "client_secret",
                 "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "auth_token", "Authorization", "private-key"):
        assert is_secret_name(name), name
    for name in ("tokens", "max_tokens", "tokenizer", "pad_token_id", "eos_token", "flops_per_token",
                 "tokens_per_s", "TOKENIZERS_PARALLELISM", "keys", "monkey", "num_tokens", "path"):
        assert not is_secret_name(name), name


def test_mask_text_each_shape():
    from fttui.core.base.redact import mask_text

    cases = {
        "--hub-token SEKRET1 --lr 2": "--hub-token *** --lr 2",
        "--api-key=SEKRET1 x": "--api-key=*** x",
        "RuntimeError: login failed: password=SEKRET1": "RuntimeError: login failed: password=***",
        "H 'Authorization: Bearer SEKRET1'": "H 'Authorization: Bearer ***'",
        "sent bearer SEKRET1 ok": "sent bearer *** ok",
        '{"client_secret": "SEKRET1"}': '{"client_secret": "***"}',
        f"tok hf_{'a' * 34} sk-{'b' * 24}": "tok *** ***",
        "max_tokens=5 tokens: 3 pad_token_id=0 loss=1.5": "max_tokens=5 tokens: 3 pad_token_id=0 loss=1.5",
    }
    for text, want in cases.items():
        assert mask_text(text, []) == want, text
    assert mask_text("value SEKRETENV here", ["SEKRETENV"]) == "value *** here"


def test_mask_structures_argv_env_and_numbers():
    from fttui.core.base.redact import mask

    obj = {"argv": ["python", "t.py", "--hub-token", "SEKRET1", "--password=SEKRET2", "--lr", "1e-4"],
           "env": {"HF_TOKEN": "SEKRET3", "MAX_TOKENS": "128"}, "flops_per_token": 123.0, "tokens": 5,
           "error": "password=SEKRET4", "nested": [{"api_key": "SEKRET5"}]}
    out = mask(obj, env={"MY_SECRET": "SEKRET6"})
    assert "SEKRET" not in json.dumps(out)
    assert out["argv"][:3] == ["python", "t.py", "--hub-token"] and out["argv"][-2:] == ["--lr", "1e-4"]
    assert out["env"]["MAX_TOKENS"] == "128" and out["flops_per_token"] == 123.0 and out["tokens"] == 5


def test_long_line_cut_never_splits_a_secret():
    """A line over 128 KiB is written in pieces; the secret in it is masked whichever read it
    arrives in (the log writer's pump, fed through a real pipe)."""
    import io
    import threading

    from fttui.core.run.supervising.logtee import _pump

    secret = "SEKRETLONGLINE"
    for pad in (65536 - 30, 65536 - 12, 128 * 1024 - 5, 128 * 1024 + 3):
        data = ("x" * pad + f" Authorization: Bearer {secret} password={secret} " + "y" * 70000 + "\n").encode()
        r, w = os.pipe()
        sink = io.BytesIO()
        with os.fdopen(r, "rb", buffering=0) as pipe:
            t = threading.Thread(target=_pump, args=(pipe, sink, Redactor({})))
            t.start()
            with os.fdopen(w, "wb", buffering=0) as out:
                for i in range(0, len(data), 4093):
                    out.write(data[i:i + 4093])
            t.join(timeout=60)
        got = sink.getvalue()
        assert secret.encode() not in got and got.count(b"***") == 2, pad
        assert len(got) == len(data) - 2 * (len(secret) - 3)


@pytest.mark.parametrize("name", ["my-token-test", "secret-project", "passwd-list", "pat-notes", "token"])
def test_a_profile_file_named_like_a_secret_keeps_its_errors(tmp_path, name):
    """Issue 36, item 8: a file whose name holds `token`, `secret`, `passwd` or starts with
    `pat-` names a file, not a secret: its errors are said in full."""
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / f"{name}.toml").write_text('extends = "tiny-lora"\n[train]\nbatch_sise = 2\n')
    out = run_fttui("run", "--profile", name, "--headless", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "***" not in out.stderr and "train.batch_sise: unknown key" in out.stderr, out.stderr
    assert f"{name}.toml" in out.stderr
