"""The report's row tables: every run, the groups of a column, and the same work across GPUs.

Owns :func:`runs_table` (one row per stored row in the reference columns, with relative
throughput, throughput per price and the environment), :func:`groups_table` (``--group-by``)
and :func:`gpus_table` (the same model, method, batch, ... on different GPUs), and
:class:`Ctx` (the baseline's throughput and the prices they share), with :func:`rel` and
:func:`per_price`, the two derived figures the charts use too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fttui.core.base import fmt
from fttui.core.results.document import Table, cell_text, fmt_gb, fmt_num, fmt_rel, fmt_sig
from fttui.core.results.labels import bar_labels, dim_text, sort_key
from fttui.core.results.matrices import pick
from fttui.core.results.prices import Prices
from fttui.core.results.rows import card_memory_mb, gpu_name, is_oom, num, peak_gb, peaks_mb, row_interconnect, versions

__all__ = [
    "VERSION_KEYS",
    "Ctx",
    "machine",
    "gpus_table",
    "groups_table",
    "oom_table",
    "per_price",
    "rel",
    "runs_table",
]

VERSION_KEYS = ("driver", "cuda", "torch", "transformers", "peft", "bitsandbytes", "deepspeed")


def machine(r: Mapping) -> str:
    """The machine a row ran on: its environment's host name ("" when not recorded)."""
    env = r.get("env")
    if isinstance(env, str):
        import json

        try:
            env = json.loads(env)
        except ValueError:
            env = None
    return str((env or {}).get("hostname") or "") if isinstance(env, dict) else ""


@dataclass
class Ctx:
    baseline_sps: float | None
    prices: Prices | None


def rel(row: Mapping, ctx: Ctx) -> float | None:
    sps = None if is_oom(row) else num(row.get("samples_per_s"))
    if sps is None or not ctx.baseline_sps:
        return None
    return sps / ctx.baseline_sps


def per_price(row: Mapping, ctx: Ctx) -> float | None:
    sps = None if is_oom(row) else num(row.get("samples_per_s"))
    if sps is None or ctx.prices is None:
        return None
    price = ctx.prices.row_price(row)
    return None if not price else sps / price


def _mem_cell(row: Mapping) -> str:
    if is_oom(row):
        return "OOM"
    return ";".join(f"{p:.1f}" for p in peaks_mb(row))


def _status(row: Mapping) -> str:
    return (row.get("status") or "") + (f" ({row['oom_kind']})" if row.get("oom_kind") else "")


def _version(key: str) -> Callable[[dict], Any]:
    """The cell of one version column (``key`` of the row's environment and versions)."""
    return lambda r: versions(r).get(key) or ""


