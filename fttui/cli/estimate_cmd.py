"""`fttui estimate`: predicted peak GPU memory per card and host memory, before launching.

Plain text or JSON; no Rich needed (the table is fttui.core.results.tables' text form)."""

from __future__ import annotations

import json
import sys

from fttui.cli.common import add_profile_args, resolve
from fttui.core.base import shardings
from fttui.core.base.constants import PROBE_PARAMS
from fttui.core.base.errors import FttuiError


def _size(text: str, flag: str) -> int:
    from fttui.core.base.errors import SizeError
    from fttui.core.base.units import parse_size

    try:
        return parse_size(text)
    except SizeError as e:
        raise FttuiError(f"{flag}: {e}") from None


def _calibration(args, resolved):
    from fttui.core.memory import calibration_from_store
    from fttui.core.results.store import Store

    with Store() as store:
        rows = store.rows()
    return calibration_from_store(resolved, rows)


def _card_size(args, resolved) -> int | None:
    if getattr(args, "gpu_memory", None):
        return _size(args.gpu_memory, "--gpu-memory")

    limit = resolved.limits.gpu_memory or ""
    if limit:
        return _size(limit, "limits.gpu_memory")
    return None


def render_text(e, title: str = "") -> str:
    from fttui.core.memory import COMPONENTS, HOST_COMPONENTS, fmt_bytes
    from fttui.core.results.tables import to_text

    i = e.inputs
    lines = []
    per_node = i["gpus"] or i.get("cpu_processes") or 1
    where = f"{i['gpus']} GPU(s)" if i["gpus"] else "CPU"
    if i.get("nodes", 1) > 1:
        where += f" x {i['nodes']} nodes ({per_node * i['nodes']} ranks)"
    kind = shardings.find(i.get("sharding"))
    if kind is None or kind.sharded:
        where += f", sharding {i.get('sharding')}"
    head = (
        f"{title or i.get('profile') or ''}: {i['method']}, {i['precision']}, "
        f"batch {i['batch_size']} x seq {i['max_seq_len']}, "
        f"gradient checkpointing {'on' if i['gradient_checkpointing'] else 'off'}, "
        f"attention {i['attn_implementation']}, {where}"
    )
    lines.append(head)
    lines.append(
        f"model {i['model']} ({i['arch']}, {i['params']:,} params"
        + (
            f", LoRA r{i['lora_r']} {i['lora_params']:,} params on {','.join(dict.fromkeys(i['lora_modules']))}"
            if i["lora_params"]
            else ""
        )
        + ")"
    )
    if e.gpu_peak_bytes:
        rows = [[label, fmt_bytes(e.breakdown[k])] for k, label in COMPONENTS.items() if e.breakdown.get(k)]
        rows.append(["peak per card", fmt_bytes(max(e.gpu_peak_bytes))])
        lines.append("")
        lines.append(
            f"GPU, per card (x{len(e.gpu_peak_bytes)}" + (" on each node" if i.get("nodes", 1) > 1 else "") + "):"
        )
        lines.append(to_text(["component", "bytes"], rows).rstrip("\n"))
        if e.device_bytes:
            verdict = "fits" if e.fits else "does NOT fit"
            lines.append(f"card {fmt_bytes(e.device_bytes)}: {verdict}")
    hrows = [[label, fmt_bytes(e.host_breakdown[k])] for k, label in HOST_COMPONENTS.items() if e.host_breakdown.get(k)]
    hrows.append(["host peak", fmt_bytes(e.host_peak_bytes)])
    lines.append("")
    lines.append("host (this node):")
    lines.append(to_text(["component", "bytes"], hrows).rstrip("\n"))
    lines.append("")
    lines.append(
        f"calibrated from {e.calibration.rows} measured rows"
        if e.calibration
        else "memory from the formula, not calibrated (`--calibrate` fits it to this profile's measured rows)"
    )
    for n in e.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines) + "\n"


