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

import csv
import difflib
import json
import math
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fttui.core.base import fmt
from fttui.core.base.errors import FttuiError
from fttui.core.results.charts import Bar, ChartSpec
from fttui.core.results.store import COLUMNS
from fttui.core.results.tables import to_csv, to_markdown

GROUP_KEYS = ("model", "method", "gpu", "batch_size", "max_seq_len")
VERSION_KEYS = ("driver", "cuda", "torch", "transformers", "peft", "bitsandbytes", "deepspeed")
# Settings a matrix can be drawn over, and the pairs tried (rows x columns), in order.
MATRIX_DIMS = ("method", "precision", "batch_size", "grad_accum", "max_seq_len")
MATRIX_PAIRS = (("method", "max_seq_len"), ("batch_size", "max_seq_len"), ("method", "batch_size"),
                ("batch_size", "grad_accum"))
METHOD_ORDER = list(fmt.METHOD_LABELS)


# --------------------------------------------------------------------------------------------
# Small helpers


def _is_oom(row: Mapping) -> bool:
    return row.get("status") == "oom"


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool) or v == "":
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def _json(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def _dict(v: Any) -> dict:
    v = _json(v)
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list:
    v = _json(v)
    return v if isinstance(v, list) else []


def short_gpu(name: str | None) -> str:
    """``NVIDIA GeForce RTX 4090`` -> ``RTX 4090`` (for labels)."""
    if not name:
        return ""
    words = [w for w in str(name).split() if w.lower() not in ("nvidia", "geforce", "tesla")]
    return " ".join(words) or str(name)


def gpu_name(row: Mapping) -> str:
    """The row's (first) GPU name, from the row, else its environment; ``cpu`` for CPU rows."""
    if row.get("gpu"):
        return str(row["gpu"])
    names = _list(row.get("gpu_names")) or _dict(row.get("env")).get("gpu_names") or []
    if names:
        return str(names[0])
    cards = _gpus(row)
    if cards and cards[0].get("name"):
        return str(cards[0]["name"])
    return ""


def _gpus(row: Mapping) -> list[dict]:
    return [g for g in _list(_dict(row.get("env")).get("gpus")) if isinstance(g, dict)]


def card_memory_mb(row: Mapping, index: int = 0) -> float | None:
    """Total memory of card ``index`` (MiB) as the worker recorded it (``env.gpus``), or None."""
    cards = _gpus(row)
    if index >= len(cards):
        return None
    g = cards[index]
    for key in ("mem_total_mb", "memory_mb", "total_memory_mb", "memory_total_mb"):
        x = _num(g.get(key))
        if x:
            return x
    return None


def peaks_mb(row: Mapping) -> list[float]:
    return [x for x in (_num(p) for p in _list(row.get("peak_gpu_mem_mb"))) if x is not None]


def _versions(row: Mapping) -> dict:
    out = dict(_dict(row.get("env")))
    out.update(_dict(row.get("versions")))
    return out


# Topology levels of nvmlDeviceGetTopologyCommonAncestor (NVML_TOPOLOGY_*), nearest first,
# and the short names `nvidia-smi topo -m` prints for them.
_TOPOLOGY = {0: "INTERNAL", 10: "SINGLE", 20: "MULTIPLE", 30: "HOSTBRIDGE", 40: "NODE", 50: "SYSTEM"}
_TOPO_ALIASES = {"PIX": "SINGLE", "PXB": "MULTIPLE", "PHB": "HOSTBRIDGE", "SYS": "SYSTEM",
                 "SOC": "SYSTEM", "X": "INTERNAL"}
_TOPO_RANK = {name: level for level, name in _TOPOLOGY.items()}


def interconnect_label(num_gpus: int | None = None, nvlink_links: Iterable[int] | int | None = None,
                       common_ancestor: int | str | None = None) -> str:
    """The interconnect between a run's cards, as the reference tables name it.

    ``nvlink_links``: active NVLink links per card (``nvmlDeviceGetNvLinkState`` over the links,
    counted) or their total; ``common_ancestor``: the farthest ``nvmlDeviceGetTopologyCommonAncestor``
    level over the card pairs (an ``NVML_TOPOLOGY_*`` number, its name ``SYSTEM`` / ``NODE`` /
    ``HOSTBRIDGE`` / ``MULTIPLE`` / ``SINGLE`` / ``INTERNAL``, or the ``nvidia-smi topo -m`` short
    name ``SYS`` / ``PHB`` / ``PXB`` / ``PIX`` / ``NV#``).

    ``NVLink`` when any card has an active NVLink; ``QPI/UPI`` when the path crosses the CPU
    sockets' interconnect (``SYSTEM``); ``PCIe`` otherwise; ``""`` for one card (or none) and when
    nothing is known.
    """
    if num_gpus is not None and num_gpus < 2:
        return ""
    links = nvlink_links
    total = sum(int(x or 0) for x in links) if isinstance(links, (list, tuple)) else int(links or 0)
    if total > 0:
        return "NVLink"
    level = common_ancestor
    if isinstance(level, str):
        name = level.strip().upper().replace("NVML_TOPOLOGY_", "")
        if name.startswith("NV") and name[2:].isdigit():
            return "NVLink"
        name = _TOPO_ALIASES.get(name, name)
        level = _TOPO_RANK.get(name)
    if level is None:
        return ""
    return "QPI/UPI" if int(level) >= 50 else "PCIe"


def row_interconnect(row: Mapping) -> str:
    """The row's interconnect label: its ``interconnect`` column when the store has one, else the
    environment's ``interconnect`` / ``topology`` (``{"nvlink_links", "common_ancestor"}``)."""
    n = row.get("num_gpus")
    if row.get("interconnect"):
        return "" if n is not None and int(n or 0) < 2 else str(row["interconnect"])
    env = _dict(row.get("env"))
    if env.get("interconnect"):
        return "" if n is not None and int(n or 0) < 2 else str(env["interconnect"])
    topo = _dict(env.get("topology"))
    if not topo:
        return ""
    return interconnect_label(None if n is None else int(n or 0), topo.get("nvlink_links"),
                              topo.get("common_ancestor"))


def s_per_step(row: Mapping) -> float | None:
    """Seconds per training step: loop time / steps (as the sweep table), else the probe's."""
    d, steps = _num(row.get("duration_s")), _num(row.get("steps"))
    if d is not None and steps:
        return d / steps
    return _num(row.get("step_time_s"))


def peak_gb(row: Mapping) -> tuple[float | None, str]:
    """(peak memory in GB, which): the largest card's NVML peak, or the host RSS on CPU."""
    p = peaks_mb(row)
    if p:
        return max(p) / 1024, "GPU"
    rss = _num(row.get("peak_host_rss_mb"))
    return (None if rss is None else rss / 1024), "host RSS"


# --------------------------------------------------------------------------------------------
# --where


def _coerce(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "yes", "on"):
        return 1
    if low in ("false", "no", "off"):
        return 0
    try:
        return float(text)
    except ValueError:
        return None


def _matches(value: Any, want: str) -> bool:
    if want == "":
        return value is None or value == "" or value == []
    if value is None:
        return False
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True) == want or any(str(v) == want for v in
                                                                 (value if isinstance(value, list) else []))
    num_want = _coerce(want)
    if num_want is not None and (isinstance(value, (int, float))):
        return float(value) == num_want
    if num_want is not None and _num(value) is not None:
        return _num(value) == num_want
    return str(value).casefold() == want.casefold()


