"""Regenerate fttui/core/profiles/foreign/known_keys.json: the top-level keys LLaMA-Factory and
axolotl accept, so that `--from FILE.yaml` tells a key those tools know (listed as not mapped)
from a key neither knows (a typo: one line, exit 2).

The keys are read from the tools' source distributions (their argument dataclasses / pydantic
schemas and the keys of their bundled example configs) and from the installed transformers'
TrainingArguments, which both pass through. Usage (needs transformers installed):

    pip download --no-deps --no-binary :all: llamafactory==0.9.5 axolotl==0.19.0
    tar xzf llamafactory-0.9.5.tar.gz && tar xzf axolotl-0.19.0.tar.gz
    python scripts/foreign_keys.py llamafactory-0.9.5 axolotl-0.19.0
"""

from __future__ import annotations

import ast
import dataclasses
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "fttui" / "core" / "profiles" / "foreign" / "known_keys.json"


def _class_fields(files) -> set[str]:
    out: set[str] = set()
    for path in files:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for st in node.body:
                    if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                        name = st.target.id
                        if not name.startswith("_") and not name.isupper():
                            out.add(name)
    return out


def _example_keys(folder: Path, skip_parts: tuple[str, ...] = ()) -> set[str]:
    import yaml

    out: set[str] = set()
    for path in list(folder.rglob("*.yaml")) + list(folder.rglob("*.yml")):
        if any(part in path.parts for part in skip_parts):
            continue
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError):
            continue
        if isinstance(data, dict) and "compute_environment" not in data:  # not an accelerate config
            out.update(str(k) for k in data)
    return out


def main(argv: list[str]) -> int:
    lf_root, ax_root = Path(argv[0]), Path(argv[1])
    from transformers import TrainingArguments

    trainer = {f.name for f in dataclasses.fields(TrainingArguments)}
    lf = _class_fields((lf_root / "src" / "llamafactory" / "hparams").glob("*.py"))
    lf |= _example_keys(lf_root / "examples", skip_parts=("v1",))
    ax = _class_fields((ax_root / "src" / "axolotl" / "utils" / "schemas").rglob("*.py"))
    ax |= _class_fields((ax_root / "src" / "axolotl" / "integrations").rglob("args.py"))
    ax |= _example_keys(ax_root / "examples")
    data = {
        "sources": {"llamafactory": lf_root.name, "axolotl": ax_root.name,
                    "transformers": __import__("transformers").__version__},
        "trainer": sorted(trainer),
        "llamafactory": sorted(lf - trainer),
        "axolotl": sorted(ax - trainer),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=0) + "\n", encoding="utf-8")
    print(f"{OUT.name}: trainer {len(trainer)}, llamafactory {len(data['llamafactory'])}, axolotl {len(data['axolotl'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
