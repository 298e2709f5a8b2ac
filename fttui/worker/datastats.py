"""Tokenise a profile's data file and write every record's length (``fttui data``, ``probe --data``).

``python -m fttui.worker.datastats --profile PROFILE.json --out LENGTHS.json`` reads the resolved
profile's ``model`` (tokenizer) and ``data`` (file, format) sections, tokenises each record with
the same template as training (:func:`fttui.worker.data.tokenize_record`, untruncated), and writes
``{"lengths": [[index, raw_tokens, first_response_token], ...], "tokenizer": NAME}``. Progress goes
to stderr as JSON lines ``{"done": bytes, "total": bytes, "records": n}`` (about twice a second),
so that the CLI can draw a bar for a large file. Bad data: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from fttui.core.base.errors import DataError
from fttui.core.data.records import iter_records
from fttui.core.profiles.stored import stored_profile
from fttui.core.profiles.typed import Profile

UNTRUNCATED = 1 << 31


def measure(profile: Profile, progress=None) -> dict:
    """``{"lengths": [[index, raw, first_label], ...], "tokenizer": name}`` of the profile's data."""
    from .data import IGNORE, tokenize_record
    from .tokenizer import load_tokenizer

    prof = profile
    data = prof.data
    tok = load_tokenizer(prof.model)
    out: list[list[int]] = []
    last = 0.0
    for i, (rec, done, total) in enumerate(iter_records(data.source, data.format)):
        item = tokenize_record(rec, tok, UNTRUNCATED)
        first = next((j for j, lab in enumerate(item["labels"]) if lab != IGNORE), -1)
        out.append([i, len(item["input_ids"]), first])
        now = time.monotonic()
        if progress is not None and (now - last > 0.5 or done == total):
            progress({"done": done, "total": total, "records": i + 1})
            last = now
    return {"lengths": out, "tokenizer": getattr(tok, "name", type(tok).__name__)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fttui.worker.datastats")
    ap.add_argument("--profile", required=True, help="resolved profile (JSON)")
    ap.add_argument("--out", required=True, help="where to write the lengths (JSON)")
    args = ap.parse_args(argv)
    with open(args.profile, encoding="utf-8") as f:
        profile = stored_profile(json.load(f))  # the edge: a resolved profile's JSON

    def progress(obj: dict) -> None:
        sys.stderr.write(json.dumps(obj) + "\n")
        sys.stderr.flush()

    try:
        result = measure(profile, progress)
    except DataError as e:
        print(f"fttui: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a tokenizer folder that cannot be read
        print(f"fttui: cannot load the tokenizer: {e}", file=sys.stderr)
        return 2
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, separators=(",", ":"))
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