def parse_where(where: Iterable[str], columns: Iterable[str] | None = None) -> dict[str, list[str]]:
    """``["gpu=RTX 4090", "batch_size=2"]`` -> ``{"gpu": ["RTX 4090"], "batch_size": ["2"]}``."""
    known = set(COLUMNS) | set(columns or ())
    out: dict[str, list[str]] = {}
    for spec in where or ():
        key, sep, value = spec.partition("=")
        key = key.strip()
        if not sep or not key:
            raise FttuiError(f"--where {spec!r}: expected KEY=VALUE, e.g. method=lora")
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else " (see `fttui results --format json` for the columns)"
            raise FttuiError(f"--where {spec!r}: unknown column {key!r}{hint}")
        out.setdefault(key, []).append(value.strip())
    return out


def filter_rows(rows: Sequence[Mapping], where: Iterable[str] | None) -> list[dict]:
    """Rows whose columns equal the ``KEY=VALUE`` filters: numbers compare as numbers, text
    without regard to case, ``KEY=`` matches an empty cell. Different keys must all match; a key
    given twice matches either value. An unknown column is a one-line :class:`FttuiError`."""
    rows = [dict(r) for r in rows]
    conds = parse_where(where or (), {k for r in rows for k in r})
    return [r for r in rows if all(any(_matches(r.get(k), v) for v in vals) for k, vals in conds.items())]


# --------------------------------------------------------------------------------------------
# Prices


@dataclass
class Prices:
    """GPU name -> price of one card (any unit the user chooses; ``unit`` labels it)."""

    table: dict[str, float]
    unit: str = ""
    source: str = ""

    def price_of(self, gpu: str | None) -> float | None:
        """Price of one card: exact name, else the longest price name contained in ``gpu``, else
        a price name that contains ``gpu``; case-insensitive, spaces collapsed. None: no price."""
        if not gpu:
            return None
        g = " ".join(str(gpu).casefold().split())
        norm = {" ".join(k.casefold().split()): v for k, v in self.table.items()}
        if g in norm:
            return norm[g]
        inside = [k for k in norm if k and k in g]
        if inside:
            return norm[max(inside, key=len)]
        around = [k for k in norm if g in k]
        if around and g != "cpu":
            return norm[min(around, key=len)]
        return None

    def row_price(self, row: Mapping) -> float | None:
        """The price of the row's cards: per-card price x num_gpus (1 for CPU rows)."""
        p = self.price_of(gpu_name(row))
        if p is None:
            return None
        return p * max(1, int(row.get("num_gpus") or 0))


