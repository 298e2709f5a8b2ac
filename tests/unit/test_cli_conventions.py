"""Command-line conventions (issue 17): a description for every subcommand and a help line for
every option, `--json` wherever `--format json` is, `-v` debug logs, shell completion generated
from the parser (checked by running it in bash), an ambiguous run-id prefix listing the matches."""

from __future__ import annotations

import argparse
import os
import sys
import json
import shutil
import subprocess

import pytest

from fttui.cli.conventions import completion_script, subcommands
from fttui.cli.main import build_parser
from tests.conftest import ROOT, fttui_env, run_fttui


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


# issue 36, item 1: profile names are data, never code ------------------------------------------

HOSTILE_NAMES = ["x$(touch PWNED1)", "y`touch PWNED2`", "z$(id>PWNED4)", "w`id>PWNED5`", "q'uote", 'd"q', "sp ace", "new\nline", "[bold]m",
                 "-dash", "semi;touch PWNED3", "esc\x1b]0;t\x07"]


def _hostile_profiles(tmp_path):
    """A folder as a cloned repository could hold it: ./profiles with hostile file names."""
    work = tmp_path / "clone"
    (work / "profiles").mkdir(parents=True)
    for name in [*HOSTILE_NAMES, "good-one", "good.two+3"]:
        (work / "profiles" / f"{name}.toml").write_text('extends = "tiny-lora"\n')
    return work


def _complete_in(shell: str, work, cur: str, names: list[str] | None = None) -> list[str]:
    """What SHELL offers after `fttui run --profile CUR`, run in the folder ``work`` with the
    real `fttui` first on PATH (a wrapper that runs this Python); with ``names``, an `fttui` that
    prints them as its profile names (the script alone, whatever the command says)."""
    bindir = work / "bin"
    bindir.mkdir(exist_ok=True)
    wrapper = bindir / "fttui"
    if names is None:
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m fttui "$@"\n')
    else:
        (work / "names.txt").write_text("\n".join(names) + "\n")
        wrapper.write_text(f'#!/bin/sh\ncat "{work / "names.txt"}"\n')
    wrapper.chmod(0o755)
    script = work / "completion.sh"
    script.write_text(completion_script(build_parser(), shell))
    words = f"fttui run --profile '{cur}'"
    call = (f"COMP_WORDS=({words}); COMP_CWORD=3; _fttui_complete; "
            'for w in "${COMPREPLY[@]}"; do printf "<%s>\\n" "$w"; done')
    if shell == "bash":
        argv = ["bash", "-c", f"source {script}\n{call}"]
    else:  # zsh loads the bash function through bashcompinit (compinit first, as a user's ~/.zshrc has)
        argv = ["zsh", "-f", "-c", f"autoload -U compinit && compinit -u -D; source {script}\n"
                                   f"setopt ksharrays\n{call}"]
    env = fttui_env(PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(ROOT))
    out = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [w[1:-1] for w in out.stdout.splitlines() if w.startswith("<")]


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_runs_nothing_from_profile_names_and_offers_the_valid_ones(tmp_path, shell):
    if shutil.which(shell) is None:
        pytest.skip(f"SKIPPED LOUDLY: {shell} is not installed (scripts/setup.sh installs it as root)")
    work = _hostile_profiles(tmp_path)
    offered = _complete_in(shell, work, "")
    assert not list(work.glob("PWNED*")) and not list(ROOT.glob("PWNED*")), "a profile's name ran as code"
    assert {"good-one", "good.two+3", "tiny-lora"} <= set(offered)
    assert not set(offered) & set(HOSTILE_NAMES) and all("\n" not in w for w in offered)
    assert _complete_in(shell, work, "good") == ["good-one", "good.two+3"]
    assert _complete_in(shell, work, "x$(") == [] and not list(work.glob("PWNED*"))
    # the script on its own: whatever names it is given, it offers them as text and runs none
    raw = _complete_in(shell, work, "", names=[n for n in HOSTILE_NAMES if "\n" not in n])
    assert not list(work.glob("PWNED*")), "the completion script ran a name"
    assert set(raw) == {n for n in HOSTILE_NAMES if "\n" not in n}


def test_a_hostile_profile_name_is_refused_in_one_line_naming_the_file(tmp_path):
    work = _hostile_profiles(tmp_path)
    for name in ("x$(touch PWNED1)", "new\nline", "[bold]m"):
        out = run_fttui("run", "--profile", f"profiles/{name}.toml", "--headless", cwd=work)
        assert out.returncode == 2, out.stdout + out.stderr
        err = out.stderr.strip()
        assert len(err.splitlines()) == 1 and "cannot be a profile's name" in err and "rename the file" in err, err
    listing = run_fttui("profiles", cwd=work)
    assert listing.returncode == 0 and "good-one" in listing.stdout and "\x1b" not in listing.stdout
    assert "\x1b" not in listing.stderr and "\\x1b" in listing.stderr  # the warning names it, escaped
    assert not list(work.glob("PWNED*"))
