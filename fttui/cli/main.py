"""The `fttui` command.

Exit codes: 0 completed (or success), 1 failed, 2 bad input (profile, dataset, arguments),
3 out of memory, 4 cancelled, 130 interrupted before launch.
"""

from __future__ import annotations

import json
import os
import sys

from fttui import __version__
from fttui.core.base.constants import EXIT_INTERRUPTED, EXIT_OK, PROBE_PARAMS
from fttui.core.base.errors import FttuiError, ProfileError
from fttui.core.base.fmt import rel_path
from fttui.core.results.columns import GROUP_BY


def _add_profile_args(p) -> None:
    p.add_argument("--profile", "-p", help="profile name or path to a .toml file")
    p.add_argument("--from", dest="from_config", metavar="FILE.yaml",
                   help="a LLaMA-Factory or axolotl training config instead of a profile "
                        "(`fttui profiles --from FILE.yaml` shows the profile it becomes)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a profile key (dotted, e.g. train.batch_size=8); repeatable")
    p.add_argument("--gpu-memory-limit", metavar="SIZE",
                   help="cap each training process's CUDA memory (e.g. 24GiB)")
    p.add_argument("--host-memory-limit", metavar="SIZE",
                   help="cap the address space the training processes may add (e.g. 2GiB)")


def build_parser():
    import argparse

    from fttui.cli.conventions import SHELLS, finish_parser

    ap = argparse.ArgumentParser(prog="fttui", description="Launch, watch and record LLM fine-tuning runs.")
    ap.add_argument("--version", action="version", version=f"fttui {__version__}")
    ap.add_argument("--profile", "-p", help="launch this profile and open its run screen")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="with --profile: override a profile key (dotted, e.g. train.batch_size=8); repeatable")
    ap.add_argument("--headless", action="store_true", help="no app: plain progress lines")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")

    p = sub.add_parser("run", help="launch a profile, or any command (fttui run -- CMD ARGS...), and watch it",
                       description="Launch a profile (--profile, --from) or any training command given after "
                                   "`--` (plain python, torchrun, accelerate launch, deepspeed), supervise it "
                                   "and record its summary row. A command runs in the current folder; a "
                                   "Hugging Face Trainer in it reports its steps through fttui's callback "
                                   "(docs/commands.md).")
    _add_profile_args(p)
    p.add_argument("--resume", metavar="RUN",
                   help="continue RUN (a run id or unique prefix) from its last checkpoint, as a new run "
                        "with the same profile")
    p.add_argument("--headless", action="store_true", help="plain progress lines, no app or live view")
    p.add_argument("--detach", action="store_true", help="launch and return at once, printing the run id")
    p.add_argument("--name", help="with a command: the run's name (default: the script's name)")
    p.add_argument("--job", metavar="RUN", help="inside srun: this node's part of the Slurm job RUN (fttui submit)")
    p.add_argument("--json", action="store_true",
                   help="no app; progress on stderr, then the run (status and summary row) as JSON on stdout")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="the command to run and supervise instead of a profile")

    from fttui.cli import submit_cmd  # fttui submit owns its arguments and its handler
    submit_cmd.register(sub, _add_profile_args)

    p = sub.add_parser("profiles", help="list the profiles, or show the profile a YAML config becomes")
    p.add_argument("--format", choices=["table", "json"], default="table",
                   help="a table (default) or JSON")
    p.add_argument("--names", action="store_true", help="only the profile names, one per line (for completion)")
    p.add_argument("--from", dest="from_config", metavar="FILE.yaml",
                   help="print the profile (TOML) a LLaMA-Factory or axolotl config maps to, "
                        "with the keys that do not map")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="with --from: override a key of the mapped profile (e.g. devices.gpus=8); repeatable")

    p = sub.add_parser("results", help="the stored summary rows; export them, import other machines' rows",
                       description="Show the stored summary rows (default), `export` them as JSON lines "
                                   "(every column and the environment), or `import` such files from other "
                                   "machines (idempotent by run id; conflicts are reported, never overwritten).")
    p.add_argument("action", nargs="?", choices=["show", "export", "import"], default="show",
                   help="show (default), export or import")
    p.add_argument("files", nargs="*", metavar="FILE", help="import: export files to read")
    p.add_argument("--out", metavar="FILE", help="export: write here instead of stdout")
    p.add_argument("--format", choices=["table", "markdown", "csv", "json"], default="table",
                   help="show: a table (default), Markdown, CSV or JSON (every column)")
    p.add_argument("--kind", choices=["run", "probe", "sweep", "command", "watch", "all"], default="all",
                   help="only rows of this kind: runs, probe trials, sweep cells (default all)")
    p.add_argument("--limit", type=int, default=0, help="only the latest N rows")

    p = sub.add_parser("ls", help="list run directories (live ones marked *) with step, ETA and start time")
    p.add_argument("--json", action="store_true", help="the runs as JSON (step, total, ETA in s, start time)")

    p = sub.add_parser("cancel", help="stop a live run and everything it started")
    p.add_argument("run", nargs="?", help="run id or prefix (default: the latest live run)")
    p.add_argument("--json", action="store_true", help="print the stopped run (status and row) as JSON")

    p = sub.add_parser("attach", help="open the run screen of a live or finished run")
    p.add_argument("run", nargs="?", help="run id, prefix or run directory (default: latest live run)")
    p.add_argument("--headless", action="store_true", help="plain progress lines, no app")
    p.add_argument("--json", action="store_true",
                   help="no app; progress on stderr, then the run (status and row) as JSON on stdout")

    p = sub.add_parser("probe", help="find the largest batch size / sequence length that fits")
    _add_profile_args(p)
    p.add_argument("--param", choices=list(PROBE_PARAMS), default="batch_size",
                   help="the setting to probe (default batch_size)")
    p.add_argument("--range", default="1..1024", metavar="LO..HI", help="the values to search (default 1..1024)")
    p.add_argument("--steps", type=int, default=2, help="training steps per trial (default 2)")
    p.add_argument("--start", type=int, default=None, help="first value to try (default LO)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("--markdown", action="store_true", help="print the trial table as Markdown")

    p = sub.add_parser("sweep", help="run a grid of settings and render a reference-style table")
    _add_profile_args(p)
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="a dimension of the grid, e.g. batch_size=1,2,4; repeatable")
    p.add_argument("--steps", type=int, default=10, help="training steps per cell (default 10)")
    p.add_argument("--out", help="also write the Markdown table to this file")
    p.add_argument("--json", action="store_true", help="print the cells (settings, status, run id, row) as JSON instead")

    p = sub.add_parser("report", help="Markdown tables, CSVs and PNG charts of the stored rows")
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                   help="keep rows whose column KEY equals VALUE; repeatable (same key twice: either)")
    p.add_argument("--group-by", choices=list(GROUP_BY),
                   help="colour and order the charts' bars by this setting")
    p.add_argument("--baseline", metavar="RUN_ID", help="relative throughput against this run (id or prefix)")
    p.add_argument("--prices", metavar="FILE", help="TOML or CSV: GPU name -> price per card")
    p.add_argument("--out", metavar="DIR", help="write report.md, CSVs and PNG charts here (default: Markdown on stdout)")
    p.add_argument("--kind", choices=["run", "probe", "sweep", "command", "watch", "all"], default="all",
                   help="only rows of this kind (default all)")
    p.add_argument("--json", action="store_true", help="the tables as JSON (raw and shown cells) on stdout")

    from fttui.cli.data_cmd import add_parser as add_data_parser

    add_data_parser(sub, _add_profile_args)

    p = sub.add_parser("estimate", help="predict peak GPU memory per card and host memory, before launch")
    _add_profile_args(p)
    p.add_argument("--json", action="store_true", help="print the estimate as JSON")
    p.add_argument("--max", choices=list(PROBE_PARAMS),
                   help="the largest value that fits --gpu-memory")
    p.add_argument("--gpu-memory", metavar="SIZE", help="card size for --max / the fit check, e.g. 24GiB")
    p.add_argument("--calibrate", action="store_true",
                   help="fit the activation term to this profile's measured rows in the store")

    p = sub.add_parser("watch", help="the resource panels of a process fttui did not start",
                       description="Watch a running process fttui did not start (yours): its process tree's "
                                   "host memory and CPU and the cards it uses, in the app or as plain lines, "
                                   "until it ends or Ctrl-C (which never touches the process). A summary row "
                                   "only with --record.")
    p.add_argument("--pid", type=int, required=True, help="the process to watch (its children are watched too)")
    p.add_argument("--name", help="a name for the watch (default pid-PID-PROGRAM)")
    p.add_argument("--record", action="store_true", help="save a summary row (kind watch) when the watch ends")
    p.add_argument("--headless", action="store_true", help="plain lines, no app")
    p.add_argument("--detach", action="store_true", help="start the watch in the background and print its id")

    p = sub.add_parser("completion", help="print a shell completion script",
                       description="Print a completion script for bash or zsh: subcommands, options, their "
                                   "choices and profile names. Install: eval \"$(fttui completion bash)\" "
                                   "in ~/.bashrc (zsh: ~/.zshrc with `completion zsh`).")
    p.add_argument("shell", choices=list(SHELLS), help="bash or zsh")

    return finish_parser(ap)