def _price_value(file: str, key: str, v: Any) -> float:
    x = _num(v) if not isinstance(v, str) else _num(v.replace(",", ""))
    if x is None or x <= 0:
        raise FttuiError(f"{file}: {key}: price must be a positive number, got {v!r}")
    return x


def load_prices(path: str | Path) -> Prices:
    """A price table: TOML (``"RTX 4090" = 1.6`` lines, optionally under ``[prices]``, and an
    optional ``unit = "..."``) or CSV (columns ``gpu`` and ``price``, optional ``unit``; without a
    header, the first two columns)."""
    p = Path(path)
    if not p.is_file():
        raise FttuiError(f"{p}: price table not found")
    table: dict[str, float] = {}
    unit = ""
    if p.suffix.lower() == ".toml":
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise FttuiError(f"{p}: not valid TOML: {e}") from None
        unit = str(data.pop("unit", "") or "")
        section = data.pop("prices", None)
        if isinstance(section, dict):
            unit = str(section.pop("unit", unit) or unit)
            data.update(section)
        for k, v in data.items():
            if isinstance(v, dict):
                raise FttuiError(f"{p}: [{k}]: unexpected table (write \"GPU name\" = price lines)")
            table[k] = _price_value(str(p), k, v)
    elif p.suffix.lower() == ".csv":
        with open(p, newline="", encoding="utf-8") as f:
            lines = [r for r in csv.reader(f) if r and any(c.strip() for c in r)]
        if not lines:
            raise FttuiError(f"{p}: empty price table")
        head = [c.strip().casefold() for c in lines[0]]
        gi, pi, ui = 0, 1, None
        if len(head) < 2 or _num(head[1].replace(",", "")) is None:
            lines = lines[1:]
            gi = next((i for i, h in enumerate(head) if h in ("gpu", "name", "gpu_name", "card")), 0)
            pi = next((i for i, h in enumerate(head) if h.startswith("price")), 1)
            ui = next((i for i, h in enumerate(head) if h in ("unit", "currency")), None)
        for n, r in enumerate(lines, start=2 if ui is not None or gi or pi != 1 else 1):
            if len(r) <= max(gi, pi):
                raise FttuiError(f"{p}: line {n}: expected GPU,PRICE")
            table[r[gi].strip()] = _price_value(str(p), r[gi].strip(), r[pi].strip())
            if ui is not None and len(r) > ui and r[ui].strip():
                unit = r[ui].strip()
    else:
        raise FttuiError(f"{p}: a price table must be a .toml or .csv file")
    if not table:
        raise FttuiError(f"{p}: no prices in the file")
    return Prices(table, unit, str(p))


# --------------------------------------------------------------------------------------------
# Report


def _fmt_num(nd: int) -> Callable[[Any], str]:
    return lambda v: "" if v is None else fmt.num(v, nd)


def _fmt_sig(v: Any) -> str:
    if v is None:
        return ""
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def _fmt_rel(v: Any) -> str:
    return "" if v is None else f"{v:.2f}x"


def _fmt_gb(v: Any) -> str:
    if v is None:
        return ""
    return f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _csv_cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


@dataclass
class Table:
    slug: str  # CSV file stem
    title: str
    headers: list[str]
    cells: list[list[Any]]  # raw values (numbers stay numbers)
    formats: dict[str, Callable[[Any], str]] = field(default_factory=dict)
    note: str = ""
    level: int = 2

    def text_body(self) -> list[list[str]]:
        fs = [self.formats.get(h, _text) for h in self.headers]
        return [[f(v) for f, v in zip(fs, row)] for row in self.cells]

    def to_markdown(self) -> str:
        out = "#" * self.level + f" {self.title}\n"
        if self.headers:
            out += "\n" + to_markdown(self.headers, self.text_body())
        if self.note:
            out += f"\n{self.note}\n"
        return out

    def to_csv(self) -> str:
        return to_csv(self.headers, [[_csv_cell(v) for v in row] for row in self.cells])

    def column(self, header: str) -> list[Any]:
        i = self.headers.index(header)
        return [row[i] for row in self.cells]


