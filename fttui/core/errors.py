"""Errors that fttui reports to the user as one line (and exit code 2 for bad input)."""

from __future__ import annotations


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


class FttuiError(Exception):
    """Base of fttui's user-facing errors; ``str()`` is one line."""

    exit_code = 2

    def __str__(self) -> str:
        return _one_line(super().__str__())


class ProfileError(FttuiError):
    """A profile that cannot be loaded or does not validate.

    ``str(err)`` reads ``FILE: KEY: MESSAGE (HINT)``; parts that are ``None`` are left out, e.g.
    ``profiles/x.toml: train.batch_sise: unknown key (did you mean 'batch_size'?)``.
    """

    def __init__(
        self,
        file: str | None = None,
        key: str | None = None,
        message: str = "",
        hint: str | None = None,
    ) -> None:
        self.file = None if file is None else str(file)
        self.key = key
        self.message = message
        self.hint = hint
        super().__init__(self._format())

    def _format(self) -> str:
        parts = [p for p in (self.file, self.key, self.message) if p]
        text = ": ".join(_one_line(p) for p in parts) or "invalid profile"
        if self.hint:
            text += f" ({_one_line(self.hint)})"
        return text

    def __str__(self) -> str:
        return self._format()

    def __reduce__(self):
        return (type(self), (self.file, self.key, self.message, self.hint))


class DataError(FttuiError):
    """A dataset that cannot be read or has the wrong shape: ``FILE: MESSAGE (HINT)``."""

    def __init__(self, file: str | None = None, message: str = "", hint: str | None = None) -> None:
        self.file = None if file is None else str(file)
        self.message = message
        self.hint = hint
        super().__init__(self._format())

    def _format(self) -> str:
        parts = [p for p in (self.file, self.message) if p]
        text = ": ".join(_one_line(p) for p in parts) or "invalid data"
        if self.hint:
            text += f" ({_one_line(self.hint)})"
        return text

    def __str__(self) -> str:
        return self._format()

    def __reduce__(self):
        return (type(self), (self.file, self.message, self.hint))
