"""fttui.core.results.report: reference-shaped tables, relative throughput, prices, charts, CSV, --where."""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fttui.core.results import report
from fttui.core.base.errors import FttuiError
from fttui.core.results.store import Store
from tests.conftest import ROOT

DATA = Path(__file__).resolve().parents[1] / "data" / "report_rows.json"
DOC = json.loads(DATA.read_text(encoding="utf-8"))
BASELINE = "20250301-135600-baichuan2-7b-lora-58a7"  # Baichuan2-7B LoRA, batch 2, one RTX 4090: 1.341 samples/s
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def rows() -> list[dict]:
    """The fixture rows, through a real store in this test's FTTUI_HOME."""
    with Store() as store:
        for r in DOC["rows"]:
            store.put(r)
        return store.rows()


@pytest.fixture
def prices_toml(tmp_path) -> Path:
    p = tmp_path / "prices.toml"
    lines = [f'unit = "{DOC["prices"]["unit"]}"']
    lines += [f'"{k}" = {v}' for k, v in DOC["prices"].items() if k != "unit"]
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def by_run(table: report.Table) -> dict[str, dict]:
    return {row[table.headers.index("run")]: dict(zip(table.headers, row)) for row in table.cells}


def md_rows(md: str, header_start: str) -> list[list[str]]:
    """The body rows of the first Markdown table whose header line starts with header_start."""
    lines = md.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith(header_start))
    out = []
    for ln in lines[i + 2:]:
        if not ln.startswith("|"):
            break
        out.append([c.strip() for c in ln.strip("|").split(" | ")])
    return out


# ---- the per-run table -----------------------------------------------------------------------


def test_runs_table_has_reference_and_environment_columns(rows):
    rep = report.build_report(rows)
    t = rep.table("runs")
    for col in ("model", "dataset", "gpu", "num_gpus", "method", "batch_size", "grad_accum", "max_seq_len",
                "samples_per_s", "tokens_per_s", "duration", "gpu_mem_mb", "host_rss_mb", "status",
                "card_mem_gb", "interconnect", "driver", "cuda", "torch", "transformers", "peft", "bitsandbytes",
                "deepspeed", "effective_batch", "run"):
        assert col in t.headers, col
    assert len(t.cells) == len(DOC["rows"])
    assert "rel_throughput" not in t.headers and "samples_per_s_per_price" not in t.headers
    md = rep.to_markdown()
    assert "| kind | model | dataset | gpu | card_mem_gb | num_gpus | interconnect | method |" in md
    cells = by_run(t)
    zero3 = cells["20250301-093700-baichuan2-7b-zero3-3df0"]
    assert zero3["method"] == "full (ZeRO-3 offload)" and zero3["duration"] == "3:35:20"
    assert zero3["gpu_mem_mb"] == "15075.9" and zero3["samples_per_s"] == 0.085
    assert zero3["card_mem_gb"] == pytest.approx(24564 / 1024)
    assert (zero3["driver"], zero3["cuda"], zero3["torch"], zero3["transformers"], zero3["peft"],
            zero3["bitsandbytes"], zero3["deepspeed"]) == ("570.172.08", "12.8", "2.8.0+cu128", "5.0.0",
                                                           "0.17.1", "0.47.0", "0.17.5")


def test_oom_rows_have_oom_memory_and_empty_speed_cells(rows):
    rep = report.build_report(rows)
    md = rep.to_markdown()
    body = md_rows(md, "| kind | model |")
    headers = md.splitlines()[next(i for i, ln in enumerate(md.splitlines()) if ln.startswith("| kind | model"))]
    headers = [c.strip() for c in headers.strip("|").split(" | ")]
    oom = [dict(zip(headers, r)) for r in body if r[headers.index("status")].startswith("oom")]
    assert len(oom) == 4
    for r in oom:
        assert r["gpu_mem_mb"] == "OOM"
        assert r["samples_per_s"] == r["tokens_per_s"] == r["duration"] == ""
        assert r["status"] == "oom (cuda)"


