"""`fttui report`: the stored rows as the tables people kept by hand, plus charts.

Pure part: :func:`filter_rows`, :func:`load_prices`, :func:`build_report` -> :class:`Report`
(tables and chart data, no I/O) and :meth:`Report.to_markdown`. :func:`write_report` writes
``report.md``, one CSV per table and per chart, and the PNG charts (matplotlib, drawn by
:mod:`fttui.core.results.charts` and imported only there, lazily).

Tables, in the shapes of the reference tables (see docs/report.md):

- ``runs``: one row per stored row, reference columns (OOM rows: ``OOM`` in the memory column,
  empty speed cells), relative throughput, throughput per price unit, and the environment
  (card memory, interconnect, driver, CUDA, library versions).
- ``groups`` (with ``group_by``): one row per value of the grouping column.
- ``matrix-N``: two settings against each other (``method x max_seq_len``, ``batch_size x
  max_seq_len``, ...) with ``peak GB / s per step`` cells, like the Llama-2 table.
- ``gpus``: the same work (model, method, batch, ...) on different GPUs, with the interconnect.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from fttui.core.base.errors import FttuiError
from fttui.core.results.charts import Bar, ChartSpec
from fttui.core.results.document import Report, Table
from fttui.core.results.filters import filter_rows, parse_where
from fttui.core.results.labels import bar_labels, chart_key, dim_text, full_label, sort_key
from fttui.core.results.matrices import matrix_tables
from fttui.core.results.prices import Prices, load_prices, price_value
from fttui.core.results.rows import card_memory_mb, gpu_name, interconnect_label, is_oom, num, peaks_mb, short_gpu
from fttui.core.results.run_tables import Ctx, gpus_table, groups_table, oom_table, per_price, rel, runs_table
from fttui.core.results.store import COLUMNS

# The report's API as docs/report.md shows it: build_report and write_report are defined here;
# filter_rows, parse_where, load_prices, Prices, interconnect_label, Table and Report are
# importable from here too (defined in filters, prices, rows and document).
__all__ = [
    "GROUP_KEYS",
    "Prices",
    "Report",
    "Table",
    "build_report",
    "filter_rows",
    "find_row",
    "full_label",
    "interconnect_label",
    "load_prices",
    "parse_where",
    "write_report",
]

GROUP_KEYS = ("model", "method", "sharding", "gpu", "batch_size", "max_seq_len")


def find_row(rows: Sequence[Mapping], ref: str) -> dict:
    """The row whose run_id is ``ref`` or starts with it (one match, else FttuiError)."""
    exact = [r for r in rows if r.get("run_id") == ref]
    if exact:
        return dict(exact[0])
    hits = [r for r in rows if str(r.get("run_id") or "").startswith(ref)]
    if not hits:
        raise FttuiError(f"--baseline {ref!r}: no stored row has that run id or prefix")
    if len(hits) > 1:
        ids = ", ".join(str(r["run_id"]) for r in hits[:3])
        raise FttuiError(
            f"--baseline {ref!r}: {len(hits)} rows match ({ids}{', ...' if len(hits) > 3 else ''}); give more of the id"
        )
    return dict(hits[0])


def _charts(rows: Sequence[dict], ctx: Ctx, group_by: str | None, baseline: Mapping | None) -> list[ChartSpec]:
    shown = sorted((r for r in rows if is_oom(r) or num(r.get("samples_per_s")) is not None), key=chart_key)
    if group_by:
        shown.sort(key=lambda r: sort_key(group_by, r.get(group_by) if group_by != "gpu" else gpu_name(r)))
    colour_key = group_by or ("gpu" if len({gpu_name(r) for r in shown}) > 1 else "method")

    def group(r: Mapping) -> str:
        if colour_key == "gpu":
            return short_gpu(gpu_name(r)) or "GPU not recorded"
        return dim_text(colour_key, r.get(colour_key))

    labels = bar_labels(shown)
    charts: list[ChartSpec] = []

    def bars(value: Callable[[Mapping], float | None], missing: str) -> list[Bar]:
        out = []
        for lab, r in zip(labels, shown):
            v = None if is_oom(r) else value(r)
            out.append(
                Bar(
                    lab,
                    v,
                    group(r),
                    "OOM" if is_oom(r) else ("" if v is not None else missing),
                    oom=is_oom(r),
                    run_id=str(r.get("run_id") or ""),
                )
            )
        return out

    if shown:
        charts.append(
            ChartSpec(
                "throughput",
                "Throughput (samples/s, steady state)",
                "samples/s",
                bars(lambda r: num(r.get("samples_per_s")), ""),
                group_label=colour_key,
            )
        )
    if shown and baseline is not None and ctx.baseline_sps:
        charts.append(
            ChartSpec(
                "relative",
                f"Relative throughput (baseline {full_label(baseline)} = 1.00)",
                "samples/s relative to the baseline",
                bars(lambda r: rel(r, ctx), ""),
                reference=1.0,
                reference_label="baseline (1.00)",
                group_label=colour_key,
                value_format="{:.2f}x",
            )
        )
    if shown and ctx.prices is not None and any(per_price(r, ctx) is not None for r in shown):
        unit = ctx.prices.unit or "price unit"
        priced = [b for b, r in zip(bars(lambda r: per_price(r, ctx), ""), shown) if ctx.prices.row_price(r)]
        missing = sorted({short_gpu(gpu_name(r)) or "GPU not recorded" for r in shown if not ctx.prices.row_price(r)})
        left_out = len(shown) - len(priced)
        charts.append(
            ChartSpec(
                "cost",
                f"Cost efficiency (samples/s per {unit} of cards)",
                f"samples/s per {unit} (per-card price x cards)",
                priced,
                group_label=colour_key,
                footnote=(f"prices from {Path(ctx.prices.source).name}; " if ctx.prices.source else "")
                + (f"{left_out} rows left out, no price for: {', '.join(missing)}" if left_out else ""),
            )
        )
    mem: list[Bar] = []
    gpu_rows = sorted((r for r in rows if peaks_mb(r) or (is_oom(r) and gpu_name(r) not in ("", "cpu"))), key=chart_key)
    if group_by:
        gpu_rows.sort(key=lambda r: sort_key(group_by, r.get(group_by) if group_by != "gpu" else gpu_name(r)))
    if gpu_rows:
        glabels = bar_labels(gpu_rows)
        for lab, r in zip(glabels, gpu_rows):
            peaks = peaks_mb(r)
            n = len(peaks)
            for i, p in enumerate(peaks or [None]):
                cap = card_memory_mb(r, i)
                mem.append(
                    Bar(
                        f"{lab} [GPU {i}]" if n > 1 else lab,
                        None if p is None else p / 1024,
                        group(r),
                        "OOM" if is_oom(r) else "",
                        None if cap is None else cap / 1024,
                        is_oom(r),
                        str(r.get("run_id") or ""),
                    )
                )
        charts.append(
            ChartSpec(
                "memory",
                "Peak GPU memory per card (NVML) against the card's memory",
                "GB",
                mem,
                kind="memory",
                group_label=colour_key,
                value_format="{:.1f} GB",
            )
        )
    else:
        host = sorted((r for r in rows if num(r.get("peak_host_rss_mb")) is not None), key=chart_key)
        if host:
            for lab, r in zip(bar_labels(host), host):
                cap = num(r.get("host_ram_total_mb"))
                rss = num(r.get("peak_host_rss_mb")) or 0.0  # not None: the rows sorted above
                mem.append(
                    Bar(
                        lab,
                        rss / 1024,
                        group(r),
                        "OOM" if is_oom(r) else "",
                        None if cap is None else cap / 1024,
                        is_oom(r),
                        str(r.get("run_id") or ""),
                    )
                )
            charts.append(
                ChartSpec(
                    "memory",
                    "Peak host memory (RSS of the training processes) against the host's RAM",
                    "GB",
                    mem,
                    kind="memory",
                    capacity_label="host RAM (total)",
                    group_label=colour_key,
                    value_format="{:.1f} GB",
                )
            )
    order = list(dict.fromkeys(b.group for c in charts for b in c.bars))
    for c in charts:
        c.group_order = order
    return charts


def build_report(
    rows: Sequence[Mapping],
    group_by: str | None = None,
    baseline: str | Mapping | None = None,
    prices: Prices | Mapping[str, float] | None = None,
) -> Report:
    """Tables and chart data of ``rows`` (as ``Store().rows()`` returns them). Pure.

    ``baseline``: a row, or a run id / prefix among ``rows``; ``prices``: :class:`Prices` or a
    plain ``{gpu name: price per card}`` mapping.
    """
    dicts = [dict(r) for r in rows]
    if group_by is not None and group_by not in COLUMNS:
        close = difflib.get_close_matches(group_by, list(COLUMNS), n=1)
        raise FttuiError(
            f"--group-by {group_by!r}: unknown column" + (f" (did you mean {close[0]!r}?)" if close else "")
        )
    if isinstance(prices, Mapping):
        prices = Prices({str(k): price_value("prices", str(k), v) for k, v in prices.items()})
    base = find_row(dicts, baseline) if isinstance(baseline, str) else (dict(baseline) if baseline else None)
    base_sps = None
    if base is not None:
        base_sps = None if is_oom(base) else num(base.get("samples_per_s"))
        if not base_sps:
            raise FttuiError(
                f"--baseline {base.get('run_id')}: that row has no throughput "
                f"(status {base.get('status') or '?'}); pick a completed run"
            )
    ctx = Ctx(base_sps, prices)
    statuses: dict[str, int] = {}
    for r in dicts:
        st = str(r.get("status") or "unknown")
        statuses[st] = statuses.get(st, 0) + 1
    kinds: dict[str, int] = {}
    for r in dicts:
        kinds[str(r.get("kind") or "run")] = kinds.get(str(r.get("kind") or "run"), 0) + 1
    names = {
        "run": "runs",
        "probe": "probe trials",
        "sweep": "sweep cells",
        "command": "command runs",
        "watch": "watched processes",
    }
    summary = [
        f"{len(dicts)} rows: "
        + ", ".join(f"{n} {names.get(k, k)}" for k, n in sorted(kinds.items()))
        + "; "
        + ", ".join(f"{n} {'out of memory' if s == 'oom' else s}" for s, n in sorted(statuses.items()))
    ]
    if base is not None:
        summary.append(
            f"baseline: {base.get('run_id')} ({full_label(base)}) = "
            f"{base_sps:.3f} samples/s; rel_throughput = samples/s / the baseline's"
        )
    if prices is not None:
        priced = sorted({gpu_name(r) for r in dicts if prices.price_of(gpu_name(r)) is not None})
        unpriced = sorted({gpu_name(r) or "unknown GPU" for r in dicts if prices.price_of(gpu_name(r)) is None})
        summary.append(
            f"prices{' in ' + prices.unit if prices.unit else ''}"
            f"{' from ' + Path(prices.source).name if prices.source else ''}: per-card price x cards; "
            f"priced: {', '.join(priced) or 'none'}" + (f"; no price: {', '.join(unpriced)}" if unpriced else "")
        )
    if group_by:
        summary.append(f"grouped by {group_by}")
    tables = [runs_table(dicts, ctx, group_by)] if dicts else []
    if dicts and group_by:
        tables.append(groups_table(dicts, ctx, group_by))
    matrices = matrix_tables(dicts, group_by)
    if matrices:
        tables.append(Table("matrices", "Matrices", [], [], level=2))
        tables += matrices
    g = gpus_table(dicts, ctx)
    if g is not None:
        tables.append(g)
    ooms = oom_table(dicts)
    if ooms is not None:
        tables.append(ooms)
    return Report(dicts, tables, _charts(dicts, ctx, group_by, base), summary, group_by, base, prices)


def write_report(report: Report, out_dir: str | Path) -> list[Path]:
    """Write ``report.md``, one CSV per table and per chart, and the PNG charts into ``out_dir``
    (created). Returns the paths written, ``report.md`` first."""
    from fttui.core.results import charts as report_charts

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for t in report.tables:
        if not t.headers:
            continue
        p = out / f"{t.slug}.csv"
        p.write_text(t.to_csv(), encoding="utf-8")
        written.append(p)
    images: dict[str, str] = {}
    for c in report.charts:
        written.append(report_charts.write_csv(c, out / f"{c.name}.csv"))
        written.append(report_charts.render(c, out / f"{c.name}.png"))
        images[c.name] = f"{c.name}.png"
    md = out / "report.md"
    md.write_text(report.to_markdown(images), encoding="utf-8")
    return [md, *written]
