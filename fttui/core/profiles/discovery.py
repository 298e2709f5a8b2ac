"""Finding profiles: the folders they are looked up in, by name, and how a path is shown.

A profile is a ``.toml`` file in ``./profiles``, the user profile folder or the bundled
profiles (first folder wins for a name); :func:`discover` lists them as :class:`ProfileRef`,
:func:`find_profile` picks one by name with a "did you mean" hint. Also the path helpers the
resolver's messages use (:func:`display`: relative to the current folder when below it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from fttui.core.base import paths
from fttui.core.base.errors import ProfileError, did_you_mean
from fttui.core.profiles.schema import OVERRIDE

#: What a profile's name (its file's stem) may hold: it is shown in tables and the app, goes into
#: run ids and Slurm job names, and is offered by shell completion (issue 36).
NAME_RULE = "letters, digits, '-', '_', '.' and '+', starting with a letter or a digit, at most 100"
_NAME = re.compile(r"[^\W_][\w.+-]{0,99}")


def valid_name(name: str) -> bool:
    """Whether ``name`` may be a profile's name (:data:`NAME_RULE`): no space, quote, ``$``,
    backtick or control character, nothing a shell or a terminal would act on."""
    return _NAME.fullmatch(name) is not None


def check_name(path: Path) -> None:
    """ProfileError naming the file when its stem is not a valid profile name."""
    if not valid_name(path.stem):  # repr: the name's control characters shown as escapes
        raise ProfileError(
            display(path),
            None,
            f"{path.stem!r} cannot be a profile's name",
            f"rename the file: a profile's name is {NAME_RULE}",
        )


def display(path: str | os.PathLike[str] | None) -> str:
    """A path as the user should read it: relative to the current folder when below it."""
    if path is None:
        return "<profile>"
    if str(path) == OVERRIDE:
        return OVERRIDE
    p = Path(path)
    try:
        rel = os.path.relpath(p, Path.cwd())
    except (ValueError, OSError):
        return str(p)
    if rel == ".." or rel.startswith(".." + os.sep):
        return str(p)
    return rel


def safe_resolve(path: Path) -> Path:
    """The absolute, symlink-free path; the absolute one where that fails."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path.absolute()


@dataclass(frozen=True)
class ProfileRef:
    """A profile file found by :func:`discover`; origin is ``project``, ``user`` or ``bundled``."""

    name: str
    path: Path
    origin: str


def _search_dirs() -> list[tuple[Path, str]]:
    bundled = paths.bundled_profiles_dir()
    bundled_resolved = safe_resolve(bundled)
    candidates = [
        (Path.cwd() / "profiles", "project"),
        (paths.user_profiles_dir(), "user"),
        (bundled, "bundled"),
    ]
    out: list[tuple[Path, str]] = []
    seen: set[Path] = set()
    for folder, origin in candidates:
        resolved = safe_resolve(folder)
        if resolved in seen:
            continue
        seen.add(resolved)
        out.append((folder, "bundled" if resolved == bundled_resolved else origin))
    return out


def candidates() -> Iterator[ProfileRef]:
    """Every profile file in discovery order, shadowed ones included."""
    for folder, origin in _search_dirs():
        try:
            files = sorted(folder.glob("*.toml"))
        except OSError:
            continue
        for file in files:
            if file.is_file() and not file.name.startswith("."):
                yield ProfileRef(file.stem, file, origin)


def discover() -> list[ProfileRef]:
    """Profiles by name (sorted); for a name found in several places the first folder wins:
    ``./profiles``, then the user profile folder, then the bundled profiles."""
    names: set[str] = set()
    files: set[Path] = set()
    refs: list[ProfileRef] = []
    for ref in candidates():
        resolved = safe_resolve(ref.path)
        if ref.name in names or resolved in files:
            continue
        names.add(ref.name)
        files.add(resolved)
        refs.append(ref)
    return sorted(refs, key=lambda r: r.name)


def unknown_profile_hint(name: str, extra: Iterable[str] = ()) -> str:
    known = sorted({r.name for r in discover()} | set(extra))
    near = did_you_mean(name, known)
    if near:
        return near
    if known:
        return "available: " + ", ".join(known)
    return "no profiles found; `fttui profiles` lists where they are looked up"


def find_profile(name: str) -> ProfileRef:
    """The profile called ``name`` per :func:`discover`; ProfileError with a hint if none."""
    for ref in discover():
        if ref.name == name:
            return ref
    raise ProfileError(None, None, f"unknown profile '{name}'", unknown_profile_hint(name))


def looks_like_path(text: str) -> bool:
    """Whether a profile argument is a file rather than a name."""
    return text.endswith(".toml") or "/" in text or os.sep in text


def origin_of(path: Path) -> str:
    """Where a profile file was found (project, user, bundled), else ``path``."""
    resolved = safe_resolve(path)
    for ref in candidates():
        if safe_resolve(ref.path) == resolved:
            return ref.origin
    return "path"


__all__ = [
    "NAME_RULE",
    "ProfileRef",
    "candidates",
    "check_name",
    "discover",
    "display",
    "find_profile",
    "looks_like_path",
    "origin_of",
    "safe_resolve",
    "unknown_profile_hint",
    "valid_name",
]