@dataclass
class Report:
    rows: list[dict]
    tables: list[Table]
    charts: list[ChartSpec]
    summary: list[str]
    group_by: str | None = None
    baseline: dict | None = None
    prices: Prices | None = None

    def table(self, slug: str) -> Table | None:
        return next((t for t in self.tables if t.slug == slug), None)

    def to_markdown(self, images: Mapping[str, str] | None = None) -> str:
        """The report as Markdown; ``images`` maps chart names to image paths (set by
        :func:`write_report`); without it the charts are only mentioned."""
        parts = ["# fttui report\n", "\n".join(f"- {s}" for s in self.summary) + "\n"]
        if images:
            parts.append("## Charts\n")
            for c in self.charts:
                if c.name in images:
                    parts.append(f"![{c.title}]({images[c.name]})\n")
        elif self.charts:
            parts.append("Charts (" + ", ".join(c.name for c in self.charts)
                         + "): run with `--out DIR` to draw them.\n")
        parts += [t.to_markdown() for t in self.tables]
        return "\n".join(parts)


_LABEL_KEYS = ("method", "precision", "batch_size", "grad_accum", "max_seq_len", "gpu", "num_gpus", "kind")


def _chart_key(r: Mapping) -> tuple:
    """Order of the bars: model, kind, GPU, cards, method, precision, batch, sequence, accumulation."""
    return (str(r.get("model") or ""), str(r.get("kind") or ""), short_gpu(gpu_name(r)), int(r.get("num_gpus") or 0),
            _sort_key("method", r.get("method")), str(r.get("precision") or ""), _sort_key("batch_size", r.get("batch_size")),
            _sort_key("max_seq_len", r.get("max_seq_len")), _sort_key("grad_accum", r.get("grad_accum")))


def _label_value(r: Mapping, key: str) -> str:
    return short_gpu(gpu_name(r)) if key == "gpu" else str(r.get(key))


def _row_label(row: Mapping, fields: Sequence[str]) -> str:
    parts = []
    for key in fields:
        v = row.get(key)
        if key == "model":
            parts.append(str(v or "?"))
        elif key == "method":
            parts.append(fmt.method_label(v) or "?")
        elif key == "precision":
            parts.append(str(v or ""))
        elif key == "batch_size":
            parts.append(f"bs {v}")
        elif key == "grad_accum":
            parts.append(f"accum {v}")
        elif key == "max_seq_len":
            parts.append(f"seq {v}")
        elif key == "gpu":
            g = short_gpu(gpu_name(row))
            n = int(row.get("num_gpus") or 0)
            parts.append(f"{n}x {g}" if n > 1 and g else g)
        elif key == "kind" and v not in (None, "run"):
            parts.append(f"({v})")
    return " · ".join(p for p in parts if p)


def full_label(row: Mapping) -> str:
    """A row described on its own: model · method · batch · sequence · GPU."""
    return _row_label(row, ["model", "method", "batch_size", "max_seq_len", "gpu"])


def _labels(rows: Sequence[Mapping]) -> list[str]:
    """Short bar labels: the model (when several), then only the settings that vary among the
    rows of the same model; a run id suffix where two labels would still be equal."""
    models = {str(r.get("model")) for r in rows}
    by_model: dict[str, list[Mapping]] = {}
    for r in rows:
        by_model.setdefault(str(r.get("model")), []).append(r)
    varying: dict[str, list[str]] = {}
    for m, members in by_model.items():
        keys = [k for k in _LABEL_KEYS if len({_label_value(r, k) for r in members}) > 1]
        if "num_gpus" in keys and "gpu" not in keys:
            keys.append("gpu")
        keys = [k for k in keys if k != "num_gpus"]
        varying[m] = keys or ["method"]
    labels = [_row_label(r, (["model"] if len(models) > 1 else []) + varying[str(r.get("model"))]) for r in rows]
    seen: dict[str, int] = {}
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
    return [f"{lab} ({str(r.get('run_id'))[-4:]})" if seen[lab] > 1 else lab for lab, r in zip(labels, rows)]


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
        raise FttuiError(f"--baseline {ref!r}: {len(hits)} rows match ({ids}{', ...' if len(hits) > 3 else ''}); give more of the id")
    return dict(hits[0])


def _sort_key(key: str, v: Any) -> tuple:
    if v is None:
        return (2, 0, "")
    if key == "method" and v in METHOD_ORDER:
        return (0, METHOD_ORDER.index(v), "")
    x = _num(v)
    return (0, x, "") if x is not None else (1, 0, str(v))


def _pick(rows: Sequence[Mapping]) -> Mapping:
    """Of several rows for one cell: the latest completed, else the latest OOM, else the latest."""
    for want in ("completed", "oom"):
        hit = [r for r in rows if r.get("status") == want]
        if hit:
            return hit[-1]
    return rows[-1]


def _matrix_cell(row: Mapping | None) -> str:
    if row is None:
        return ""
    st = row.get("status")
    if st == "oom":
        return "OOM"
    if st != "completed":
        return str(st or "?")
    gb, _ = peak_gb(row)
    sps = s_per_step(row)
    return f"{'' if gb is None else f'{gb:.2f}'} GB / {'' if sps is None else f'{sps:.3f}'} s"


def _dim_text(key: str, v: Any) -> str:
    return fmt.method_label(v) if key == "method" else _text(v)


