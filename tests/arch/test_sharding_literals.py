"""A sharding kind is named in one place (issue 21): no string literal equal to a kind's name
(other than the default ``none``, a common word), a legacy method name or the legacy ``[zero3]``
table outside the registry, the worker's config builder and the ``--from`` readers; and no
comparison of a sharding with ``"none"``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from fttui.core.base import shardings

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {"fttui/core/base/shardings.py", "fttui/worker/sharding.py"}
ALLOWED_DIRS = ("fttui/core/profiles/foreign/",)


def _sources():
    for p in sorted((ROOT / "fttui").rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        if rel not in ALLOWED and not rel.startswith(ALLOWED_DIRS):
            yield rel, p.read_text(encoding="utf-8")


def test_no_sharding_kind_is_spelled_outside_the_registry():
    names = (set(shardings.NAMES) - {shardings.NONE.name}) | set(shardings.LEGACY_METHODS) | {shardings.LEGACY_SECTION}
    found = [f"{rel}:{node.lineno}: {node.value!r}"
             for rel, text in _sources() for node in ast.walk(ast.parse(text))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names]
    assert found == []


def test_no_sharding_is_compared_with_the_word_none():
    pattern = re.compile(r"sharding\w*(\(\))?[\"']?\)?\s*(==|!=|or)\s*[\"']none[\"']|[\"']none[\"']\s*(==|!=)\s*\w*sharding")
    found = [f"{rel}:{i}: {line.strip()}" for rel, text in _sources()
             for i, line in enumerate(text.splitlines(), 1) if pattern.search(line)]
    assert found == []