def runs_table(rows: Sequence[dict], ctx: Ctx, group_by: str | None) -> Table:
    kinds = {r.get("kind") for r in rows}
    cols: list[tuple[str, Callable[[dict], Any], Callable[[Any], str]]] = []
    if group_by:
        cols.append(
            (group_by, lambda r: dim_text(group_by, r.get(group_by)) if group_by != "gpu" else gpu_name(r), cell_text)
        )
    if len(kinds) > 1:
        cols.append(("kind", lambda r: r.get("kind"), cell_text))
    cols += [
        ("model", lambda r: r.get("model") or "", cell_text),
        ("dataset", lambda r: r.get("dataset") or "", cell_text),
        ("gpu", gpu_name, cell_text),
        ("card_mem_gb", lambda r: None if (m := card_memory_mb(r)) is None else m / 1024, fmt_gb),
        ("num_gpus", lambda r: int(r.get("num_gpus") or 0), cell_text),
        ("interconnect", row_interconnect, cell_text),
        ("method", lambda r: fmt.method_label(r.get("method"), r.get("sharding")), cell_text),
        ("precision", lambda r: r.get("precision") or "", cell_text),
        ("batch_size", lambda r: r.get("batch_size"), cell_text),
        ("grad_accum", lambda r: r.get("grad_accum"), cell_text),
        ("effective_batch", lambda r: r.get("effective_batch"), cell_text),
        ("max_seq_len", lambda r: r.get("max_seq_len"), cell_text),
        ("samples_per_s", lambda r: None if is_oom(r) else num(r.get("samples_per_s")), fmt_num(3)),
        ("tokens_per_s", lambda r: None if is_oom(r) else num(r.get("tokens_per_s")), fmt_num(1)),
        ("duration", lambda r: "" if is_oom(r) else fmt.duration(num(r.get("duration_s"))), cell_text),
        ("gpu_mem_mb", _mem_cell, cell_text),
        ("host_rss_mb", lambda r: num(r.get("peak_host_rss_mb")), fmt_num(1)),
        ("status", _status, cell_text),
    ]
    if ctx.baseline_sps:
        cols.append(("rel_throughput", lambda r: rel(r, ctx), fmt_rel))
    if ctx.prices is not None:
        cols.append(("samples_per_s_per_price", lambda r: per_price(r, ctx), fmt_sig))
    for k in VERSION_KEYS:
        cols.append((k, _version(k), cell_text))
    cols.append(("run", lambda r: r.get("run_id") or "", cell_text))
    ordered = list(rows)
    if group_by:
        ordered.sort(key=lambda r: sort_key(group_by, r.get(group_by) if group_by != "gpu" else gpu_name(r)))
    notes = [
        "gpu_mem_mb: peak NVML memory per card; card_mem_gb: each card's total memory; "
        "samples_per_s, tokens_per_s: steady state (warm-up left out); duration: time in the training loop"
    ]
    return Table(
        "runs",
        "Runs",
        [c[0] for c in cols],
        [[f(r) for _, f, _ in cols] for r in ordered],
        formats={h: t for h, _, t in cols},
        note="; ".join(notes),
    )


def groups_table(rows: Sequence[dict], ctx: Ctx, group_by: str) -> Table:
    groups: dict[Any, list[dict]] = {}
    for r in rows:
        groups.setdefault(r.get(group_by) if group_by != "gpu" else gpu_name(r), []).append(r)
    labels = dict(zip((id(r) for r in rows), bar_labels(rows)))
    headers = [group_by, "rows", "completed", "oom", "best_samples_per_s", "best_run"]
    if ctx.baseline_sps:
        headers.append("best_rel_throughput")
    if ctx.prices is not None:
        headers.append("best_samples_per_s_per_price")
    headers.append("max_peak_gb")
    body = []
    for g in sorted(groups, key=lambda v: sort_key(group_by, v)):
        members = groups[g]
        done = [m for m in members if m.get("status") == "completed" and num(m.get("samples_per_s")) is not None]
        best = max(done, key=lambda m: num(m.get("samples_per_s")) or 0.0, default=None)
        row = [
            dim_text(group_by, g) if g not in (None, "") else "(not recorded)",
            len(members),
            sum(m.get("status") == "completed" for m in members),
            sum(is_oom(m) for m in members),
            None if best is None else num(best.get("samples_per_s")),
            "" if best is None else labels[id(best)],
        ]
        if ctx.baseline_sps:
            row.append(None if best is None else rel(best, ctx))
        if ctx.prices is not None:
            priced = [p for p in (per_price(m, ctx) for m in done) if p is not None]
            row.append(max(priced) if priced else None)
        gbs = [x for x in (peak_gb(m)[0] for m in members if not is_oom(m)) if x is not None]
        row.append(max(gbs) if gbs else None)
        body.append(row)
    return Table(
        "groups",
        f"By {group_by}",
        headers,
        body,
        formats={
            "best_samples_per_s": fmt_num(3),
            "best_rel_throughput": fmt_rel,
            "best_samples_per_s_per_price": fmt_sig,
            "max_peak_gb": fmt_num(2),
        },
        note="best: the completed row with the most samples/s; max_peak_gb: largest card "
        "(host RSS on CPU), OOM rows left out",
    )


