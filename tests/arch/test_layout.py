"""The code's shape, checked: import layers (import-linter contracts in pyproject.toml), no import
cycle between modules or between packages (every import counted: inside functions and under
TYPE_CHECKING too), bench/ only above fttui/, and no module over 320 logical lines."""

from __future__ import annotations

import subprocess
import sys
import tokenize
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
#: A size guide (never a reason to trim a file: split it by meaning): Python's logical lines, a
#: statement over several lines counting once, comments and blank lines not at all, so that the
#: formatter's line breaks change nothing. 320 is where 400 physical lines stood before ruff format.
MAX_LOGICAL_LINES = 320


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("fttui", include_external_packages=False, cache_dir=None)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (or a node importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # iterative Tarjan would be longer; the graph is small
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges.get(v, ()):
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def module_edges(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def package_edges(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    """Edges between sibling packages/modules at every level: ``a.x -> b.y`` (a, b siblings under
    the same parent) becomes ``a -> b``."""
    edges: dict[str, set[str]] = {}
    for src, dsts in module_edges(graph).items():
        for dst in dsts:
            s, d = src.split("."), dst.split(".")
            i = 0
            while i < min(len(s), len(d)) and s[i] == d[i]:
                i += 1
            if i < len(s) and i < len(d):  # diverge below a common parent
                a, b = ".".join(s[: i + 1]), ".".join(d[: i + 1])
                edges.setdefault(a, set()).add(b)
    return edges


def test_no_module_cycle(graph):
    assert _cycles(module_edges(graph)) == []


def test_no_package_cycle(graph):
    assert _cycles(package_edges(graph)) == []


def test_bench_only_imports_fttui():
    """bench/ sits above fttui/: fttui never imports it (bench is no package fttui could name)."""
    for path in (ROOT / "fttui").rglob("*.py"):
        text = path.read_text()
        assert "import bench" not in text and "from bench" not in text, path


def logical_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for tok in tokenize.tokenize(f.readline) if tok.type == tokenize.NEWLINE)


def test_no_module_over_the_size_guide():
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / "fttui").rglob("*.py"))
            if (n := logical_lines(p)) > MAX_LOGICAL_LINES}
    assert long == {}


def test_import_contracts():
    """`lint-imports` with the contracts of pyproject.toml (also run by `make test`)."""
    exe = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(exe), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