def test_two_gpu_row_lists_both_cards_and_interconnect(rows):
    cells = by_run(report.build_report(rows).table("runs"))
    two = cells["20250301-120500-baichuan2-7b-zero3-4d34"]
    assert two["num_gpus"] == 2 and two["gpu_mem_mb"] == "19869.9;19871.9"
    assert two["interconnect"] == "QPI/UPI"
    assert cells["20250301-185200-baichuan2-7b-zero3-772f"]["interconnect"] == "PCIe"
    assert cells["20250301-192900-baichuan2-7b-zero3-7b00"]["interconnect"] == "NVLink"
    assert cells["20250301-135600-baichuan2-7b-lora-58a7"]["interconnect"] == ""  # one card


def test_cpu_and_probe_rows_render(rows):
    cells = by_run(report.build_report(rows).table("runs"))
    cpu = cells["20250302-021600-tiny-lora-a4fb"]
    assert cpu["gpu"] == "cpu" and cpu["num_gpus"] == 0 and cpu["gpu_mem_mb"] == "" and cpu["card_mem_gb"] is None
    assert cpu["cuda"] == "" and cpu["torch"] == "2.8.0+cpu"
    probe = cells["20250302-120000-probe-llama2-7b-lora-9d41-06"]
    assert probe["kind"] == "probe" and probe["gpu_mem_mb"] == "OOM" and probe["gpu"] == ""


# ---- relative throughput and prices ------------------------------------------------------------


def test_relative_throughput_against_baseline_prefix(rows):
    rep = report.build_report(rows, baseline="20250301-135600")
    cells = by_run(rep.table("runs"))
    assert cells[BASELINE]["rel_throughput"] == pytest.approx(1.0)
    assert cells["20250301-204300-baichuan2-7b-lora-82a2"]["rel_throughput"] == pytest.approx(4.468 / 1.341)
    assert cells["20250301-093700-baichuan2-7b-zero3-3df0"]["rel_throughput"] == pytest.approx(0.085 / 1.341)
    assert cells["20250301-143300-baichuan2-7b-lora-5c78"]["rel_throughput"] is None  # OOM
    md = rep.to_markdown()
    assert f"baseline: {BASELINE}" in md and "3.33x" in md


def test_baseline_errors(rows):
    with pytest.raises(FttuiError, match="no stored row"):
        report.build_report(rows, baseline="19990101")
    with pytest.raises(FttuiError, match="rows match"):
        report.build_report(rows, baseline="2025030")
    with pytest.raises(FttuiError, match="no throughput"):
        report.build_report(rows, baseline="20250301-143300-baichuan2-7b-lora-5c78")  # an OOM row


def test_prices_per_unit_match_by_substring_and_multiply_by_cards(rows, prices_toml):
    prices = report.load_prices(prices_toml)
    assert prices.unit == DOC["prices"]["unit"]
    assert prices.price_of("NVIDIA GeForce RTX 4090") == 2.0
    assert prices.price_of("NVIDIA A800 80GB PCIe") == 12.0  # "a800": case-insensitive substring
    assert prices.price_of("NVIDIA H800") is None and prices.price_of("cpu") is None
    cells = by_run(report.build_report(rows, prices=prices).table("runs"))
    assert cells[BASELINE]["samples_per_s_per_price"] == pytest.approx(1.341 / 2.0)
    # two A800 cards: the price of both
    assert cells["20250301-185200-baichuan2-7b-zero3-772f"]["samples_per_s_per_price"] == pytest.approx(1.136 / 24.0)
    assert cells["20250301-151000-baichuan2-7b-lora-6049"]["samples_per_s_per_price"] == pytest.approx(2.609 / 4.0)
    for no_price in ("20250301-204300-baichuan2-7b-lora-82a2", "20250302-021600-tiny-lora-a4fb",
                     "20250301-143300-baichuan2-7b-lora-5c78"):  # H800, CPU, an OOM row
        assert cells[no_price]["samples_per_s_per_price"] is None


