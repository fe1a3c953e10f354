"""One exception family for everything a user can get wrong.

Every error that comes from user input is a :class:`SymflopsError` carrying the
source position (file, line, column, all 1-based) of the offending text, what is
wrong, and how to fix it.  The CLI prints ``str(error)`` as a single line and
exits with status 2; it never shows a Python traceback for these.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """Where a piece of user text lives: 1-based line and column in ``file``.

    ``text`` is the whole source line, kept so that an error can show it with a
    caret under the offending column.
    """

    file: str
    line: int
    column: int
    text: str | None = None

    def shifted(self, columns: int) -> "Span":
        """The same place moved ``columns`` characters to the right on its line."""
        return Span(self.file, self.line, self.column + columns, self.text)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class SymflopsError(Exception):
    """A problem with user input, reported with its place and a fix.

    >>> str(SymflopsError("unknown tensor 'Z'", Span("ffn.yaml", 12, 20),
    ...                   hint="declare it under 'tensors:'"))
    "ffn.yaml:12:20: error: unknown tensor 'Z'; fix: declare it under 'tensors:'"
    """

    def __init__(self, message: str, span: Span | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.span = span
        self.hint = hint

    def __str__(self) -> str:
        where = f"{self.span}: " if self.span is not None else ""
        fix = f"; fix: {self.hint}" if self.hint else ""
        return f"{where}error: {self.message}{fix}"

    def excerpt(self) -> str:
        """The source line with a caret under the column, or '' when unknown."""
        if self.span is None or not self.span.text:
            return ""
        line = self.span.text.rstrip("\n")
        return f"    {line}\n    {' ' * max(self.span.column - 1, 0)}^"


def closest(name: str, known: list[str]) -> str:
    """A hint naming the nearest known spelling, then every known one."""
    near = difflib.get_close_matches(name, known, n=1)
    listed = ", ".join(known) if known else "none"
    return (f"did you mean {near[0]!r}? " if near else "") + f"known: {listed}"


def read_text(path: str | os.PathLike[str], hint: str, span: Span | None = None,
              lead: str | None = None) -> str:
    """A UTF-8 text file's contents; a missing or unreadable file is a
    SymflopsError (``lead``, default the path, starts its message)."""
    file = os.fspath(path)
    lead = lead or file
    try:
        with open(file, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        raise SymflopsError(f"{lead}: no such file", span, hint) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SymflopsError(f"{lead}: cannot read: {exc}", span,
                            "give a readable UTF-8 text file") from None
