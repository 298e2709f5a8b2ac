"""The profile table of docs/architecture.md names exactly the schema's keys (issue 21: the
schema is declared once, the docs follow it)."""

from __future__ import annotations

import re
from pathlib import Path

from fttui.core.profiles.schema import ALL_KEYS

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def _table_keys() -> set[str]:
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("| key | type | default | meaning |"):]
    table = table[: table.index("\n\n")]
    keys: set[str] = set()
    for line in table.splitlines()[2:]:
        names = re.findall(r"`([a-z0-9_.]+)`", line.split("|")[1])
        section = names[0].rpartition(".")[0]
        keys.add(names[0])
        keys.update(f"{section}.{n}" for n in names[1:])  # `lora.r` / `alpha` / `dropout`
    return keys


def test_the_docs_table_names_every_schema_key():
    assert _table_keys() == set(ALL_KEYS)
