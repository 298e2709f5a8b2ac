"""Stopping a process tree is written once (issue 38): ``os.killpg`` and ``os.kill`` are called
in one module of fttui, :mod:`fttui.core.run.processes.proctree`, and ``RunDir`` only reads and writes files:
``rundir.py`` neither signals a process nor asks Slurm (that is :mod:`fttui.core.run.processes.liveness`
and :mod:`fttui.core.run.processes.cancel`)."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
FTTUI = ROOT / "fttui"
PROCTREE = "fttui/core/run/processes/proctree.py"
RUNDIR = "fttui/core/run/files/rundir.py"
SIGNALLERS = {"kill", "killpg"}


def _modules() -> dict[str, ast.Module]:
    return {str(p.relative_to(ROOT)): ast.parse(p.read_text(), str(p)) for p in sorted(FTTUI.rglob("*.py"))}


def _os_signal_calls(tree: ast.Module) -> set[str]:
    """``os.kill`` / ``os.killpg`` called (``os.killpg(...)``) or imported from os (``from os
    import killpg``) in one module."""
    found = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in SIGNALLERS
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            found.add(f"os.{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module in ("os", "posix"):
            found |= {f"os.{a.name}" for a in node.names if a.name in SIGNALLERS}
    return found


def _imports(tree: ast.Module) -> set[str]:
    """Every module ``tree`` imports, inside functions too (``from a import b``: ``a`` and ``a.b``)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def test_os_killpg_is_called_in_exactly_one_module_of_fttui():
    calls = {path: _os_signal_calls(tree) for path, tree in _modules().items()}
    killpg = sorted(path for path, found in calls.items() if "os.killpg" in found)
    assert killpg == [PROCTREE], f"os.killpg outside {PROCTREE}: {killpg}"


def test_os_kill_is_called_only_by_the_process_tree_module():
    kill = sorted(path for path, found in _modules().items() if "os.kill" in _os_signal_calls(found))
    assert kill == [PROCTREE], f"os.kill outside {PROCTREE}: {kill}"


def test_rundir_neither_signals_nor_runs_commands_nor_asks_slurm():
    tree = _modules()[RUNDIR]
    assert not _os_signal_calls(tree), f"{RUNDIR} signals a process"
    imported = _imports(tree)
    forbidden = {"signal", "subprocess", "fttui.monitor.slurm", "fttui.monitor"} & imported
    assert not forbidden, f"{RUNDIR} imports {sorted(forbidden)}"
    for name in ("fttui.core.run.processes.proctree", "fttui.core.run.processes.liveness", "fttui.core.run.processes.cancel"):
        assert name not in imported, f"{RUNDIR} imports {name}: it reads and writes files only"


def test_rundir_reaches_neither_slurm_nor_the_process_tree_through_its_imports():
    graph = grimp.build_graph("fttui", include_external_packages=False, cache_dir=None)
    reached = graph.find_upstream_modules("fttui.core.run.files.rundir")
    for name in ("fttui.monitor.slurm", "fttui.core.run.processes.proctree", "fttui.core.run.processes.liveness", "fttui.core.run.processes.cancel"):
        chain = graph.find_shortest_chain(importer="fttui.core.run.files.rundir", imported=name) if name in reached else None
        assert chain is None, f"fttui.core.run.files.rundir imports {name}: {' -> '.join(chain)}"


def test_the_rundir_record_has_no_signalling_or_slurm_methods():
    from fttui.core.run.files.rundir import RunDir

    for name in ("request_cancel", "signal_training", "is_live", "state_label", "slurm_state", "training_alive"):
        assert not hasattr(RunDir, name), f"RunDir.{name}: liveness and cancel are fttui.core.run.processes.liveness / cancel"
