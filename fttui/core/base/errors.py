"""The errors fttui reports to the user: one base, one line each (exit code 2 for bad input).

``FttuiError`` is the base of every error fttui expects and reports. ``HintedError`` adds the
file (and key) it is about and a hint saying what would fix it: ``FILE: KEY: MESSAGE (HINT)``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def one_line(text: object) -> str:
    """``text`` with every run of whitespace (newlines included) folded into one space."""
    return " ".join(str(text).split())


def did_you_mean(word: str, candidates: Iterable[str]) -> str | None:
    """``"did you mean 'batch_size'?"`` for the closest candidate, or None."""
    match = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"did you mean '{match[0]}'?" if match else None


class FttuiError(Exception):
    """Base of fttui's user-facing errors; ``str()`` is one line."""

    exit_code = 2

    def __str__(self) -> str:
        return one_line(super().__str__())


class HintedError(FttuiError):
    """An error about a file (and a key in it) with a hint: ``FILE: KEY: MESSAGE (HINT)``.

    Parts that are ``None`` are left out. Subclasses name what ``default`` says when every part
    is missing.
    """

    default = "invalid input"

    def __init__(
        self, file: str | None = None, key: str | None = None, message: str = "", hint: str | None = None
    ) -> None:
        self.file = None if file is None else str(file)
        self.key = key
        self.message = message
        self.hint = hint
        super().__init__(self._format())

    def _format(self) -> str:
        parts = [p for p in (self.file, self.key, self.message) if p]
        text = ": ".join(one_line(p) for p in parts) or self.default
        if self.hint:
            text += f" ({one_line(self.hint)})"
        return text

    def __str__(self) -> str:
        return self._format()

    def __reduce__(self):
        return (type(self), (self.file, self.key, self.message, self.hint))


class ProfileError(HintedError):
    """A profile that cannot be loaded or does not validate, e.g.
    ``profiles/x.toml: train.batch_sise: unknown key (did you mean 'batch_size'?)``."""

    default = "invalid profile"


class DataError(HintedError):
    """A dataset that cannot be read or has the wrong shape: ``FILE: MESSAGE (HINT)``."""

    default = "invalid data"

    def __init__(self, file: str | None = None, message: str = "", hint: str | None = None) -> None:
        super().__init__(file, None, message, hint)

    def __reduce__(self):
        return (type(self), (self.file, self.message, self.hint))


class ConfigError(FttuiError):
    """A resolved profile asks for something this worker or machine cannot do."""


class SizeError(FttuiError, ValueError):
    """A size string that :func:`fttui.core.base.units.parse_size` does not understand; ``.hint``
    says what would."""

    def __init__(self, message: str, hint: str) -> None:
        self.message = message
        self.hint = hint
        super().__init__(f"{message} ({hint})")

    def __reduce__(self):
        return (type(self), (self.message, self.hint))


class EstimateError(FttuiError, ValueError):
    """The profile names something the estimator cannot express (one line)."""


class StoreError(FttuiError):
    """The results store cannot be opened, migrated or written. ``lasting``: retrying will not
    help (the file is corrupt, read-only, a folder, of a newer fttui): it needs a person."""

    def __init__(self, message: str, *, lasting: bool = False) -> None:
        super().__init__(message)
        self.lasting = lasting


__all__ = [
    "one_line",
    "did_you_mean",
    "FttuiError",
    "HintedError",
    "ProfileError",
    "DataError",
    "ConfigError",
    "SizeError",
    "EstimateError",
    "StoreError",
]
