"""Stored rows as tables in the shape of the reference tables (CSV, Markdown, plain)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Sequence

from fttui.core.base import fmt
from fttui.core.base.inert import csv_cell, inert


def mem_cell(row: dict, nd: int = 1) -> str:
    """``OOM``, or each card's peak device memory (MB), ``;``-separated."""
    if row.get("status") == "oom":
        return "OOM"
    peaks = row.get("peak_gpu_mem_mb") or []
    return ";".join(f"{p:.{nd}f}" for p in peaks if isinstance(p, (int, float)))


def opt_cell(v, nd=3):
    return "" if v is None or v == "" else fmt.num(v, nd)


def setting_cell(key: str):
    """The stated setting; where the run did otherwise (the row's ``mismatch``), ``"16 (ran 8)"``."""

    def cell(row: dict) -> str:
        text = str(row.get(key) or "")
        seen = (row.get("mismatch") or {}).get(key) if isinstance(row.get("mismatch"), dict) else None
        if isinstance(seen, dict) and seen.get("observed") is not None:
            stated = seen.get("stated")
            text = f"{text if stated is None else stated} (ran {seen['observed']})"
        return text

    return cell


def status_cell(row: dict) -> str:
    """``oom (cpu, backward)``: the status, an out of memory's kind and the phase it happened in."""
    told = [str(row[k]) for k in ("oom_kind", "oom_phase") if row.get(k)]
    return (row.get("status") or "") + (f" ({', '.join(told)})" if told else "")


# (header, function of a row -> cell text). Same columns as the reference tables, plus the
# figures they lacked (tokens padded, host RAM, status).
REFERENCE_COLUMNS: list[tuple[str, Callable[[dict], str]]] = [
    ("model", lambda r: r.get("model") or ""),
    ("dataset", lambda r: r.get("dataset") or ""),
    ("gpu", lambda r: r.get("gpu") or ""),
    ("num_gpus", lambda r: str(r.get("num_gpus") or 0)),
    ("method", lambda r: fmt.method_label(r.get("method"), r.get("sharding"))),
    ("batch_size", setting_cell("batch_size")),
    ("grad_accum", setting_cell("grad_accum")),
    ("max_seq_len", setting_cell("max_seq_len")),
    ("samples_per_s", lambda r: "" if r.get("status") == "oom" else opt_cell(r.get("samples_per_s"))),
    ("tokens_per_s", lambda r: "" if r.get("status") == "oom" else opt_cell(r.get("tokens_per_s"), 2)),
    ("duration", lambda r: "" if r.get("status") == "oom" else fmt.duration(r.get("duration_s"))),
    ("gpu_mem_mb", mem_cell),
    ("host_rss_mb", lambda r: opt_cell(r.get("peak_host_rss_mb"), 1)),
    ("status", status_cell),
]


def reference_table(rows: Sequence[dict]) -> tuple[list[str], list[list[str]]]:
    headers = [h for h, _ in REFERENCE_COLUMNS]
    body = [[f(r) for _, f in REFERENCE_COLUMNS] for r in rows]
    return headers, body


def csv_lines(rows: Iterable[Sequence[object]]) -> str:
    """Rows as CSV text, every cell through :func:`fttui.core.base.inert.csv_cell`: no control
    byte, and no text a spreadsheet would run as a formula (every CSV fttui writes)."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([csv_cell(c) for c in row] for row in rows)
    return buf.getvalue()


def to_csv(headers: list[str], body: list[list[str]]) -> str:
    return csv_lines([headers, *body])


def to_markdown(headers: list[str], body: list[list[str]]) -> str:
    def esc(s: str) -> str:
        return inert(s).replace("|", "\\|")

    lines = ["| " + " | ".join(esc(h) for h in headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def to_text(headers: list[str], body: list[list[str]]) -> str:
    headers = [inert(h) for h in headers]
    body = [[inert(c) for c in r] for r in body]
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in body]  # no trailing spaces
    return "\n".join(out) + "\n"


# Keys of `fttui results --format json` (the stored columns, decoded).
def to_json(rows: Sequence[dict]) -> str:
    return json.dumps(list(rows), indent=2, default=str) + "\n"