def _context_title(row: Mapping, fixed: Sequence[str]) -> str:
    g = short_gpu(gpu_name(row)) or "?"
    n = int(row.get("num_gpus") or 0)
    parts = [str(row.get("model") or "?"), f"{g} x{n}" if n > 1 else g, str(row.get("dataset") or "")]
    for k in fixed:
        v = row.get(k)
        if v is None or v == "":
            continue
        parts.append({"method": fmt.method_label(v), "precision": str(v), "batch_size": f"batch {v}",
                      "grad_accum": f"accum {v}", "max_seq_len": f"seq {v}"}[k])
    return " · ".join(p for p in parts if p)


def _matrices(rows: Sequence[dict], group_by: str | None) -> list[Table]:
    pairs = list(MATRIX_PAIRS)
    if group_by in MATRIX_DIMS:
        first = [p if p[0] == group_by else (p[1], p[0]) for p in pairs if group_by in p]
        pairs = first + [p for p in pairs if group_by not in p]
    covered: set[int] = set()
    tables: list[Table] = []
    for rk, ck in pairs:
        fixed = [d for d in MATRIX_DIMS if d not in (rk, ck)]
        groups: dict[tuple, list[dict]] = {}
        for r in rows:
            if r.get(rk) is None or r.get(ck) is None:
                continue
            key = (r.get("model"), r.get("dataset"), gpu_name(r), r.get("num_gpus"), *(r.get(d) for d in fixed))
            groups.setdefault(key, []).append(r)
        for members in groups.values():
            rvals = sorted({m.get(rk) for m in members}, key=lambda v: _sort_key(rk, v))
            cvals = sorted({m.get(ck) for m in members}, key=lambda v: _sort_key(ck, v))
            cells = {(m.get(rk), m.get(ck)) for m in members}
            ids = {id(m) for m in members}
            if len(rvals) < 2 or len(cvals) < 2 or len(cells) < 3 or ids <= covered:
                continue
            covered |= ids
            by: dict[tuple, list[dict]] = {}
            for m in members:
                by.setdefault((m.get(rk), m.get(ck)), []).append(m)
            body = [[_dim_text(rk, a), *(_matrix_cell(_pick(by[(a, b)]) if (a, b) in by else None) for b in cvals)]
                    for a in rvals]
            which = next((peak_gb(m)[1] for m in members if m.get("status") == "completed"), "GPU")
            tables.append(Table(
                slug=f"matrix-{len(tables) + 1}",
                title=f"{rk} x {ck}: {_context_title(members[0], fixed)}",
                headers=[f"{rk} \\ {ck}", *(str(v) for v in cvals)], cells=body, level=3,
                note=f"cells: peak {which} memory in GB (largest card) / seconds per training step; "
                     "OOM: ran out of memory; empty: not run"))
    return tables


@dataclass
class _Ctx:
    baseline_sps: float | None
    prices: Prices | None


def _rel(row: Mapping, ctx: _Ctx) -> float | None:
    sps = None if _is_oom(row) else _num(row.get("samples_per_s"))
    if sps is None or not ctx.baseline_sps:
        return None
    return sps / ctx.baseline_sps


def _per_price(row: Mapping, ctx: _Ctx) -> float | None:
    sps = None if _is_oom(row) else _num(row.get("samples_per_s"))
    if sps is None or ctx.prices is None:
        return None
    price = ctx.prices.row_price(row)
    return None if not price else sps / price


def _mem_cell(row: Mapping) -> str:
    if _is_oom(row):
        return "OOM"
    return ";".join(f"{p:.1f}" for p in peaks_mb(row))


def _status(row: Mapping) -> str:
    return (row.get("status") or "") + (f" ({row['oom_kind']})" if row.get("oom_kind") else "")


