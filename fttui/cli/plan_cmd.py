"""`fttui plan`: every setup of a profile on given cards, whether it fits, how long it takes and
what it costs, fastest first (:mod:`fttui.core.experiments.plan`)."""

from __future__ import annotations

import json
import sys
from typing import Any

from fttui.cli.common import add_profile_args, resolve
from fttui.core.base.constants import EXIT_INTERRUPTED
from fttui.core.base.errors import FttuiError


def _methods(text: str | None) -> list[str] | None:
    from fttui.core.base.constants import METHODS

    if not text:
        return None
    out = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in out if m not in METHODS]
    if bad or not out:
        raise FttuiError(
            f"--methods {text}: unknown method {', '.join(bad) or '(none)'} (choose from {', '.join(METHODS)})"
        )
    return out


def _say_left_out(resolved, budget, args) -> None:
    """One line on stderr per sharding kind the plan left out because this installation cannot
    run it (its packages are missing), when it would have been planned."""
    from fttui.core.base import shardings
    from fttui.core.experiments.plan import candidates
    from fttui.core.run.launching.extras import uninstalled_shardings

    missing = uninstalled_shardings()
    if not missing:
        return
    prof = resolved
    methods = _methods(args.methods) or [shardings.of(prof.method, prof.sharding)[0]]
    world = budget.ranks_per_node * max(1, int(prof.devices.nodes or 1))
    # the kinds planned do not depend on the batch: one sample per rank is always a valid one
    wanted = {s for _, s, *_ in candidates(methods, world, budget.gpus > 0, world)}
    for name in sorted(set(missing) & wanted):
        print(f"left out: sharding {name} ({missing[name]})", file=sys.stderr)


def _stored_cards() -> list[str]:
    """The cards of the store's rows (``--card`` may name one fttui knows no peak of)."""
    from fttui.core.results.store import Store

    with Store() as store:
        return [str(r.get("gpu")) for r in store.rows() if r.get("gpu")]


def _reranked(trials: list) -> list:
    from fttui.core.experiments.measured import rerank

    return [t for t in rerank(trials) if t.measured]


def _measured_fields(rank: int | None, t) -> dict:
    return {
        "measured_rank": rank,
        "measured_step_s": t.step_s,
        "forecast_error": None if t.error is None else round(t.error, 4),
        "measure_status": t.status,
        "measure_run": t.run_id,
    }


def _measure(resolved, options, budget, steps: int, budget_s: float | None) -> tuple[list, bool]:
    """``--measure N``: the trials (each said on stderr as it ends, and why the measuring
    stopped) and whether Ctrl-C ended it."""
    from fttui.core.experiments.measured import measure

    def said(t) -> None:
        took = f", {t.step_s:.3g} s/step" if t.step_s is not None else ""
        print(f"measure: #{t.index + 1} {t.setup}: {t.status}{took} (run {t.run_id})", file=sys.stderr, flush=True)

    trials, why = measure(resolved, options, budget, steps, budget_s=budget_s, on_result=said)
    print(f"measure: stopped: {why}", file=sys.stderr, flush=True)
    return trials, why.startswith("interrupted")


def _write_measured(args, resolved, options, trials: list, budget) -> None:
    """``--write NAME`` after ``--measure``: the measured winner (``--pick K``: the K-th measured)."""
    from fttui.core.experiments.planning import write_profile

    ranked = _reranked(trials)
    if not ranked:
        raise FttuiError(f"--write {args.write}: no setup completed its measured trial; nothing written")
    k = 1 if args.pick is None else args.pick
    if not 1 <= k <= len(ranked):
        raise FttuiError(f"--pick {k}: {len(ranked)} setup(s) measured, give 1 to {len(ranked)}; nothing written")
    t = ranked[k - 1]
    pick = options[t.index]
    path = write_profile(
        args.write,
        resolved,
        pick,
        gpus=budget.gpus if budget.gpus else None,
        host_memory_limit=args.host_memory_limit,
    )
    print(f"wrote {path}: {pick.label()} (measured {t.step_s:.3g} s/step)", file=sys.stderr)