def oom_table(rows: Sequence[dict]) -> Table | None:
    """The rows that ran out of memory with the phase it happened in and the estimate's term
    that grew against the budget (the rows' ``oom_phase`` and ``oom_explained``,
    fttui.core.run.row.oomexplain) and, when a CUDA one left its snapshot, what held the memory
    (``oom_held``, fttui.core.run.row.oomheld); None when no row did."""
    ooms = [r for r in rows if r.get("status") == "oom"]
    if not ooms:
        return None
    headers = ["run_id", "method", "batch_size", "max_seq_len", "oom_kind", "oom_phase", "oom_explained"]
    if any(r.get("oom_held") for r in ooms):  # a CUDA one left its allocator snapshot
        headers.append("oom_held")
    cells = [[r.get(h) for h in headers] for r in ooms]
    note = "oom_explained: the estimate's terms for the setup that failed (its micro batch, its longest sequence)"
    if "oom_held" in headers:
        note += "; oom_held: the allocator's snapshot at the out of memory by category, beside the estimate"
    return Table("out_of_memory", "Out of memory", headers, cells, note=note)


def gpus_table(rows: Sequence[dict], ctx: Ctx) -> Table | None:
    work: dict[tuple, dict[tuple[str, str], list[dict]]] = {}
    for r in rows:
        if r.get("status") not in ("completed", "oom"):
            continue
        key = tuple(
            r.get(k)
            for k in (
                "model",
                "dataset",
                "method",
                "precision",
                "batch_size",
                "grad_accum",
                "max_seq_len",
                "num_gpus",
                "sharding",
            )
        )
        work.setdefault(key, {}).setdefault((gpu_name(r), machine(r)), []).append(r)
    # Rows imported from several machines (`fttui results import`): the same GPU model on two
    # machines is two columns of the comparison, and the table says which machine.
    machines = {m for by in work.values() for (_, m) in by}
    several = len(machines - {""}) > 1
    headers = [
        "model",
        "dataset",
        "gpu",
        *(["machine"] if several else []),
        "interconnect",
        "num_gpus",
        "method",
        "batch_size",
        "max_seq_len",
        "samples_per_s",
        "duration",
        "gpu_mem_mb",
        "x_slowest",
    ]
    if ctx.baseline_sps:
        headers.append("rel_throughput")
    if ctx.prices is not None:
        headers.append("samples_per_s_per_price")
    headers.append("run")
    body = []
    keys = sorted(
        (k for k, by in work.items() if len(by) > 1),
        key=lambda k: (str(k[0]), -(k[7] or 0), sort_key("method", k[2]), sort_key("batch_size", k[4])),
    )
    for k in keys:
        picked = [pick(v) for v in work[k].values()]
        picked.sort(key=lambda r: (is_oom(r), num(r.get("samples_per_s")) or 0.0))
        slowest = next(
            (num(r.get("samples_per_s")) for r in picked if not is_oom(r) and num(r.get("samples_per_s"))), None
        )
        for r in picked:
            sps = None if is_oom(r) else num(r.get("samples_per_s"))
            cells = [
                r.get("model") or "",
                r.get("dataset") or "",
                gpu_name(r),
                *([machine(r)] if several else []),
                row_interconnect(r),
                int(r.get("num_gpus") or 0),
                fmt.method_label(r.get("method"), r.get("sharding")),
                r.get("batch_size"),
                r.get("max_seq_len"),
                sps,
                "" if is_oom(r) else fmt.duration(num(r.get("duration_s"))),
                _mem_cell(r),
                None if sps is None or not slowest else sps / slowest,
            ]
            if ctx.baseline_sps:
                cells.append(rel(r, ctx))
            if ctx.prices is not None:
                cells.append(per_price(r, ctx))
            cells.append(r.get("run_id") or "")
            body.append(cells)
    if not body:
        return None
    return Table(
        "gpus",
        "Across GPUs",
        headers,
        body,
        formats={
            "samples_per_s": fmt_num(3),
            "x_slowest": fmt_rel,
            "rel_throughput": fmt_rel,
            "samples_per_s_per_price": fmt_sig,
        },
        note="the same work (model, dataset, method, precision, batch, accumulation, sequence "
        "length, number of cards) on different GPUs, slowest first; x_slowest: samples/s "
        "over the slowest GPU's; interconnect: between the cards of a multi-card run",
    )