def _runs_table(rows: Sequence[dict], ctx: _Ctx, group_by: str | None) -> Table:
    kinds = {r.get("kind") for r in rows}
    cols: list[tuple[str, Callable[[dict], Any], Callable[[Any], str]]] = []
    if group_by:
        cols.append((group_by, lambda r: _dim_text(group_by, r.get(group_by)) if group_by != "gpu" else gpu_name(r), _text))
    if len(kinds) > 1:
        cols.append(("kind", lambda r: r.get("kind"), _text))
    cols += [
        ("model", lambda r: r.get("model") or "", _text),
        ("dataset", lambda r: r.get("dataset") or "", _text),
        ("gpu", gpu_name, _text),
        ("card_mem_gb", lambda r: None if (m := card_memory_mb(r)) is None else m / 1024, _fmt_gb),
        ("num_gpus", lambda r: int(r.get("num_gpus") or 0), _text),
        ("interconnect", row_interconnect, _text),
        ("method", lambda r: fmt.method_label(r.get("method")), _text),
        ("precision", lambda r: r.get("precision") or "", _text),
        ("batch_size", lambda r: r.get("batch_size"), _text),
        ("grad_accum", lambda r: r.get("grad_accum"), _text),
        ("effective_batch", lambda r: r.get("effective_batch"), _text),
        ("max_seq_len", lambda r: r.get("max_seq_len"), _text),
        ("samples_per_s", lambda r: None if _is_oom(r) else _num(r.get("samples_per_s")), _fmt_num(3)),
        ("tokens_per_s", lambda r: None if _is_oom(r) else _num(r.get("tokens_per_s")), _fmt_num(1)),
        ("duration", lambda r: "" if _is_oom(r) else fmt.duration(_num(r.get("duration_s"))), _text),
        ("gpu_mem_mb", _mem_cell, _text),
        ("host_rss_mb", lambda r: _num(r.get("peak_host_rss_mb")), _fmt_num(1)),
        ("status", _status, _text),
    ]
    if ctx.baseline_sps:
        cols.append(("rel_throughput", lambda r: _rel(r, ctx), _fmt_rel))
    if ctx.prices is not None:
        cols.append(("samples_per_s_per_price", lambda r: _per_price(r, ctx), _fmt_sig))
    for k in VERSION_KEYS:
        cols.append((k, lambda r, k=k: _versions(r).get(k) or "", _text))
    cols.append(("run", lambda r: r.get("run_id") or "", _text))
    ordered = list(rows)
    if group_by:
        ordered.sort(key=lambda r: _sort_key(group_by, r.get(group_by) if group_by != "gpu" else gpu_name(r)))
    notes = ["gpu_mem_mb: peak NVML memory per card; card_mem_gb: each card's total memory; "
             "samples_per_s, tokens_per_s: steady state (warm-up left out); duration: time in the training loop"]
    return Table("runs", "Runs", [c[0] for c in cols], [[f(r) for _, f, _ in cols] for r in ordered],
                 formats={h: t for h, _, t in cols}, note="; ".join(notes))


def _groups_table(rows: Sequence[dict], ctx: _Ctx, group_by: str) -> Table:
    groups: dict[Any, list[dict]] = {}
    for r in rows:
        groups.setdefault(r.get(group_by) if group_by != "gpu" else gpu_name(r), []).append(r)
    labels = dict(zip((id(r) for r in rows), _labels(rows)))
    headers = [group_by, "rows", "completed", "oom", "best_samples_per_s", "best_run"]
    if ctx.baseline_sps:
        headers.append("best_rel_throughput")
    if ctx.prices is not None:
        headers.append("best_samples_per_s_per_price")
    headers.append("max_peak_gb")
    body = []
    for g in sorted(groups, key=lambda v: _sort_key(group_by, v)):
        members = groups[g]
        done = [m for m in members if m.get("status") == "completed" and _num(m.get("samples_per_s")) is not None]
        best = max(done, key=lambda m: _num(m.get("samples_per_s")), default=None)
        row = [_dim_text(group_by, g) if g not in (None, "") else "(not recorded)", len(members), sum(m.get("status") == "completed" for m in members),
               sum(_is_oom(m) for m in members), None if best is None else _num(best.get("samples_per_s")),
               "" if best is None else labels[id(best)]]
        if ctx.baseline_sps:
            row.append(None if best is None else _rel(best, ctx))
        if ctx.prices is not None:
            priced = [p for p in (_per_price(m, ctx) for m in done) if p is not None]
            row.append(max(priced) if priced else None)
        gbs = [x for x in (peak_gb(m)[0] for m in members if not _is_oom(m)) if x is not None]
        row.append(max(gbs) if gbs else None)
        body.append(row)
    return Table("groups", f"By {group_by}", headers, body,
                 formats={"best_samples_per_s": _fmt_num(3), "best_rel_throughput": _fmt_rel,
                          "best_samples_per_s_per_price": _fmt_sig, "max_peak_gb": _fmt_num(2)},
                 note="best: the completed row with the most samples/s; max_peak_gb: largest card "
                      "(host RSS on CPU), OOM rows left out")


