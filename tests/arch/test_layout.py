"""The code's shape, checked: import layers (import-linter contracts in pyproject.toml), no import
cycle between modules or between packages (every import counted: inside functions and under
TYPE_CHECKING too), bench/ only above fttui/, no package of more than 24 modules, and no module
that reaches into most of its package (issue 38: a rule that splits by meaning, not by size)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
#: A package of more modules holds more than one concern (the worker's 24 modules, one concern:
#: the training process, is the most a package holds): split it into packages by what they own.
MAX_PACKAGE_MODULES = 24
#: Fan-out: how many modules of its own package a module imports. One that reaches into most of its
#: package holds several of its ideas (a summary that folded, judged and classified in one place
#: imported 12 of its 43 siblings before issue 38). The composition roots (the worker's training
#: loop, the report) import 9; a new module past this number is split by what it does. Size is no
#: rule: a long module of one idea stays whole (docs/architecture.md, "Size and shape").
MAX_SIBLING_IMPORTS = 10


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


def test_no_package_holds_more_than_one_concern_s_modules():
    counts = Counter(str(p.parent.relative_to(ROOT)) for p in (ROOT / "fttui").rglob("*.py") if p.name != "__init__.py")
    assert {d: n for d, n in counts.items() if n > MAX_PACKAGE_MODULES} == {}


def sibling_imports(graph: grimp.ImportGraph, module: str) -> set[str]:
    """The modules of ``module``'s own package that it imports directly (inside functions too)."""
    package = module.rsplit(".", 1)[0]
    return {m for m in graph.find_modules_directly_imported_by(module)
            if m.rsplit(".", 1)[0] == package and m != package}


def test_no_module_reaches_into_most_of_its_package(graph):
    wide = {m: sorted(s) for m in graph.modules if len(s := sibling_imports(graph, m)) > MAX_SIBLING_IMPORTS}
    assert wide == {}


def test_import_contracts():
    """`lint-imports` with the contracts of pyproject.toml (also run by `make test`)."""
    exe = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(exe), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