def cmd_estimate(args, resolve=resolve) -> int:
    from fttui.core.memory import EstimateError, estimate, fmt_bytes, solve_max

    resolved = resolve(args)
    try:
        calibration = _calibration(args, resolved) if getattr(args, "calibrate", False) else None
        device = _card_size(args, resolved)
        if getattr(args, "calibrate", False) and calibration is None:
            print(
                "fttui: no measured rows of this profile's model/method/precision in the store; using the formula",
                file=sys.stderr,
            )
        param = getattr(args, "max", None)
        if param:
            if device is None:
                raise FttuiError("--max needs --gpu-memory SIZE (or limits.gpu_memory), e.g. 24GiB")
            best = solve_max(resolved, param, device, calibration=calibration)
            from fttui.core.memory.inputs import _with  # the same substitution solve_max uses

            at = estimate(_with(resolved, param, max(best, 1)), calibration, device)
            if args.json:
                out = {"max": {"param": param, "value": best, "device_bytes": device}, **at.to_dict()}
                print(json.dumps(out, indent=2))
            else:
                if best == 0:
                    print(
                        f"{param}: even 1 does not fit {fmt_bytes(device)} "
                        f"(predicted {fmt_bytes(max(at.gpu_peak_bytes or [at.host_peak_bytes]))})"
                    )
                else:
                    print(f"largest {param} that fits {fmt_bytes(device)}: {best}")
                    print()
                    sys.stdout.write(render_text(at))
            return 0
        e = estimate(resolved, calibration, device)
    except EstimateError as err:
        raise FttuiError(str(err)) from None
    fc = _forecast(args, resolved, e)
    if args.json:
        print(json.dumps({**e.to_dict(), "forecast": fc.to_dict() if fc else None}, indent=2))
    else:
        sys.stdout.write(render_text(e, resolved.name))
        if fc is not None:
            print(f"time: {fc.words()}")
    return 0


def _forecast(args, resolved, e):
    """The time and cost forecast (None for a command profile or a model without numbers)."""
    from fttui.core.experiments.forecast import RANKS_CPU, offload_bytes, profile_forecast, run_card
    from fttui.core.results.store import Store

    prices = None
    if getattr(args, "prices", None):
        from fttui.core.results.prices import load_prices

        prices = load_prices(args.prices)
    with Store() as store:
        rows = store.rows()
    card = run_card(resolved)
    named = getattr(args, "card", None)
    if named:
        if card == RANKS_CPU:
            raise FttuiError(
                f"--card {named}: {resolved.name} runs on CPU processes (devices.gpus = 0); "
                "--set devices.gpus=1 estimates it on one card"
            )
        from fttui.core.models.peaks import card_named

        card = card_named(named, stored=(str(r.get("gpu") or "") for r in rows))  # no known peak: its rows only
    if prices is not None and prices.price_of(card) is None:
        raise FttuiError(
            f"--prices {args.prices}: no price for {card!r} (it has: {', '.join(sorted(prices.table)) or 'none'})"
        )
    return profile_forecast(resolved, e.inputs, rows, card, prices, link_bytes=offload_bytes(e))


def card_help() -> str:
    """``--card``'s help: what it names, and the cards whose peak rate fttui knows."""
    from fttui.core.models.peaks import PEAKS, short_name

    names = ", ".join(short_name(n) for n in PEAKS)
    return (
        "the card a GPU profile will run on, for the time forecast and --prices (default: this machine's "
        f"first GPU); fttui knows the peak rates of: {names} (case, spaces and hyphens do not matter; "
        "a short name such as 4090 names the one card it is short for; another card is timed only from "
        "stored rows of it, and a name of neither is refused)"
    )


def add_parser(sub) -> None:
    """The subcommand ``estimate``: its arguments and handler."""
    p = sub.add_parser("estimate", help="predict peak GPU memory per card and host memory, before launch")
    add_profile_args(p)
    p.add_argument("--json", action="store_true", help="print the estimate as JSON")
    p.add_argument("--max", choices=list(PROBE_PARAMS), help="the largest value that fits --gpu-memory")
    p.add_argument("--gpu-memory", metavar="SIZE", help="card size for --max / the fit check, e.g. 24GiB")
    p.add_argument(
        "--calibrate", action="store_true", help="fit the activation term to this profile's measured rows in the store"
    )
    p.add_argument(
        "--prices",
        metavar="FILE",
        help="price of one card-hour per GPU name (the report's price file): the forecast's cost",
    )
    p.add_argument("--card", metavar="NAME", help=card_help())
    p.set_defaults(handler=cmd_estimate)