def _gpus_table(rows: Sequence[dict], ctx: _Ctx) -> Table | None:
    work: dict[tuple, dict[str, list[dict]]] = {}
    for r in rows:
        if r.get("status") not in ("completed", "oom"):
            continue
        key = tuple(r.get(k) for k in ("model", "dataset", "method", "precision", "batch_size", "grad_accum",
                                       "max_seq_len", "num_gpus"))
        work.setdefault(key, {}).setdefault(gpu_name(r), []).append(r)
    headers = ["model", "dataset", "gpu", "interconnect", "num_gpus", "method", "batch_size", "max_seq_len",
               "samples_per_s", "duration", "gpu_mem_mb", "x_slowest"]
    if ctx.baseline_sps:
        headers.append("rel_throughput")
    if ctx.prices is not None:
        headers.append("samples_per_s_per_price")
    headers.append("run")
    body = []
    keys = sorted((k for k, by in work.items() if len(by) > 1),
                  key=lambda k: (str(k[0]), -(k[7] or 0), _sort_key("method", k[2]), _sort_key("batch_size", k[4])))
    for k in keys:
        picked = [_pick(v) for v in work[k].values()]
        picked.sort(key=lambda r: (_is_oom(r), _num(r.get("samples_per_s")) or 0.0))
        slowest = next((_num(r.get("samples_per_s")) for r in picked if not _is_oom(r) and _num(r.get("samples_per_s"))), None)
        for r in picked:
            sps = None if _is_oom(r) else _num(r.get("samples_per_s"))
            cells = [r.get("model") or "", r.get("dataset") or "", gpu_name(r), row_interconnect(r),
                     int(r.get("num_gpus") or 0), fmt.method_label(r.get("method")), r.get("batch_size"),
                     r.get("max_seq_len"), sps, "" if _is_oom(r) else fmt.duration(_num(r.get("duration_s"))),
                     _mem_cell(r), None if sps is None or not slowest else sps / slowest]
            if ctx.baseline_sps:
                cells.append(_rel(r, ctx))
            if ctx.prices is not None:
                cells.append(_per_price(r, ctx))
            cells.append(r.get("run_id") or "")
            body.append(cells)
    if not body:
        return None
    return Table("gpus", "Across GPUs", headers, body,
                 formats={"samples_per_s": _fmt_num(3), "x_slowest": _fmt_rel, "rel_throughput": _fmt_rel,
                          "samples_per_s_per_price": _fmt_sig},
                 note="the same work (model, dataset, method, precision, batch, accumulation, sequence "
                      "length, number of cards) on different GPUs, slowest first; x_slowest: samples/s "
                      "over the slowest GPU's; interconnect: between the cards of a multi-card run")


def _charts(rows: Sequence[dict], ctx: _Ctx, group_by: str | None, baseline: Mapping | None) -> list[ChartSpec]:
    shown = sorted((r for r in rows if _is_oom(r) or _num(r.get("samples_per_s")) is not None), key=_chart_key)
    if group_by:
        shown.sort(key=lambda r: _sort_key(group_by, r.get(group_by) if group_by != "gpu" else gpu_name(r)))
    colour_key = group_by or ("gpu" if len({gpu_name(r) for r in shown}) > 1 else "method")

    def group(r: Mapping) -> str:
        if colour_key == "gpu":
            return short_gpu(gpu_name(r)) or "GPU not recorded"
        return _dim_text(colour_key, r.get(colour_key))

    labels = _labels(shown)
    charts: list[ChartSpec] = []

    def bars(value: Callable[[Mapping], float | None], missing: str) -> list[Bar]:
        out = []
        for lab, r in zip(labels, shown):
            v = None if _is_oom(r) else value(r)
            out.append(Bar(lab, v, group(r), "OOM" if _is_oom(r) else ("" if v is not None else missing),
                           oom=_is_oom(r), run_id=str(r.get("run_id") or "")))
        return out

    if shown:
        charts.append(ChartSpec("throughput", "Throughput (samples/s, steady state)", "samples/s",
                                bars(lambda r: _num(r.get("samples_per_s")), ""), group_label=colour_key))
    if shown and baseline is not None and ctx.baseline_sps:
        charts.append(ChartSpec("relative", f"Relative throughput (baseline {full_label(baseline)} = 1.00)",
                                "samples/s relative to the baseline", bars(lambda r: _rel(r, ctx), ""),
                                reference=1.0, reference_label="baseline (1.00)",
                                group_label=colour_key, value_format="{:.2f}x"))
    if shown and ctx.prices is not None and any(_per_price(r, ctx) is not None for r in shown):
        unit = ctx.prices.unit or "price unit"
        priced = [b for b, r in zip(bars(lambda r: _per_price(r, ctx), ""), shown) if ctx.prices.row_price(r)]
        missing = sorted({short_gpu(gpu_name(r)) or "GPU not recorded" for r in shown if not ctx.prices.row_price(r)})
        left_out = len(shown) - len(priced)
        charts.append(ChartSpec("cost", f"Cost efficiency (samples/s per {unit} of cards)",
                                f"samples/s per {unit} (per-card price x cards)", priced, group_label=colour_key,
                                footnote=(f"prices from {Path(ctx.prices.source).name}; " if ctx.prices.source else "")
                                + (f"{left_out} rows left out, no price for: {', '.join(missing)}" if left_out else "")))
    mem: list[Bar] = []
    gpu_rows = sorted((r for r in rows if peaks_mb(r) or (_is_oom(r) and gpu_name(r) not in ("", "cpu"))),
                      key=_chart_key)
    if group_by:
        gpu_rows.sort(key=lambda r: _sort_key(group_by, r.get(group_by) if group_by != "gpu" else gpu_name(r)))
    if gpu_rows:
        glabels = _labels(gpu_rows)
        for lab, r in zip(glabels, gpu_rows):
            peaks = peaks_mb(r)
            n = len(peaks)
            for i, p in enumerate(peaks or [None]):
                cap = card_memory_mb(r, i)
                mem.append(Bar(f"{lab} [GPU {i}]" if n > 1 else lab, None if p is None else p / 1024, group(r),
                               "OOM" if _is_oom(r) else "", None if cap is None else cap / 1024, _is_oom(r),
                               str(r.get("run_id") or "")))
        charts.append(ChartSpec("memory", "Peak GPU memory per card (NVML) against the card's memory",
                                "GB", mem, kind="memory", group_label=colour_key, value_format="{:.1f} GB"))
    else:
        host = sorted((r for r in rows if _num(r.get("peak_host_rss_mb")) is not None), key=_chart_key)
        if host:
            for lab, r in zip(_labels(host), host):
                cap = _num(r.get("host_ram_total_mb"))
                mem.append(Bar(lab, _num(r.get("peak_host_rss_mb")) / 1024, group(r), "OOM" if _is_oom(r) else "",
                               None if cap is None else cap / 1024, _is_oom(r), str(r.get("run_id") or "")))
            charts.append(ChartSpec("memory", "Peak host memory (RSS of the training processes) against RAM",
                                    "GB", mem, kind="memory", group_label=colour_key, value_format="{:.1f} GB"))
    order = list(dict.fromkeys(b.group for c in charts for b in c.bars))
    for c in charts:
        c.group_order = order
    return charts


