"""The token lengths of a profile's data, tokenised once and cached (``fttui data``, the planner).

Tokenising needs the training stack, so it runs in a worker process
(``python -m fttui.worker.datastats``); its result, one ``(index, raw tokens, first response
token)`` triple per record, is cached under ``$FTTUI_HOME/cache/data/`` by the data file's
content hash, the tokenizer (its spec and the bytes of its files) and the template version, so
the second call for the same file and tokenizer reads a file instead of tokenising. The
content hash itself is remembered by path, size and mtime, so an unchanged 1 GB file is not
hashed again either. Figures for any ``max_seq_len`` and batch size come from the cached lengths
(:mod:`fttui.core.data.lengths`).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from fttui.core.base import paths
from fttui.core.base.errors import FttuiError
from fttui.core.data.lengths import DataStats, SampleLength, summarise
from fttui.core.profiles.typed import ModelSettings, Profile

TEMPLATE_VERSION = 1  # bump when fttui.worker.data.tokenize_record changes what it emits
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "vocab.txt",
)
Progress = Callable[[int, int, int], None]  # (bytes done, bytes total, records)


class NotCached(FttuiError):
    """The data file's lengths are not in the cache (and were not to be measured now)."""


def _cache() -> Path:
    return paths.cache_dir() / "data"


def file_hash(path: str) -> str:
    """SHA-256 of the file's bytes, remembered by (path, size, mtime) in the cache folder."""
    st = os.stat(path)
    ident = f"{os.path.realpath(path)}\0{st.st_size}\0{st.st_mtime_ns}"
    memo = _cache() / "hashes" / (hashlib.sha256(ident.encode()).hexdigest()[:32] + ".txt")
    try:
        return memo.read_text().strip()
    except OSError:
        pass
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    _write_atomic(memo, digest)
    return digest


def tokenizer_spec(model: ModelSettings) -> str:
    """What the worker's ``load_tokenizer`` loads: ``byte`` or a path / hub id."""
    spec = model.tokenizer
    if spec in (None, ""):
        spec = "byte" if model.init == "random" else model.name_or_path
    return str(spec)


def _tokenizer_ident(model: ModelSettings) -> str:
    spec = tokenizer_spec(model)
    h = hashlib.sha256(spec.encode())
    folder = Path(spec).expanduser()
    if spec != "byte" and folder.is_dir():
        for name in TOKENIZER_FILES:
            try:
                h.update(name.encode() + (folder / name).read_bytes())
            except OSError:
                continue
    return h.hexdigest()


def cache_key(profile: Profile) -> str:
    data = profile.data
    parts = [file_hash(data.source), _tokenizer_ident(profile.model), str(data.format or "auto"), str(TEMPLATE_VERSION)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:40]


def _write_atomic(path: Path, text: str) -> None:
    paths.ensure_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _tokenise(profile: Profile, out: Path, progress: Progress | None) -> None:
    paths.ensure_dir(out.parent)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        prof = Path(tmp) / "profile.json"
        prof.write_text(json.dumps({"model": profile.model.to_dict(), "data": profile.data.to_dict()}))
        argv = [sys.executable, "-m", "fttui.worker.datastats", "--profile", str(prof), "--out", str(out)]
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        last_lines: list[str] = []
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                try:
                    obj = json.loads(line)
                except ValueError:
                    obj = None
                if isinstance(obj, dict) and "done" in obj:
                    if progress is not None:
                        progress(int(obj["done"]), int(obj["total"]), int(obj["records"]))
                elif line.strip():
                    last_lines = (last_lines + [line.strip()])[-5:]
            rc = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    if rc != 0:
        said = next((ln for ln in reversed(last_lines) if ln.startswith("fttui:")), None)
        if said:
            raise FttuiError(said.removeprefix("fttui:").strip())
        raise FttuiError(
            f"tokenising {profile.data.source} failed (exit {rc}): " + (last_lines[-1] if last_lines else "no output")
        )


def lengths(
    profile: Profile, progress: Progress | None = None, tokenise: bool = True
) -> tuple[list[SampleLength], bool | None]:
    """Every record's length and whether it came from the cache (None: synthetic data, its own
    ``num_samples`` samples of exactly ``max_seq_len`` tokens, nothing tokenised). With
    ``tokenise=False`` a file not in the cache is not tokenised: :class:`NotCached`."""
    data = profile.data
    source = data.source or "synthetic"
    if source == "synthetic":
        n = int(data.num_samples or 0) or 256
        return [SampleLength(i, int(data.max_seq_len), 0) for i in range(n)], None
    if not os.path.isfile(source):
        raise FttuiError(f"data.source: {source}: data file not found")
    out = _cache() / f"{cache_key(profile)}.json"
    hit = out.is_file()
    if not hit and not tokenise:
        raise NotCached(f"{source}: lengths not measured yet (`fttui data` measures them)")
    if not hit:
        _tokenise(profile, out, progress)
    try:
        doc = json.loads(out.read_text(encoding="utf-8"))
        triples = doc["lengths"]
    except (OSError, ValueError, KeyError):  # a damaged cache entry: tokenise again
        out.unlink(missing_ok=True)
        return lengths(profile, progress)
    samples = [SampleLength(int(i), int(raw), int(first)) for i, raw, first in triples]
    n = int(data.num_samples or 0)
    return (samples[:n] if n > 0 else samples), hit


def data_stats(
    profile: Profile,
    batch_size: int | None = None,
    progress: Progress | None = None,
    tokenise: bool = True,
) -> tuple[DataStats, bool | None]:
    """``fttui data``'s figures at the profile's ``max_seq_len`` and batch size (or ``batch_size``);
    ``tokenise=False``: from the cache only (:class:`NotCached` when the file is not in it)."""
    samples, hit = lengths(profile, progress, tokenise)
    bs = int(batch_size or profile.train.batch_size or 1)
    return summarise(samples, int(profile.data.max_seq_len), bs, int(profile.train.seed)), hit
