"""The batch script `fttui submit` writes takes no line from a value (issue 36, item 2): a newline
or a carriage return in any option or in the profile's name is refused in one line, and the
script of ordinary values parses back to exactly the directives and the command asked for."""

from __future__ import annotations

import shlex
import sys

import pytest

from tests.conftest import run_fttui

BREAKS = ["gpu\ntouch PWNED\n#", "gpu\rtouch PWNED", "gpu\x00x", "gpu\x1b]0;t\x07", "gpu\u2028x"]


@pytest.mark.parametrize("option", ["--partition", "--account", "--time", "--sbatch-arg"])
@pytest.mark.parametrize("value", BREAKS)
def test_a_control_character_in_an_option_is_refused_in_one_line(fttui_home, option, value):
    arg = f"{option}=--qos={value}" if option == "--sbatch-arg" else f"{option}={value}"
    if "\x00" in value:  # no argv can carry a NUL: the options' own check, in process
        from fttui.core.base.errors import FttuiError
        from fttui.core.run.slurm.slurmjob import SubmitOptions, check_options

        field = option.lstrip("-").replace("-", "_")
        opts = SubmitOptions(nodes=2, **({"sbatch_args": (f"--qos={value}",)} if field == "sbatch_arg"
                                         else {field: value}))
        with pytest.raises(FttuiError, match="control character"):
            check_options(opts)
        return
    out = run_fttui("submit", "--profile", "tiny-lora", "--nodes", "2", arg, "--dry-run")
    assert out.returncode == 2, out.stdout + out.stderr
    err = out.stderr.strip()
    assert len(err.splitlines()) == 1 and f"{option} " in err and "control character" in err, err
    assert "\x1b" not in err and out.stdout == ""
    assert not list((fttui_home / "runs").glob("*")) if (fttui_home / "runs").exists() else True


def test_a_profile_name_with_a_newline_never_reaches_the_script(fttui_home, tmp_path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "x\ntouch PWNED.toml").write_text('extends = "tiny-lora"\n')
    out = run_fttui("submit", "--profile", "profiles/x\ntouch PWNED.toml", "--nodes", "2", "--dry-run", cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "cannot be a profile's name" in out.stderr and out.stdout == ""

    from fttui.core.base.errors import FttuiError
    from fttui.core.profiles import load_profile
    from fttui.core.run.slurm.slurmjob import SubmitOptions, script_text

    prof = load_profile("tiny-lora")
    odd = prof.with_settings({}).__class__.from_dict(prof.to_dict() | {"name": "x\ntouch PWNED"})
    with pytest.raises(FttuiError, match="the profile's name"):
        script_text(odd, SubmitOptions(nodes=2), fttui_home / "runs" / "r")


def test_the_script_parses_back_to_the_directives_and_command_asked_for(fttui_home):
    values = {"--partition": "gpu part's \"q\"", "--account": "acct $(x) `y`", "--time": "1-02:00:00"}
    extra = ["--qos=high prio", "--comment=a;b|c&d"]
    args = [f"{k}={v}" for k, v in values.items()] + [f"--sbatch-arg={a}" for a in extra]
    out = run_fttui("submit", "--profile", "tiny-lora", "--nodes", "2", *args, "--dry-run", check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == "#!/bin/bash"
    directives, commands = [], []
    for line in lines[1:]:
        if line.startswith("#SBATCH "):
            directives.append(shlex.split(line[len("#SBATCH "):]))
        elif line.startswith("#") or not line.strip():
            continue
        else:
            commands.append(shlex.split(line))
    flat = [w for d in directives for w in d]
    assert all(len(d) == 1 for d in directives), directives  # one option per directive line
    for k, v in values.items():
        assert f"{k}={v}" in flat
    assert extra[0] in flat and extra[1] in flat
    names = [d[0].split("=", 1)[0] for d in directives]
    assert names == ["--job-name", "--nodes", "--ntasks-per-node", "--output", "--open-mode", "--partition",
                     "--time", "--account", "--qos", "--comment"]
    assert [c[0] for c in commands] == ["export", "srun", "exec"]  # the link test, then the training
    assert commands[0] == [f"FTTUI_HOME={fttui_home}"] or commands[0][1] == f"FTTUI_HOME={fttui_home}"
    link = commands[1]
    assert link[:3] == ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1"] and link[3] == sys.executable
    assert link[4:6] == ["-m", "fttui.integrations.linktest"] and "-m" in link[6:]
    assert "fttui.core.experiments.link" in link and "||" in link  # parsed and kept; a failure goes on
    assert commands[2][:4] == ["exec", "srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert commands[2][4] == sys.executable and commands[2][5:8] == ["-m", "fttui", "run"]


def test_no_link_test_leaves_the_first_step_out(fttui_home):
    out = run_fttui("submit", "--profile", "tiny-lora", "--nodes", "2", "--no-link-test", "--dry-run", check=True)
    commands = [ln for ln in out.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    assert [shlex.split(c)[0] for c in commands] == ["export", "exec"]
    assert "linktest" not in out.stdout
