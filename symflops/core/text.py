"""Plain-text layout for the reports on a terminal: left-aligned columns.

A pure function of strings, with no import: every stage that formats a
report (``check``'s and ``verify``'s results, ``derive``'s summary) lays
out its rows here, so that the columns look the same everywhere.
"""

from __future__ import annotations

from typing import Sequence


def table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    """Left-aligned columns, two spaces apart, each line ``indent``-ed and
    without trailing spaces; no lines for no rows."""
    if not rows:
        return []
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