def _is_tty() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty() and os.environ.get("TERM", "") != "dumb"


def _resolve(args) -> dict:
    from fttui.core.profiles import load_profile

    overrides = list(getattr(args, "overrides", []) or [])
    if getattr(args, "gpu_memory_limit", None):
        overrides.append(f"limits.gpu_memory={json.dumps(args.gpu_memory_limit)}")
    if getattr(args, "host_memory_limit", None):
        overrides.append(f"limits.host_memory={json.dumps(args.host_memory_limit)}")
    from_config = getattr(args, "from_config", None)
    if from_config and args.profile:
        raise FttuiError("give --profile or --from, not both")
    if from_config:
        from fttui.core.profiles.foreign import load_config_profile, unmapped_line

        resolved, mapped = load_config_profile(from_config, overrides)
        if mapped.unmapped:
            print(unmapped_line(mapped), file=sys.stderr)
        if mapped.deepspeed_file is not None:
            print(f"{mapped.where}: DeepSpeed config {rel_path(mapped.deepspeed_file.resolve())}", file=sys.stderr)
        if mapped.gpu_note and not gpus_given(overrides):
            print(f"{mapped.where}: {mapped.gpu_note}", file=sys.stderr)
        return resolved
    if not args.profile:
        raise FttuiError("give a profile: --profile NAME (`fttui profiles` lists them) or --from FILE.yaml")
    resolved = load_profile(args.profile, overrides)
    import logging

    logging.getLogger("fttui.cli").debug("profile %s from %s (%s)%s", resolved.get("name"), resolved.get("source"),
                                         resolved.get("origin"), f", overrides {overrides}" if overrides else "")
    return resolved