def _link(args, resolved, budget) -> tuple[Any, str]:
    """The measured link the plan times communication over, and the line that says which for
    stderr once the plan is made (bad input stays one line): ``--link`` measures it now, through
    the launcher a run of the profile uses (torchrun on this machine's ranks; an srun step over
    the profile's nodes) and keeps the figure; otherwise the kept figure of this machine (one node)
    or the newest of as many nodes, with where and when it was measured (for several ranks without
    one: that none is kept); None without one."""
    from fttui.core.experiments import link

    nodes = max(1, int(resolved.devices.nodes or 1))
    backend = link.backend_for(budget.gpus)
    if args.link:
        from fttui.core.experiments import linkrun

        if nodes > 1:
            measured = linkrun.measure_nodes(nodes, budget.gpus > 0, budget.gpus)
        else:
            measured = linkrun.measure_here(budget.ranks_per_node, budget.gpus > 0)
        print(f"measured the {link.words(measured)}", file=sys.stderr)
        return measured, ""
    kept = link.figure_for(nodes, backend)
    if kept is not None:
        return kept, f"using the {link.words(kept)} ({link.kept_words(kept)}; --link measures again)"
    return None, link.none_kept(nodes, backend) if budget.ranks_per_node * nodes > 1 else ""


def _link_lines(fig, options) -> list[str]:
    """What the link makes of the shardings, below the table (several ranks, a link measured)."""
    from fttui.core.experiments.comm import versus_ddp
    from fttui.core.experiments.link import words

    if fig is None:
        return []
    return [words(fig), *versus_ddp(options)]


def cmd_plan(args, resolve=resolve) -> int:
    from fttui.core.experiments.plan import HEADERS, plan_summary, plan_table
    from fttui.core.experiments.planning import machine_budget, run_plan, write_profile
    from fttui.core.models.peaks import card_named
    from fttui.core.results.tables import to_text

    if args.pick is not None and not args.write:
        raise FttuiError(f"--pick {args.pick}: it picks the setup --write NAME saves; give --write NAME too")
    resolved = resolve(args)
    if resolved.command.argv:
        raise FttuiError(f"{resolved.name}: a command profile runs its own script; fttui cannot plan it")
    if args.measure is not None and args.verify:
        raise FttuiError(
            f"--measure {args.measure} --verify {args.verify}: --measure runs the setups that fit already; give one"
        )
    if args.budget is not None and args.measure is None:
        raise FttuiError(f"--budget {args.budget}: it bounds --measure N; give --measure N too")
    budget_s = None
    if args.budget is not None:
        from fttui.core.experiments.measured import parse_budget

        budget_s = parse_budget(args.budget)
    if args.measure is not None and args.measure < 1:
        raise FttuiError(f"--measure {args.measure}: give the number of timed steps, 1 or more")
    if args.measure is not None and args.write:  # before minutes of trials, not after them
        from fttui.core.experiments.planning import write_path

        write_path(args.write)
    if args.measure is not None and resolved.devices.nodes > 1:
        raise FttuiError(
            f"--measure {args.measure}: the trials run on one machine, the profile has devices.nodes = "
            f"{resolved.devices.nodes}; measure one node's setup (nodes = 1)"
        )
    if args.verify and resolved.devices.nodes > 1:  # each check is a run on this machine alone
        raise FttuiError(
            f"--verify {args.verify}: the checks run on one machine, the profile has devices.nodes = "
            f"{resolved.devices.nodes}: every node would have to launch each check together; plan without "
            "--verify, or verify one node's setup (nodes = 1)"
        )
    budget = machine_budget(
        resolved,
        gpus=args.gpus,
        gpu_memory=args.gpu_memory,
        host_memory_limit=args.host_memory_limit,
        card=card_named(args.card, stored=_stored_cards()) if args.card else None,
        margin=args.margin,
    )
    prices = None
    if args.prices:
        from fttui.core.results.prices import load_prices

        prices = load_prices(args.prices)
    link, link_said = _link(args, resolved, budget)
    options = run_plan(
        resolved,
        budget,
        effective_batch=args.effective_batch,
        methods=_methods(args.methods),
        prices=prices,
        link=link,
    )
    if link_said:
        print(link_said, file=sys.stderr)
    _say_left_out(resolved, budget, args)
    trials: list = []
    interrupted = False
    if args.measure is not None:
        trials, interrupted = _measure(resolved, options, budget, args.measure, budget_s)
    if args.write and args.measure is not None:
        _write_measured(args, resolved, options, trials, budget)
    elif args.write:
        fitting = [o for o in options if o.fits]
        if not fitting:
            raise FttuiError(f"--write {args.write}: no setup fits; nothing written")
        k = 1 if args.pick is None else args.pick
        if not 1 <= k <= len(fitting):
            raise FttuiError(
                f"--pick {k}: {len(fitting)} setup{'s fit' if len(fitting) != 1 else ' fits'}, "
                f"give 1 to {len(fitting)}; nothing written"
            )
        pick = fitting[k - 1]
        path = write_profile(
            args.write,
            resolved,
            pick,
            gpus=budget.gpus if budget.gpus else None,
            host_memory_limit=args.host_memory_limit,
        )
        print(f"wrote {path}: {pick.label()}", file=sys.stderr)
    checked: dict[int, dict] = {}
    if args.verify:
        from fttui.core.experiments.planning import verify

        def said(res: dict) -> None:
            print(
                f"verify: {res['setup']}: {res['status']} (run {res['run_id']}, max_seq_len {res['max_seq_len']})",
                file=sys.stderr,
                flush=True,
            )

        for res in verify(resolved, options, args.verify, budget, on_result=said):
            checked[next(i for i, o in enumerate(options) if o.settings() == res["settings"])] = res
    if args.json:
        for line in _link_lines(link, options):
            print(line, file=sys.stderr)
        ranks = {t.index: rank for rank, t in enumerate(_reranked(trials), 1)}
        by_index = {t.index: (ranks.get(t.index), t) for t in trials}
        print(
            json.dumps(
                [
                    {
                        **o.to_dict(),
                        **(_measured_fields(*by_index[i]) if i in by_index else {}),
                        **(
                            {
                                "verified": checked[i]["held"],
                                "verify_run": checked[i]["run_id"],
                                "verify_status": checked[i]["status"],
                            }
                            if i in checked
                            else {}
                        ),
                    }
                    for i, o in enumerate(options)
                ],
                indent=2,
            )
        )
        return EXIT_INTERRUPTED if interrupted else 0
    print(f"{resolved.name}: {plan_summary(options, budget)}")
    print(to_text(list(HEADERS), plan_table(options)).rstrip("\n"))
    if options:
        print(f"time: {options[0].mfu_source}")
    for line in _link_lines(link, options):
        print(line)
    if trials:
        from fttui.core.experiments.measured import MEASURED_HEADERS, measured_table

        print("measured, fastest first:")
        print(to_text(list(MEASURED_HEADERS), measured_table(trials)).rstrip("\n"))
    for i, res in sorted(checked.items()):
        print(
            f"verified #{i + 1}: {res['status']}"
            + (" (held)" if res["held"] else " (did not hold)" if res["held"] is False else "")
            + f", run {res['run_id']}"
        )
    return EXIT_INTERRUPTED if interrupted else 0


