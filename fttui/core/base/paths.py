"""Where fttui keeps its data (see docs/architecture.md, "Paths").

Every function reads the environment when called, so tests can point ``FTTUI_HOME`` elsewhere.
Nothing here creates directories except :func:`ensure_dir`.
"""

from __future__ import annotations

import os
from pathlib import Path


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name, "").strip()
    return Path(value).expanduser() if value else None


def home() -> Path:
    """Root of fttui data: ``$FTTUI_HOME``, else ``$XDG_DATA_HOME/fttui``, else ``~/.local/share/fttui``."""
    explicit = _env_path("FTTUI_HOME")
    if explicit is not None:
        return explicit.absolute()  # relative: to the folder fttui started in (see resolve_home)
    data = _env_path("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return data / "fttui"


def resolve_home() -> None:
    """A relative ``FTTUI_HOME`` made absolute once, at start, in this process's environment, so
    that the processes it starts (a script that changes folder, its callback) find the same one.
    FttuiError when it is set to nothing but spaces (which read as unset: fttui wrote to the
    default folder instead)."""
    raw = os.environ.get("FTTUI_HOME", "")
    if raw and not raw.strip():
        from fttui.core.base.errors import FttuiError

        raise FttuiError("FTTUI_HOME is set to spaces only: name a folder, or unset it for the default")
    value = raw.strip()
    if value and not os.path.isabs(os.path.expanduser(value)):
        os.environ["FTTUI_HOME"] = os.path.abspath(os.path.expanduser(value))


def runs_dir() -> Path:
    """Folder holding ``<run_id>/`` run directories."""
    return home() / "runs"


def store_path() -> Path:
    """The SQLite results store."""
    return home() / "results.sqlite"


def cache_dir() -> Path:
    """Derived data fttui can always recompute (token lengths of data files): ``$FTTUI_HOME/cache``."""
    return home() / "cache"


def user_profiles_dir() -> Path:
    """``$FTTUI_HOME/profiles`` when set, else ``$XDG_CONFIG_HOME/fttui/profiles`` (``~/.config``)."""
    explicit = _env_path("FTTUI_HOME")
    if explicit is not None:
        return explicit / "profiles"
    config = _env_path("XDG_CONFIG_HOME") or Path.home() / ".config"
    return config / "fttui" / "profiles"


def bundled_profiles_dir() -> Path:
    """The profiles shipped with fttui.

    In a wheel they are package data (``fttui/_profiles``); in a source checkout they are the
    project's top-level ``profiles/``. The package-data folder is checked first because the parent
    of an installed package is site-packages, where a stray ``profiles/`` may belong to others.
    """
    package = Path(__file__).resolve().parents[2]  # fttui/core/base/paths.py -> fttui
    packaged = package / "_profiles"
    if packaged.is_dir():
        return packaged
    return package.parent / "profiles"


def ensure_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and missing parents) with mode 0700; return it as a Path. FttuiError (one
    line naming the folder and FTTUI_HOME) when it cannot be: a read-only file system, a folder of
    another user, /proc, a name too long."""
    try:
        return _ensure_dir(Path(path).expanduser())
    except OSError as e:
        from fttui.core.base.errors import FttuiError

        raise FttuiError(
            f"{e.filename or path}: cannot make fttui's folder ({e.strerror or e}); set FTTUI_HOME to a folder "
            "you can write"
        ) from None


def _ensure_dir(path: Path) -> Path:
    for folder in (path, *path.parents):
        if folder.exists() and not folder.is_dir():
            from fttui.core.base.errors import FttuiError

            raise FttuiError(f"{folder}: is a file where fttui keeps a folder; move it aside")
    missing: list[Path] = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    for created in missing:  # mkdir's mode is filtered by the umask; make it exact
        try:
            os.chmod(created, 0o700)
        except OSError:
            pass
    return path