def gpus_given(overrides) -> bool:
    """An override sets the GPU count (``gpus=N`` or ``devices.gpus=N``)."""
    return any(str(o).split("=", 1)[0].strip() in ("gpus", "devices.gpus") for o in overrides or ())


def cmd_run(args) -> int:
    from fttui.cli.run_cmd import cmd_run as run

    return run(args, _resolve, _is_tty)


def cmd_profiles(args) -> int:
    from fttui.core.profiles import discover, load_profile, profile_summary

    if args.from_config:
        from fttui.core.profiles.foreign import load_config_profile, profile_toml, with_overrides

        overrides = list(getattr(args, "overrides", []) or [])
        try:
            _, mapped = load_config_profile(args.from_config, overrides)  # checked as the run would check it
            mapped = with_overrides(mapped, overrides)
        except ProfileError as e:  # the mapping stands, the profile is refused: show both
            from fttui.core.profiles.foreign import read_config

            mapped = read_config(args.from_config)  # a config that does not even map: its one line
            mapped.notes.insert(0, f"REFUSED: fttui run / estimate / probe / sweep --from refuse this profile: "
                                   f"{e.key + ': ' if e.key else ''}{e.message}" + (f" ({e.hint})" if e.hint else ""))
        if args.format == "json":
            print(json.dumps({"tool": mapped.tool, "profile": mapped.data, "notes": mapped.notes,
                              "unmapped": [{"key": k, "value": v, "why": why} for k, v, why in mapped.unmapped]},
                             indent=2, default=str))
        else:
            sys.stdout.write(profile_toml(mapped))
        return 0
    if args.names:
        print("\n".join(ref.path.stem for ref in discover()))
        return 0
    items, errors = [], []
    for ref in discover():
        try:
            items.append(profile_summary(load_profile(str(ref.path))) | {"origin": ref.origin})
        except FttuiError as e:
            errors.append(str(e))
    if args.format == "json":
        print(json.dumps(items, indent=2))
    else:
        from fttui.core.results.tables import to_text

        headers = ["name", "model", "method", "batch", "accum", "gpus", "seq_len", "dataset", "origin", "source"]
        body = [[str(i["name"]), str(i["model"]), str(i["method"]), str(i["batch_size"]), str(i["grad_accum"]),
                 str(i["gpus"]), str(i["max_seq_len"]), str(i["dataset"]), i["origin"], rel_path(i["source"])]
                for i in items]
        sys.stdout.write(to_text(headers, body))
    for e in errors:
        print(f"warning: {e}", file=sys.stderr)
    return 0