def test_price_table_formats(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text("gpu,price,unit\nRTX 4090,1999,USD\nA800 80GB,\"15,000\",USD\n", encoding="utf-8")
    prices = report.load_prices(p)
    assert prices.table == {"RTX 4090": 1999.0, "A800 80GB": 15000.0} and prices.unit == "USD"
    assert prices.price_of("NVIDIA A800 80GB PCIe") == 15000.0
    bare = tmp_path / "bare.csv"
    bare.write_text("RTX 3090,0.9\n", encoding="utf-8")
    assert report.load_prices(bare).table == {"RTX 3090": 0.9}
    sect = tmp_path / "s.toml"
    sect.write_text('[prices]\nunit = "EUR"\n"A100" = 9\n"A100 80GB" = 14\n', encoding="utf-8")
    sp = report.load_prices(sect)
    assert sp.unit == "EUR" and sp.price_of("NVIDIA A100 80GB PCIe") == 14  # the longest name wins
    bad = tmp_path / "bad.toml"
    bad.write_text('"RTX 4090" = "cheap"\n', encoding="utf-8")
    with pytest.raises(FttuiError, match="positive number"):
        report.load_prices(bad)
    with pytest.raises(FttuiError, match="not found"):
        report.load_prices(tmp_path / "missing.toml")
    txt = tmp_path / "p.txt"
    txt.write_text("RTX 4090 = 1\n", encoding="utf-8")
    with pytest.raises(FttuiError, match=".toml or .csv"):
        report.load_prices(txt)


# ---- matrix and GPU comparison -----------------------------------------------------------------


def test_matrix_by_two_settings_with_oom_cells(rows):
    rep = report.build_report(rows)
    sweep = next(t for t in rep.tables if t.slug.startswith("matrix-") and t.headers[0] == "batch_size \\ max_seq_len")
    assert sweep.headers == ["batch_size \\ max_seq_len", "512", "1024"]
    assert [r[0] for r in sweep.cells] == ["4", "8", "16"]
    assert sweep.cells[0][1] == f"15.81 GB / {16.86 / 10:.3f} s"
    assert sweep.cells[2][2] == "OOM"
    methods = next(t for t in rep.tables if t.slug.startswith("matrix-") and t.headers[0] == "method \\ batch_size" and "x2" not in t.title)
    assert methods.headers[1:] == ["1", "2", "4", "8"]
    body = {r[0]: r[1:] for r in methods.cells}
    assert body["lora"][2] == "OOM" and body["lora"][3] == ""  # not run
    assert body["qlora"][3] == "OOM"
    assert body["full (ZeRO-3 offload)"][0].startswith("14.72 GB / ")
    md = rep.to_markdown()
    assert "| batch_size \\ max_seq_len | 512 | 1024 |" in md and "peak GPU memory in GB" in md


def test_group_by_puts_the_setting_first_in_matrices_and_groups(rows):
    rep = report.build_report(rows, group_by="max_seq_len", baseline=BASELINE)
    first = next(t for t in rep.tables if t.slug.startswith("matrix-"))
    assert first.headers[0] == "max_seq_len \\ batch_size"
    g = rep.table("groups")
    assert g.headers[:4] == ["max_seq_len", "rows", "completed", "oom"]
    by = {r[0]: dict(zip(g.headers, r)) for r in g.cells}
    assert by["1024"]["best_samples_per_s"] == 4.468 and by["1024"]["oom"] == 3
    assert rep.table("runs").headers[0] == "max_seq_len"


def test_gpu_comparison_table(rows, prices_toml):
    rep = report.build_report(rows, prices=report.load_prices(prices_toml))
    t = rep.table("gpus")
    assert t is not None and "interconnect" in t.headers
    recs = [dict(zip(t.headers, r)) for r in t.cells]
    zero3 = [r for r in recs if r["method"] == "full (ZeRO-3 offload)"]
    assert [(r["gpu"], r["interconnect"]) for r in zero3] == [
        ("NVIDIA GeForce RTX 4090", "QPI/UPI"), ("NVIDIA A800 80GB PCIe", "PCIe"), ("NVIDIA H800", "NVLink")]
    assert zero3[2]["x_slowest"] == pytest.approx(2.51 / 0.909)
    assert zero3[2]["samples_per_s_per_price"] is None
    # the failed H800 QLoRA row is not compared; a row only on one GPU is not in the table
    assert all(r["batch_size"] in (2, 4) for r in recs) and len(recs) == 8


def test_interconnect_label():
    assert report.interconnect_label(1, [12], "NODE") == ""
    assert report.interconnect_label(2, [18, 18], 40) == "NVLink"
    assert report.interconnect_label(2, 0, "SYSTEM") == "QPI/UPI"
    assert report.interconnect_label(2, None, "SYS") == "QPI/UPI"
    assert report.interconnect_label(2, [0, 0], 30) == "PCIe"
    assert report.interconnect_label(4, None, "PIX") == "PCIe"
    assert report.interconnect_label(2, None, "NV12") == "NVLink"
    assert report.interconnect_label(2) == ""


# ---- --where ------------------------------------------------------------------------------------


def test_filter_rows(rows):
    lora2 = report.filter_rows(rows, ["method=lora", "batch_size=2.0", "num_gpus=1", "kind=run"])
    assert {r["run_id"] for r in lora2} == {BASELINE, "20250301-200600-baichuan2-7b-lora-7ed1",
                                            "20250301-204300-baichuan2-7b-lora-82a2"}
    assert len(report.filter_rows(rows, ["gpu=nvidia h800"])) == 3  # text: any case
    assert len(report.filter_rows(rows, ["kind=probe", "status=oom"])) == 1
    either = report.filter_rows(rows, ["gpu=cpu", "gpu=NVIDIA H800"])  # the same key twice: either
    assert len(either) == 5
    assert len(report.filter_rows(rows, ["gradient_checkpointing=true", "kind=run"])) == 23
    assert len(report.filter_rows(rows, ["group_id="])) == 23  # empty: no group


def test_filter_rows_unknown_column_is_one_line_with_suggestion(rows):
    with pytest.raises(FttuiError) as e:
        report.filter_rows(rows, ["batch_sise=2"])
    msg = str(e.value)
    assert "\n" not in msg and "unknown column 'batch_sise'" in msg and "did you mean 'batch_size'?" in msg
    with pytest.raises(FttuiError, match="KEY=VALUE"):
        report.filter_rows(rows, ["method"])


# ---- files: CSV, PNG, report.md -----------------------------------------------------------------


def test_write_report_charts_and_csv(rows, prices_toml, tmp_path):
    from matplotlib import image

    rep = report.build_report(rows, baseline=BASELINE, prices=report.load_prices(prices_toml))
    out = tmp_path / "rep"
    paths = report.write_report(rep, out)
    names = {p.name for p in paths}
    assert paths[0] == out / "report.md"
    for chart in ("throughput", "relative", "cost", "memory"):
        assert f"{chart}.png" in names and f"{chart}.csv" in names
        png = out / f"{chart}.png"
        data = png.read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 1024
        img = image.imread(png)
        assert img.shape[0] > 100 and img.shape[1] > 100
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "![" in md and "(throughput.png)" in md and "(memory.png)" in md
    assert str(tmp_path) not in md
    runs = list(csv.DictReader(io.StringIO((out / "runs.csv").read_text(encoding="utf-8"))))
    assert len(runs) == len(DOC["rows"])
    base = next(r for r in runs if r["run"] == BASELINE)
    assert float(base["rel_throughput"]) == pytest.approx(1.0) and float(base["samples_per_s_per_price"]) == 0.6705
    assert next(r for r in runs if r["run"] == "20250301-143300-baichuan2-7b-lora-5c78")["gpu_mem_mb"] == "OOM"
    mem = list(csv.DictReader(io.StringIO((out / "memory.csv").read_text(encoding="utf-8"))))
    two = [r for r in mem if r["run_id"] == "20250301-120500-baichuan2-7b-zero3-4d34"]
    assert len(two) == 2 and [float(r["capacity"]) for r in two] == pytest.approx([24564 / 1024] * 2)
    cost = list(csv.DictReader(io.StringIO((out / "cost.csv").read_text(encoding="utf-8"))))
    assert all("H800" not in r["label"] for r in cost)  # no price: not in the cost chart
    for slug in ("gpus", "matrix-1"):
        assert list(csv.reader(io.StringIO((out / f"{slug}.csv").read_text(encoding="utf-8"))))


def _legend(spec) -> set[str]:
    """The legend entries the chart of ``spec`` draws."""
    from fttui.core.results import charts

    legend = charts.figure(spec).axes[0].get_legend()
    return {t.get_text() for t in legend.get_texts()} if legend else set()


def test_the_gpu_memory_chart_names_the_card_memory_line(rows):
    mem = next(c for c in report.build_report(rows).charts if c.name == "memory")
    assert "GPU" in mem.title and "card memory" in _legend(mem)


def test_memory_chart_falls_back_to_host_memory_on_cpu(rows, tmp_path):
    cpu = report.filter_rows(rows, ["gpu=cpu"])
    rep = report.build_report(cpu)
    mem = next(c for c in rep.charts if c.name == "memory")
    assert "host" in mem.title and all(b.capacity == pytest.approx(7900 / 1024) for b in mem.bars)
    # the machine's RAM line is named as the host's RAM, not a card's memory (issue 40 item 7d)
    assert _legend(mem) >= {"host RAM (total)"} and "card memory" not in _legend(mem)
    paths = report.write_report(rep, tmp_path / "cpu")
    assert (tmp_path / "cpu" / "memory.png").read_bytes()[:8] == PNG_SIGNATURE
    assert {p.name for p in paths} >= {"report.md", "runs.csv", "throughput.png"}


def test_report_without_rows_or_charts():
    rep = report.build_report([])
    assert rep.tables == [] and rep.charts == []
    assert "0 rows" in rep.to_markdown()


# ---- the command ---------------------------------------------------------------------------------


def _args(**kw) -> argparse.Namespace:
    base = dict(where=[], group_by=None, baseline=None, prices=None, out=None, kind="all")
    base.update(kw)
    return argparse.Namespace(**base)


def test_cmd_report_prints_markdown(rows, capsys):
    from fttui.cli.report_cmd import cmd_report

    assert cmd_report(_args(where=["model=baichuan2-7b"], baseline="20250301-1356", kind="run")) == 0
    out = capsys.readouterr().out
    assert out.startswith("# fttui report") and "| model | dataset | gpu |" in out
    assert "llama-2-7b" not in out.split("## Runs")[1] and "## Across GPUs" in out
    assert "run with `--out DIR`" in out


def test_cmd_report_baseline_outside_the_kind_and_out_dir(rows, prices_toml, tmp_path, capsys):
    from fttui.cli.report_cmd import cmd_report

    out = tmp_path / "r"
    assert cmd_report(_args(kind="sweep", baseline=BASELINE, prices=str(prices_toml), out=str(out),
                            group_by="batch_size")) == 0
    printed = capsys.readouterr().out.split()
    assert printed[0].endswith("report.md") and (out / "relative.png").is_file()
    runs = list(csv.DictReader(io.StringIO((out / "runs.csv").read_text(encoding="utf-8"))))
    assert {r["run"] for r in runs} == {r["run_id"] for r in DOC["rows"] if r["kind"] == "sweep"}
    assert "batch_size" == list(runs[0])[0]  # --group-by: the grouping column first
    assert all(float(r["rel_throughput"]) > 0 for r in runs if r["status"] == "completed")


def test_cmd_report_errors(rows, capsys):
    from fttui.cli.report_cmd import cmd_report

    with pytest.raises(FttuiError, match="did you mean 'model'"):
        cmd_report(_args(where=["modle=x"]))
    assert cmd_report(_args(where=["model=nothing-like-it"])) == 1
    assert "no stored rows" in capsys.readouterr().err


def test_core_report_imports_no_ui_or_plotting_library():
    code = ("import sys, fttui.core.results.report, fttui.core.results.charts, fttui.cli.report_cmd; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'textual', 'rich', 'matplotlib', 'torch'}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
