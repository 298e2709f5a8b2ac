"""One typed profile travels (issue 21): outside the profile package a profile's sections are read
as attributes (``prof.train.batch_size``), never by key (``prof["train"]["batch_size"]``,
``prof.get("train", {})``); the typed Profile is built from a dict in the profile package only
(``Profile.from_dict`` / ``from_partial`` at most once elsewhere).

A lookup by a section's name is counted wherever it is written: a subscript or a
``get`` / ``pop`` / ``setdefault`` whose key is a section's name. The few that remain read no
profile; :data:`NOT_A_PROFILE` lists them, per file, with what they read. A new lookup fails here
(read the attribute instead); one removed fails too, until the list is brought down."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from fttui.core.profiles.schema import SECTIONS
from fttui.core.base import shardings

ROOT = Path(__file__).resolve().parents[2]
PROFILE_PACKAGE = "fttui/core/profiles/"
NAMES = set(SECTIONS) | {shardings.LEGACY_SECTION}

#: file -> (lookups by a section's name that read no profile, what they read)
ROW = "a store row's (or a row-like summary's) model column"
EVENT = "the start event's JSON (its config, the engine's read-back), written by the worker"
INPUTS = "the estimate's report of its inputs (Estimate.inputs, estimate --json: its quant entry)"
TERM = "the breakdown's lora term (LoRA parameters, gradients and states)"
NOT_A_PROFILE: dict[str, tuple[int, str]] = {
    "fttui/cli/estimate_cmd.py": (1, "the estimate's inputs (Estimate.inputs['model'])"),
    "fttui/cli/insight_lines.py": (2, ROW),
    "fttui/cli/profiles_cmd.py": (1, "profile_summary's model column"),
    "fttui/core/experiments/calibration.py": (2, ROW + " and the setup key's"),
    "fttui/core/experiments/probed.py": (1, "a probe trial's store row: its limits column"),
    "fttui/core/memory/estimate.py": (2, INPUTS),
    "fttui/core/memory/sharding.py": (1, TERM),
    "fttui/core/memory/states.py": (1, TERM),
    "fttui/core/results/labels.py": (4, ROW),
    "fttui/core/results/matrices.py": (2, ROW),
    "fttui/core/results/run_tables.py": (2, ROW),
    "fttui/core/results/tables.py": (1, ROW),
    "fttui/core/results/terminal.py": (1, ROW),
    "fttui/core/results/views.py": (1, ROW),
    "fttui/core/run/fold/perf.py": (3, EVENT),
    "fttui/integrations/hf.py": (1, "the Trainer callback's keyword arguments (kw['model'])"),
    "fttui/tui/details.py": (1, "profile_summary's model column"),
    "fttui/tui/probe_form.py": (1, "the probe form's data toggle (a field's value)"),
    "fttui/tui/probe_screen.py": (1, "the probe form's data toggle (a field's value)"),
    "fttui/tui/run_panels.py": (1, ROW),
    "fttui/worker/arguments.py": (1, "the TrainingArguments keyword deepspeed"),
    "fttui/worker/runtime.py": (2, EVENT),
}


def _lookups(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in NAMES:
            found.append((node.lineno, f"[{node.slice.value!r}]"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("get", "pop", "setdefault") and node.args
              and isinstance(node.args[0], ast.Constant) and node.args[0].value in NAMES):
            found.append((node.lineno, f".{node.func.attr}({node.args[0].value!r})"))
    return sorted(found)


def _sources():
    for p in sorted((ROOT / "fttui").rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        if not rel.startswith(PROFILE_PACKAGE):
            yield rel, p.read_text(encoding="utf-8")


def test_no_raw_section_lookup_outside_the_profile_package():
    where: dict[str, list[str]] = {}
    for rel, text in _sources():
        for line, what in _lookups(ast.parse(text)):
            where.setdefault(rel, []).append(f"{rel}:{line}: {what}")
    counts = {rel: len(found) for rel, found in where.items()}
    assert counts == {rel: n for rel, (n, _why) in NOT_A_PROFILE.items()}, \
        "\n".join(x for rel, found in where.items() if counts[rel] != NOT_A_PROFILE.get(rel, (0, ""))[0] for x in found)


def test_the_typed_profile_is_built_in_the_profile_package():
    calls = Counter()
    for rel, text in _sources():
        for node in ast.walk(ast.parse(text)):
            if (isinstance(node, ast.Attribute) and node.attr in ("from_dict", "from_partial")
                    and isinstance(node.value, ast.Name) and node.value.id == "Profile"):
                calls[f"{rel}:{node.lineno}"] += 1
    assert sum(calls.values()) <= 1, sorted(calls)


def test_the_count_sees_every_form():
    """The counter itself: each way of reading a section by its name is one lookup."""
    text = ('a = p["train"]["batch_size"]\nb = p.get("devices", {})\nc = p.get("model") or {}\n'
            'd = q.pop("data")\ne = r.setdefault("limits", {})\nf = s[\'zero3\']\ng = p.train.batch_size\n'
            'h = row["profile"]\n')
    assert [what for _line, what in _lookups(ast.parse(text))] == [
        "['train']", ".get('devices')", ".get('model')", ".pop('data')", ".setdefault('limits')", "['zero3']"]
