"""Text from outside made harmless where fttui shows or writes it (issue 36).

Names, rows, errors and data labels come from files anyone can write (a cloned profile folder, an
imported export, a worker's error). Three places would run or obey what such text carries, and
each has one function here:

- a terminal obeys control bytes: ESC starts a sequence that can set the window title, write the
  clipboard (OSC 52), move the cursor or clear the screen; BEL, backspace and carriage return
  rewrite what was shown; Unicode's direction overrides reorder what is read (U+202E). :func:`inert`
  writes each such character as its escape (``\\x1b``, ``\\u202e``): what was there stays visible
  and nothing acts. A lone surrogate (JSON's ``"\\ud800"``), which no terminal can be sent, is
  written the same way.
- a spreadsheet runs a cell that starts with ``=``, ``+``, ``-`` or ``@`` (and after a tab or a
  carriage return) as a formula: :func:`csv_cell` puts a ``'`` before such a text, the mark
  spreadsheets read as "this is text"; numbers (``-1.5``) stay numbers.
- rows stored from elsewhere: :func:`control_chars` says which characters :func:`inert` would
  escape, for refusing them at import.
- a command's own output replayed to whoever watches it (``--headless``, ``attach``):
  :func:`output_line` keeps its colours (SGR, ``ESC [ ... m``) and drops every other sequence
  (titles, clipboard writes, cursor moves), then escapes what is left.

fttui's own styling (Rich and Textual) is added after this, so it is never escaped.
"""

from __future__ import annotations

import re

__all__ = ["inert", "csv_cell", "control_chars", "output_line", "FORMULA_STARTS"]

#: C0 controls but tab and newline, DEL, C1 controls, the bidirectional marks, embeddings,
#: overrides and isolates, the Unicode line and paragraph separators, and lone surrogates.
_UNSAFE = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_BAD_LINES = re.compile(f"[{_UNSAFE}]")
_BAD_CELL = re.compile(f"[{_UNSAFE}\t\n]")

#: The first characters that make a spreadsheet read a cell as a formula (OWASP's list).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _escape(m: re.Match[str]) -> str:
    c = m.group(0)
    if c in "\t\n":
        return " "
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: object, *, lines: bool = False) -> str:
    """``text`` with every character a terminal would obey written as its escape. ``lines``:
    newlines and tabs are kept (a message of several lines); otherwise they become spaces (a
    table cell, a title, one line of a view)."""
    s = text if isinstance(text, str) else str(text)
    pattern = _BAD_LINES if lines else _BAD_CELL
    if not pattern.search(s):
        return s
    return pattern.sub(_escape, s)


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def csv_cell(value: object) -> str:
    """A CSV cell a spreadsheet shows as the text it is: :func:`inert`, and a ``'`` before a text
    that starts like a formula. Numbers, empty cells and a lone ``-`` stay as they are."""
    s = "" if value is None else str(value)
    if s and s.startswith(FORMULA_STARTS) and s != "-" and not _is_number(s.strip()):
        s = "'" + s
    return inert(s)


def control_chars(text: str) -> list[str]:
    """The characters of ``text`` that :func:`inert` would escape (tab and newline kept), as
    their escapes, first seen first: ``["\\x1b", "\\x07"]``."""
    seen: list[str] = []
    for m in _BAD_LINES.finditer(text):
        e = _escape(m)
        if e not in seen:
            seen.append(e)
    return seen


#: A colour or text style (SGR): the one sequence a replayed output line keeps.
_SGR = re.compile(r"\x1b\[[0-9;:]*m")
#: Every other escape sequence: CSI (cursor moves, clears), OSC/DCS/APC/PM/SOS strings up to BEL or
#: ST (titles, clipboard writes, hyperlinks), and a lone two-byte ESC sequence.
_OTHER = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[\]PX^_].*?(?:\x07|\x1b\\|$)|\x1b[ -/]*[0-~]|\x1b")


def output_line(text: str) -> str:
    """One line of a command's output as a watcher's terminal may show it: its colours kept,
    every other escape sequence dropped, any other control character written as its escape."""
    if "\x1b" not in text:
        return inert(text)
    parts, pos = [], 0
    for m in _SGR.finditer(text):
        parts.append(inert(_OTHER.sub("", text[pos : m.start()])))
        parts.append(m.group(0))
        pos = m.end()
    parts.append(inert(_OTHER.sub("", text[pos:])))
    return "".join(parts)
