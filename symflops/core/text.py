"""Text for reports: left-aligned columns on a terminal, and user text
escaped for Markdown.

Pure functions of strings: every stage that formats a report (``check``'s
and ``verify``'s results, ``derive``'s summary) lays out its rows here, so
that the columns look the same everywhere; the sheets
(:mod:`symflops.sheets.escape`) and the planner's Markdown report escape
user text for Markdown with :func:`escape_md`.
"""

from __future__ import annotations

import unicodedata
from typing import Sequence


def table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    """Left-aligned columns, two spaces apart, each line ``indent``-ed and
    without trailing spaces; no lines for no rows."""
    if not rows:
        return []
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


#: Never written as they are: control characters (Cc), line and paragraph
#: separators (Zl, Zp) and format characters (Cf: the bidirectional overrides
#: and isolates U+202A-202E and U+2066-2069, which reorder the text around them,
#: zero-width characters U+200B-200F, U+FEFF, the soft hyphen U+00AD, ...),
#: which are invisible or act on what follows, and lone surrogates (Cs), which
#: no file can hold; pdflatex sets none of them.
HIDDEN = ("Cc", "Zl", "Zp", "Cf", "Cs")


def hidden(c: str) -> bool:
    """A control, separator or format character (:data:`HIDDEN`): never written as it is."""
    return unicodedata.category(c) in HIDDEN


# Characters that Markdown or its math extensions act on anywhere in a line.
_MD = set("\\`*_[]<>|$~&")


def escape_md(text: str) -> str:
    """Text that Markdown (and the math renderers of common viewers) print
    literally.  A line break of any kind (``\\r`` too), other control
    character or format character (:data:`HIDDEN`) is a space, so that user
    text never starts a line of its own (a heading, a list, an HTML block)
    and never reverses the text after it (U+202E)."""
    out = []
    for c in str(text):
        if c == "<":
            out.append("&lt;")
        elif c == ">":
            out.append("&gt;")
        elif c == "&":
            out.append("&amp;")
        elif c in _MD:
            out.append("\\" + c)
        elif hidden(c):
            out.append(" ")
        else:
            out.append(c)
    return "".join(out)
