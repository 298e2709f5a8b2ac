"""Keep secrets out of what fttui writes: run logs and captured environments."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)
# Token shapes worth hiding even when they are not in the environment.
TOKEN_PATTERNS = [
    re.compile(rb"hf_[A-Za-z0-9]{30,}"),  # Hugging Face
    re.compile(rb"sk-[A-Za-z0-9_-]{20,}"),
    re.compile(rb"gh[pousr]_[A-Za-z0-9]{30,}"),  # GitHub
    re.compile(rb"AKIA[0-9A-Z]{16}"),  # AWS access key id
]
MASK = b"***"


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of an environment mapping with the values of secret-looking names masked."""
    return {k: ("***" if is_secret_name(k) and v else v) for k, v in env.items()}


class Redactor:
    """Masks the values of secret environment variables and known token shapes in bytes."""

    def __init__(self, env: Mapping[str, str] | None = None):
        env = os.environ if env is None else env
        values = {v for k, v in env.items() if is_secret_name(k) and v and len(v) >= 6}
        self.values = sorted((v.encode() for v in values), key=len, reverse=True)

    def __call__(self, data: bytes) -> bytes:
        for v in self.values:
            if v in data:
                data = data.replace(v, MASK)
        for pat in TOKEN_PATTERNS:
            data = pat.sub(MASK, data)
        return data