def cmd_results(args) -> int:
    from fttui.cli.results_cmd import cmd_results as run

    return run(args, _is_tty)


def cmd_ls(args) -> int:
    from fttui.cli.runs_cmd import cmd_ls as run

    return run(args)


def cmd_cancel(args) -> int:
    from fttui.cli.runs_cmd import cmd_cancel as run

    return run(args)


def cmd_attach(args) -> int:
    from fttui.cli.runs_cmd import cmd_attach as run

    return run(args, _is_tty)


def cmd_app(args) -> int:
    if args is not None and args.profile:
        args.detach = False
        return cmd_run(args)
    if not _is_tty():
        print("fttui: the app needs a terminal; use `fttui run --profile NAME --headless` "
              "or `fttui --profile NAME`", file=sys.stderr)
        return 2
    from fttui.tui.app import run_app

    return run_app()


def cmd_probe(args) -> int:
    from fttui.cli.probe_cmds import cmd_probe as run

    return run(args, _resolve)


def cmd_sweep(args) -> int:
    from fttui.cli.probe_cmds import cmd_sweep as run

    return run(args, _resolve)


def cmd_report(args) -> int:
    from fttui.cli.report_cmd import cmd_report as run

    return run(args)


def cmd_estimate(args) -> int:
    from fttui.cli.estimate_cmd import cmd_estimate as run

    return run(args, _resolve)


def cmd_data(args) -> int:
    from fttui.cli.data_cmd import cmd_data as run

    return run(args, _resolve)


def cmd_watch(args) -> int:
    from fttui.cli.watch_cmd import cmd_watch as run

    return run(args, _is_tty)


def cmd_completion(args) -> int:
    from fttui.cli.conventions import completion_script

    sys.stdout.write(completion_script(build_parser(), args.shell))
    return 0


def cmd_submit(args) -> int:
    from fttui.cli.submit_cmd import cmd_submit as run

    return run(args, _resolve)


COMMANDS = {
    "submit": cmd_submit,
    "completion": cmd_completion,
    "watch": cmd_watch,
    "estimate": cmd_estimate,
    "data": cmd_data,
    "report": cmd_report,
    "sweep": cmd_sweep,
    "probe": cmd_probe,
    "run": cmd_run,
    "profiles": cmd_profiles,
    "results": cmd_results,
    "ls": cmd_ls,
    "cancel": cmd_cancel,
    "attach": cmd_attach,
}


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) == 1 and _is_tty() and os.environ.get("FTTUI_NO_APP") != "1":
        # bare `fttui` on a terminal: the app at once (no parser to build before its first frame)
        if os.environ.get("FTTUI_LOG_LEVEL"):
            from fttui.cli.conventions import setup_logging

            setup_logging(0)
        try:
            return cmd_app(None)
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
    args = build_parser().parse_args(argv)
    from fttui.cli.conventions import setup_logging

    setup_logging(getattr(args, "verbose", 0) or 0)
    try:
        if args.cmd is None:
            return cmd_app(args)
        return COMMANDS[args.cmd](args)
    except FttuiError as e:
        from fttui.core.base.redact import mask_text

        print(f"fttui: {mask_text(str(e))}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("fttui: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
