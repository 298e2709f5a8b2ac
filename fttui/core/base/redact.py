"""Keep secrets out of what fttui writes and prints: one masking function for every boundary.

:func:`mask` masks a value of any JSON shape (events, samples, status, rows, ``command.json``,
``profile.json``, exports); :func:`mask_text` masks one string (a message, an output line) and
:class:`Redactor` masks bytes (the training's log, lines of any length). They all mask, with
``***``:

- the values of secret-named options and pairs: ``--hub-token VALUE``, ``--api-key=VALUE``,
  ``password=VALUE``, ``"client_secret": "VALUE"`` (a name is secret by :func:`is_secret_name`);
- ``Authorization: Bearer VALUE`` / ``Basic`` / ``token`` and a bare ``Bearer VALUE``;
- the values of secret-named environment variables (this process's environment, or the one given);
- known token shapes wherever they are (Hugging Face ``hf_``, OpenAI-style ``sk-``, GitHub, AWS).

In a structure, a dict key that is a secret name masks its string value (numbers are never
secrets: ``flops_per_token`` stays a figure) and in a list of strings (an argv) a secret-named
option masks the item after it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

MASK = "***"
_MASK_B = MASK.encode()

# Token shapes worth hiding even when they are not in the environment.
_TOKEN_SHAPES = [
    r"hf_[A-Za-z0-9]{30,}",  # Hugging Face
    r"sk-[A-Za-z0-9_-]{20,}",  # OpenAI-style API keys
    r"gh[pousr]_[A-Za-z0-9]{30,}",  # GitHub
    r"github_pat_[A-Za-z0-9_]{30,}",
    r"AKIA[0-9A-Z]{16}",  # AWS access key id
    r"xox[abpr]-[A-Za-z0-9-]{10,}",  # Slack
]
TOKEN_PATTERNS = [re.compile(p.encode()) for p in _TOKEN_SHAPES]
_TOKENS = re.compile("|".join(_TOKEN_SHAPES))

#: Words that make a name secret wherever they appear in it.
_SECRET_WORDS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "api_key",
    "apikey",
    "access_key",
    "private_key",
    "credential",
    "auth_token",
    "authtoken",
)
#: ``X_token`` names that are not secrets: a tokenizer's special tokens, ``flops_per_token``.
_NOT_SECRET_BEFORE_TOKEN = frozenset(
    {
        "pad",
        "eos",
        "bos",
        "unk",
        "sep",
        "cls",
        "mask",
        "special",
        "per",
        "start",
        "end",
        "image",
        "new",
        "max",
        "num",
        "decoder",
        "sample",
    }
)

# A candidate ``NAME = VALUE`` / ``NAME: VALUE`` / ``--NAME VALUE``; the name is then checked
# with is_secret_name (so ``max_tokens=5`` and ``tokens: 3`` stay as they are).
_TRIGGER = re.compile(r"pass|secret|token|key|credential|auth|bearer|pat\b", re.I)
_PAIR = re.compile(
    r"""(?P<name>(?<![\w.-])--?[A-Za-z][\w.-]*|(?<![\w.-])[A-Za-z_][\w.-]*)"""
    r"""(?P<sep>["']?\s*[=:]\s*["']?|(?<=[\w.-])\s+(?=\S))"""
    r"""(?=(?P<value>[^\s"',;&)}\]]+))"""
)
_AUTH = re.compile(r"(?i)(\bauthorization[\"']?\s*[:=]\s*[\"']?(?:bearer|basic|token|bot)?\s*)([^\s\"',;]+)")
_SCHEMES = ("bearer", "basic", "token", "bot")
_BEARER = re.compile(r"(?i)(\bbearer\s+)([A-Za-z0-9._~+/-]+=*)")


#: A file's name or a path (``my-token-notes.toml``, ``data/secret_set.jsonl``): what it names is a
#: file, never a secret, though a word of it may read like one (issue 36: a profile file called
#: ``pat-notes.toml`` had its errors masked).
_FILE_NAME = re.compile(
    r"[/\\]|\.(toml|jsonl?|ya?ml|py|txt|csv|tsv|log|md|sh|sbatch|cfg|ini|parquet|arrow|gz|out)$", re.I
)


def is_secret_name(name: str) -> bool:
    """A name (option, key, environment variable) whose value is a secret: ``HF_TOKEN``,
    ``--hub-token``, ``password``, ``AWS_SECRET_ACCESS_KEY``, ``api-key``; not ``tokens``,
    ``max_tokens``, ``tokenizer``, ``pad_token_id``, ``flops_per_token``, a name that only
    begins with ``token`` or ``pat`` (``token-test``, ``pat-notes``), nor a file's name or a path
    (``secret-project.toml``)."""
    raw = name.strip().lstrip("-")
    if _FILE_NAME.search(raw):
        return False
    n = raw.lower().replace("-", "_").replace(".", "_")
    if not n:
        return False
    if any(w in n for w in _SECRET_WORDS):
        return True
    parts = n.split("_")
    last = parts[-1]  # HF_TOKEN, --hub-token, GITHUB_PAT: the token is what the name ends in
    if last not in ("token", "pat") or (last == "pat" and len(parts) == 1):
        return n in ("authorization", "auth")
    return len(parts) == 1 or parts[-2] not in _NOT_SECRET_BEFORE_TOKEN


def _env_secret_values(env: Mapping[str, str] | None) -> list[str]:
    env = os.environ if env is None else env
    values = {v for k, v in env.items() if v and len(v) >= 6 and is_secret_name(k)}
    return sorted(values, key=len, reverse=True)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of an environment mapping with the values of secret-looking names masked."""
    return {k: (MASK if is_secret_name(k) and v else v) for k, v in env.items()}


def _mask_pairs(text: str) -> str:
    """Mask the values of secret-named pairs; the value is a lookahead, so a pair inside the
    value of another (``error: password=x``) is still seen."""
    out, pos = [], 0
    for m in _PAIR.finditer(text):
        name, sep, value = m.group("name"), m.group("sep"), m.group("value")
        start = m.end()
        if start < pos or value == MASK or value.lower() in _SCHEMES or not is_secret_name(name):
            continue
        if not sep.strip() and not name.startswith("-"):  # "NAME VALUE" only for an option
            continue
        out.append(text[pos:start])
        out.append(MASK)
        pos = start + len(value)
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def mask_text(text: str, env_values: list[str] | None = None) -> str:
    """``text`` with every secret it holds masked (see the module's docstring). ``env_values``:
    the secret values to mask (default: those of this process's environment)."""
    if not text:
        return text
    for v in _env_secret_values(None) if env_values is None else env_values:
        if v in text:
            text = text.replace(v, MASK)
    text = _TOKENS.sub(MASK, text)
    if _TRIGGER.search(text):
        text = _AUTH.sub(lambda m: m.group(1) + MASK, text)
        text = _BEARER.sub(lambda m: m.group(1) + MASK, text)
        text = _mask_pairs(text)
    return text


def _mask(obj: Any, values: list[str]) -> Any:
    if isinstance(obj, str):
        return mask_text(obj, values)
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            if isinstance(v, str) and v and isinstance(k, str) and is_secret_name(k):
                out[k] = MASK
            else:
                out[k] = _mask(v, values)
        return out
    if isinstance(obj, (list, tuple)):
        out_list, hide_next = [], False
        for item in obj:
            if hide_next and isinstance(item, str) and item:
                out_list.append(MASK)
                hide_next = False
                continue
            hide_next = isinstance(item, str) and item.startswith("-") and "=" not in item and is_secret_name(item)
            out_list.append(_mask(item, values))
        return out_list
    return obj


def mask(obj: Any, env: Mapping[str, str] | None = None) -> Any:
    """A copy of ``obj`` (any JSON shape) with every secret masked: the one function applied
    wherever fttui writes or prints (see the module's docstring)."""
    return _mask(obj, _env_secret_values(env))


class Redactor:
    """Masks secrets in bytes (the training's output), as :func:`mask_text` does in text; the
    environment's secret values are read once."""

    def __init__(self, env: Mapping[str, str] | None = None):
        self._values = _env_secret_values(env)
        self.values = [v.encode() for v in self._values]

    def __call__(self, data: bytes) -> bytes:
        for v in self.values:
            if v in data:
                data = data.replace(v, _MASK_B)
        if not _TRIGGER.search(data.decode("latin-1")) and not any(p.search(data) for p in TOKEN_PATTERNS):
            return data
        text = data.decode("utf-8", "surrogateescape")
        return mask_text(text, self._values).encode("utf-8", "surrogateescape")


#: How much of the end of a long unfinished line is kept back when part of it must be written:
#: a secret arriving in two reads is masked whole.
KEEP_BACK = 4096
_INTRO = re.compile(r"(?i)(bearer|authorization[\"']?\s*[:=]?|--?[\w.-]+|[\w.-]+\s*[=:])\s*$")


def split_long(buf: bytes, keep: int = KEEP_BACK) -> tuple[bytes, bytes]:
    """Where to cut a long line that has no end yet: ``(write_now, keep)``. The cut is at a
    space at least ``keep`` bytes before the end, never just after a name that introduces a
    secret (``Bearer``, ``--hub-token``, ``password=``); without a space, ``keep`` bytes from
    the end."""
    limit = len(buf) - keep
    if limit <= 0:
        return b"", buf
    cut = limit
    probe = limit
    while probe > 0:
        sp = max(buf.rfind(b" ", 0, probe), buf.rfind(b"\t", 0, probe))
        if sp <= 0:
            break
        head = buf[max(0, sp - 80) : sp].decode("latin-1")
        if not _INTRO.search(head):
            cut = sp + 1
            break
        probe = sp
    return buf[:cut], buf[cut:]


__all__ = [
    "MASK",
    "TOKEN_PATTERNS",
    "is_secret_name",
    "redact_env",
    "mask",
    "mask_text",
    "Redactor",
    "split_long",
    "KEEP_BACK",
]