def add_parser(sub) -> None:
    """The subcommand ``plan``: its arguments and handler."""
    p = sub.add_parser("plan", help="every setup that fits the cards, fastest first (time, cost, memory)")
    add_profile_args(p)
    p.add_argument("--gpus", type=int, metavar="N", help="cards per node to plan for (0: CPU; default: the profile's)")
    p.add_argument(
        "--gpu-memory",
        metavar="SIZE",
        help="one card's memory, e.g. 24GiB (default: this machine's card, else limits.gpu_memory)",
    )
    p.add_argument(
        "--card", metavar="NAME", help="the cards' name, for the forecast and --prices (default: this machine's)"
    )
    p.add_argument(
        "--effective-batch",
        type=int,
        metavar="N",
        help="samples per optimizer step to keep (default: the profile's micro x accum x ranks)",
    )
    p.add_argument("--methods", metavar="M1,M2", help="methods to plan (default: the profile's)")
    p.add_argument(
        "--margin", type=float, default=0.05, metavar="SHARE", help="share of each budget kept free (default 0.05)"
    )
    p.add_argument("--prices", metavar="FILE", help="price of one card-hour per GPU name (the report's price file)")
    p.add_argument(
        "--write",
        metavar="NAME",
        help="save the fastest setup that fits (with --measure: the fastest measured) as profiles/NAME.toml",
    )
    p.add_argument(
        "--pick", type=int, metavar="K", help="with --write: the K-th setup that fits, 1 to their count (default 1)"
    )
    p.add_argument(
        "--verify",
        type=int,
        metavar="K",
        help="run the K fastest setups that fit for real (a few steps at the longest real batch) and say which held",
    )
    p.add_argument(
        "--measure",
        type=int,
        metavar="N",
        help="time the setups that fit for real, in forecast order (a warm-up step, then N steps at the longest "
        "real batch, one recorded run each), rank them by the measured rate; stops when none left can win",
    )
    p.add_argument("--budget", metavar="TIME", help="with --measure: start no trial after this long, e.g. 90s, 10m, 1h")
    p.add_argument(
        "--link",
        action="store_true",
        help="measure the link between the ranks first (an all-reduce test: torchrun on this machine; over "
        "devices.nodes > 1, an srun step across that many Slurm nodes; kept per machine set) and time each "
        "setup's communication over it; a failed test exits 5",
    )
    p.add_argument("--json", action="store_true", help="the setups as a JSON list, fastest first")
    p.set_defaults(handler=cmd_plan)
