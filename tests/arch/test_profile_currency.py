"""The typed Profile is the only currency (issue 37): what the issue counts, counted here so that it
cannot come back.

- no signature takes ``Profile | dict`` or ``Profile | Mapping`` (either order): a line of
  profile code always knows which shape it holds;
- the Profile and its sections read by attribute only: no ``__getitem__``, ``get``, ``keys`` (nor
  the rest of the mapping protocol), and they are no ``Mapping``;
- a dict becomes a Profile at the edges only: ``as_profile(`` at most 5 call sites (there are
  none: the edges call ``stored_profile`` / ``Profile.from_dict``);
- a method is named in the method registry (``fttui/core/base/methods.py``) and the ``--from``
  mappings (``fttui/core/profiles/foreign/``): at most 3 other modules spell a method's name as a
  string (there are none); :data:`NOT_A_METHOD` lists the strings equal to a method's name that
  name something else (the ``[lora]`` section, the breakdown's ``lora`` term, a card panel's
  ``full`` mode), per file.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from fttui.core.base import methods
from fttui.core.profiles import load_profile
from fttui.core.profiles.typed import SECTION_TYPES, Profile

ROOT = Path(__file__).resolve().parents[2]
SELF = "tests/arch/test_profile_currency.py"
REGISTRY = "fttui/core/base/methods.py"
FOREIGN = "fttui/core/profiles/foreign/"

#: file -> (strings equal to a method's name that are not a method, what they are)
SECTION = "the [lora] section's name"
TERM = "the breakdown's lora term (LoRA parameters, gradients and states)"
NOT_A_METHOD: dict[str, tuple[int, str]] = {
    "fttui/core/memory/breakdown.py": (2, TERM),
    "fttui/core/memory/estimate.py": (1, TERM),
    "fttui/core/memory/host.py": (1, TERM),
    "fttui/core/memory/oomterms.py": (1, TERM),
    "fttui/core/memory/resume.py": (1, TERM),
    "fttui/core/memory/sharding.py": (2, TERM),
    "fttui/core/memory/states.py": (1, TERM),
    "fttui/core/models/layouts.py": (2, "a layout's qk_norm kind: the norm over the whole q / k projection"),
    "fttui/core/profiles/schema.py": (1, SECTION),
    "fttui/core/profiles/typed.py": (1, SECTION),
    "fttui/core/run/row/oomexplain.py": (2, TERM),
    "fttui/core/run/row/oomheld.py": (2, TERM),
    "fttui/tui/details.py": (1, "the details grid's label of the [lora] settings"),
    "fttui/tui/run_panels.py": (7, "the cards panel's full mode (a card per rank with its insight lines)"),
    "fttui/worker/allochist.py": (1, TERM),
    "fttui/worker/memtrace.py": (1, TERM),
    "fttui/worker/startup.py": (1, SECTION),
}

_UNION = re.compile(
    r"\bProfile\s*\|\s*(dict|Mapping)\b|\b(dict|Mapping)(\[[^\]]*\])?\s*\|\s*Profile\b|Union\[Profile,\s*(dict|Mapping)"
)


def _python(*roots: str):
    for root in roots:
        for p in sorted((ROOT / root).rglob("*.py")):
            yield p.relative_to(ROOT).as_posix(), p.read_text(encoding="utf-8")


def test_no_signature_takes_a_profile_or_a_dict():
    found = [f"{rel}:{i}: {line.strip()}" for rel, text in _python("fttui", "tests", "bench")
             for i, line in enumerate(text.splitlines(), 1) if _UNION.search(line) and rel != SELF]
    assert found == []


def test_the_profile_reads_by_attribute_only():
    prof = load_profile("tiny-lora")
    for obj in (prof, *(getattr(prof, name) for name in SECTION_TYPES)):
        for attr in ("__getitem__", "get", "keys", "items", "values", "__iter__", "__contains__", "__len__"):
            assert not hasattr(obj, attr), f"{type(obj).__name__}.{attr}"
        assert not isinstance(obj, Mapping), type(obj).__name__
    # the resolved dict is an edge's: equal only through to_dict / from_dict
    assert prof != prof.to_dict() and Profile.from_dict(prof.to_dict()) == prof


def test_as_profile_has_at_most_five_call_sites():
    calls = Counter(f"{rel}:{i}" for rel, text in _python("fttui", "tests", "bench")
                    for i, line in enumerate(text.splitlines(), 1)
                    if "as_profile(" in line and "def as_profile" not in line
                    and rel != SELF)
    assert sum(calls.values()) <= 5, sorted(calls)


def _method_strings(text: str) -> int:
    names = set(methods.NAMES)
    return sum(1 for node in ast.walk(ast.parse(text))
               if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names)


def test_method_names_are_spelled_in_the_registry():
    counts = {rel: n for rel, text in _python("fttui")
              if rel != REGISTRY and not rel.startswith(FOREIGN) and (n := _method_strings(text))}
    spelled = {rel: n - NOT_A_METHOD.get(rel, (0, ""))[0] for rel, n in counts.items()}
    methods_spelled = {rel: n for rel, n in spelled.items() if n > 0}
    assert len(methods_spelled) <= 3, methods_spelled
    # and no more than now: a method named again is asked of the registry instead
    assert methods_spelled == {}, methods_spelled
    # the other words stay what the list says (a removed one brings the list down)
    assert {rel: n for rel, n in counts.items() if rel in NOT_A_METHOD} == \
        {rel: n for rel, (n, _why) in NOT_A_METHOD.items()}


def test_the_registry_types_a_method():
    """A method is a ``Method`` (a checker catches ``Method.QLORAA``); its entry says what the
    modules used to test its name for."""
    assert [m.value for m in methods.Method] == list(methods.NAMES)
    assert methods.get("qlora") is methods.Method.QLORA.kind
    assert [k.name for k in methods.KINDS.values() if k.full] == [methods.Method.FULL]
    assert {k.name: k.bits for k in methods.KINDS.values() if k.quantised} == {"qlora": 4, "lora-int8": 8}
    assert [k.name for k in methods.KINDS.values() if k.embeddings] == [methods.Method.LORA_EMB]
    assert methods.find("full-zero3-offload") is None and methods.find("nope") is None
    # the profile keeps the plain name (TOML, profile.json); its accessor gives the entry
    prof = load_profile("tiny-qlora")
    assert prof.method == "qlora" and type(prof.to_dict()["method"]) is str
    assert prof.method_kind() is methods.Method.QLORA.kind
