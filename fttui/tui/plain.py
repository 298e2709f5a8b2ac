"""Text from outside shown as it is (issue 36).

Profile names and descriptions, stored rows, run ids, errors, GPU names and data labels come from
files anyone can write. On a widget a ``str`` is read twice over: as Textual's markup (``[link=...]``
makes a hyperlink, ``[reverse]`` restyles, a lone ``[/bold]`` raises) and, byte for byte, by the
terminal (ESC sets the window title, writes the clipboard, clears the screen). :func:`plain` turns
such a value into a Rich ``Text``: every character a terminal would obey written as its escape
(``\\x1b``, :func:`fttui.core.base.inert.inert`), and no markup read. The app's own styling is
added around it (a ``style``, ``Text.assemble``); markup is only ever written in the code.

Light on purpose (Rich and the inert module): the picker's first frame imports it.
"""

from __future__ import annotations

from rich.text import Text

from fttui.core.base.inert import inert

__all__ = ["plain"]


def plain(value: object, style: str = "", *, lines: bool = False, **kwargs) -> Text:
    """``value`` (``None`` is empty) as a Text that shows it as it is: inert (no control
    character), never read as markup. ``lines``: newlines and tabs are kept (a message of several
    lines); otherwise they become spaces. ``kwargs``: Text's own (``no_wrap``, ``overflow``, ...)."""
    return Text("" if value is None else inert(value, lines=lines), style=style, **kwargs)