def build_report(rows: Sequence[Mapping], group_by: str | None = None, baseline: str | Mapping | None = None,
                 prices: Prices | Mapping[str, float] | None = None) -> Report:
    """Tables and chart data of ``rows`` (as ``Store().rows()`` returns them). Pure.

    ``baseline``: a row, or a run id / prefix among ``rows``; ``prices``: :class:`Prices` or a
    plain ``{gpu name: price per card}`` mapping.
    """
    rows = [dict(r) for r in rows]
    if group_by is not None and group_by not in COLUMNS:
        close = difflib.get_close_matches(group_by, list(COLUMNS), n=1)
        raise FttuiError(f"--group-by {group_by!r}: unknown column" + (f" (did you mean {close[0]!r}?)" if close else ""))
    if isinstance(prices, Mapping):
        prices = Prices({str(k): _price_value("prices", str(k), v) for k, v in prices.items()})
    base = find_row(rows, baseline) if isinstance(baseline, str) else (dict(baseline) if baseline else None)
    base_sps = None
    if base is not None:
        base_sps = None if _is_oom(base) else _num(base.get("samples_per_s"))
        if not base_sps:
            raise FttuiError(f"--baseline {base.get('run_id')}: that row has no throughput "
                             f"(status {base.get('status') or '?'}); pick a completed run")
    ctx = _Ctx(base_sps, prices)
    statuses: dict[str, int] = {}
    for r in rows:
        st = str(r.get("status") or "unknown")
        statuses[st] = statuses.get(st, 0) + 1
    kinds: dict[str, int] = {}
    for r in rows:
        kinds[str(r.get("kind") or "run")] = kinds.get(str(r.get("kind") or "run"), 0) + 1
    names = {"run": "runs", "probe": "probe trials", "sweep": "sweep cells"}
    summary = [f"{len(rows)} rows: " + ", ".join(f"{n} {names.get(k, k)}" for k, n in sorted(kinds.items())) + "; "
               + ", ".join(f"{n} {'out of memory' if s == 'oom' else s}" for s, n in sorted(statuses.items()))]
    if base is not None:
        summary.append(f"baseline: {base.get('run_id')} ({full_label(base)}) = "
                       f"{base_sps:.3f} samples/s; rel_throughput = samples/s / the baseline's")
    if prices is not None:
        priced = sorted({gpu_name(r) for r in rows if prices.price_of(gpu_name(r)) is not None})
        unpriced = sorted({gpu_name(r) or "unknown GPU" for r in rows if prices.price_of(gpu_name(r)) is None})
        summary.append(f"prices{' in ' + prices.unit if prices.unit else ''}"
                       f"{' from ' + Path(prices.source).name if prices.source else ''}: per-card price x cards; "
                       f"priced: {', '.join(priced) or 'none'}" + (f"; no price: {', '.join(unpriced)}" if unpriced else ""))
    if group_by:
        summary.append(f"grouped by {group_by}")
    tables = [_runs_table(rows, ctx, group_by)] if rows else []
    if rows and group_by:
        tables.append(_groups_table(rows, ctx, group_by))
    matrices = _matrices(rows, group_by)
    if matrices:
        tables.append(Table("matrices", "Matrices", [], [], level=2))
        tables += matrices
    g = _gpus_table(rows, ctx)
    if g is not None:
        tables.append(g)
    return Report(rows, tables, _charts(rows, ctx, group_by, base), summary, group_by, base, prices)


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
