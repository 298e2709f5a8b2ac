"""Command-line conventions (issue 17): a description for every subcommand and a help line for
every option, `--json` wherever `--format json` is, `-v` debug logs, shell completion generated
from the parser (checked by running it in bash), an ambiguous run-id prefix listing the matches."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess

import pytest

from fttui.cli.conventions import completion_script, subcommands
from fttui.cli.main import build_parser
from tests.conftest import fttui_env, run_fttui


def test_every_subcommand_has_a_description_and_every_option_a_help_line():
    ap = build_parser()
    missing = []
    for name, p in [("fttui", ap), *subcommands(ap).items()]:
        if name != "fttui" and not p.description:
            missing.append(f"{name}: no description")
        for a in p._actions:
            if isinstance(a, (argparse._SubParsersAction, argparse._HelpAction)):
                continue
            if not a.help:
                missing.append(f"{name} {'/'.join(a.option_strings) or a.dest}: no help")
    assert not missing, missing


def test_json_is_a_synonym_of_format_json_and_v_works_after_the_subcommand():
    ap = build_parser()
    for cmd in ("profiles", "results"):
        assert ap.parse_args([cmd, "--json"]).format == "json"
    assert ap.parse_args(["-v", "results"]).verbose == 1  # -v before the subcommand is kept
    assert ap.parse_args(["results", "-vv"]).verbose == 2


def test_verbose_logs_what_is_read(fttui_home):
    out = run_fttui("results", "--json", "-v", env=fttui_env(FTTUI_HOME=str(fttui_home)))
    assert out.returncode == 0 and json.loads(out.stdout) == []
    assert "fttui D fttui.cli: results store " + str(fttui_home) in out.stderr
    quiet = run_fttui("results", "--json", env=fttui_env(FTTUI_HOME=str(fttui_home)))
    assert quiet.stderr == ""


def _complete(script: str, *words: str) -> list[str]:
    """What bash offers after typing WORDS (the last one is being completed)."""
    line = " ".join(words)
    prog = (f"{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _fttui_complete; "
            'printf "%s\\n" "${COMPREPLY[@]}"')
    out = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completion_offers_subcommands_options_and_choices():
    script = completion_script(build_parser(), "bash")
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    assert _complete(script, "fttui", "res") == ["results"]
    assert "--param" in _complete(script, "fttui", "probe", "--pa")
    assert _complete(script, "fttui", "probe", "--param", "") == ["batch_size", "max_seq_len"]
    assert set(_complete(script, "fttui", "results", "")) >= {"show", "export", "import", "--json"}
    assert {"bash", "zsh"} <= set(_complete(script, "fttui", "completion", ""))


def test_completion_command_prints_the_script():
    out = run_fttui("completion", "zsh")
    assert out.returncode == 0 and "bashcompinit" in out.stdout and "complete -o default -F _fttui_complete fttui" in out.stdout
    bad = run_fttui("completion", "tcsh")
    assert bad.returncode == 2


def test_ambiguous_run_prefix_lists_the_matches(fttui_home):
    runs = fttui_home / "runs"
    for rid in ("20261123-101010-tiny-lora-aaaa", "20261123-101011-tiny-lora-bbbb"):
        (runs / rid).mkdir(parents=True)
        (runs / rid / "profile.json").write_text("{}")
    env = fttui_env(FTTUI_HOME=str(fttui_home))
    out = run_fttui("attach", "--headless", "20261123-1010", env=env)
    assert out.returncode == 2
    msg = out.stderr.strip()
    assert len(msg.splitlines()) == 1
    assert "matches 2 runs" in msg and "aaaa" in msg and "bbbb" in msg and "give more of the id" in msg
    none = run_fttui("cancel", "nope", env=env)
    assert none.returncode == 2 and "no run matches 'nope'" in none.stderr


def test_report_json_has_the_tables_the_markdown_shows(fttui_home):
    from pathlib import Path

    from fttui.core.results.store import Store

    rows = json.loads((Path(__file__).resolve().parent.parent / "data" / "report_rows.json").read_text())["rows"]
    with Store(fttui_home / "results.sqlite") as store:
        for r in rows:
            store.put(r)
    env = fttui_env(FTTUI_HOME=str(fttui_home))
    md = run_fttui("report", env=env)
    js = run_fttui("report", "--json", env=env)
    assert md.returncode == js.returncode == 0, js.stderr
    data = json.loads(js.stdout)
    assert data["rows"] == len(rows) and data["tables"]
    for t in data["tables"]:
        assert f" {t['title']}\n" in md.stdout  # the same tables, by title
        assert len(t["cells"]) == len(t["text"]) and all(len(c) == len(t["headers"]) for c in t["cells"])
        for line in t["text"][:3]:
            assert "| " + " | ".join(line) + " |" in md.stdout


def test_ls_json_lists_the_runs(fttui_home):
    rid = "20261123-101010-tiny-lora-aaaa"
    (fttui_home / "runs" / rid).mkdir(parents=True)
    (fttui_home / "runs" / rid / "profile.json").write_text('{"name": "tiny-lora"}')
    (fttui_home / "runs" / rid / "status.json").write_text('{"status": "completed"}')
    out = run_fttui("ls", "--json", env=fttui_env(FTTUI_HOME=str(fttui_home)))
    assert out.returncode == 0, out.stderr
    (run,) = json.loads(out.stdout)
    assert (run["run_id"], run["status"], run["live"]) == (rid, "completed", False)


def test_run_attach_and_cancel_json(fttui_home):
    """`run --json`: progress on stderr, one JSON document on stdout whose row is the stored one;
    `attach --json` of the finished run gives the same; `cancel --json` of a run that is not live
    is the usual one-line error."""
    env = fttui_env(FTTUI_HOME=str(fttui_home))
    out = run_fttui("run", "--profile", "tiny-lora", "--set", "max_steps=2", "--set", "train.save=none", "--json",
                    env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["status"]["status"] == "completed" and "COMPLETED" in out.stderr
    stored = json.loads(run_fttui("results", "--json", env=env, check=True).stdout)
    assert [r["run_id"] for r in stored] == [doc["run_id"]] and stored[0]["steps"] == doc["row"]["steps"] == 2
    again = json.loads(run_fttui("attach", doc["run_id"], "--json", env=env, check=True).stdout)
    assert again["row"]["run_id"] == doc["run_id"] and again["status"]["status"] == "completed"
    cancel = run_fttui("cancel", doc["run_id"], "--json", env=env)
    assert cancel.returncode == 2 and "is not live" in cancel.stderr


def test_each_subcommand_owns_its_arguments_and_handler():
    """Every subcommand's parser and handler live in its own module (issue 21): main.py builds the
    root parser and dispatches, and passes nothing back into the command modules."""
    import argparse
    import inspect

    from fttui.cli import main as cli_main

    ap = build_parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        handler = p.get_default("handler")
        assert callable(handler), name
        assert handler.__module__ != cli_main.__name__, name
    text = inspect.getsource(cli_main)
    assert "_resolve" not in text and text.count("sub.add_parser") == 0
