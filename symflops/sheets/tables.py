"""The widths of a long layer's two tables on the LaTeX page, and their cells
broken to fit them.

The forward table (ops) and the backward table (rules) have default column
widths that suit most layers.  A cell TeX cannot break well is found from
its LaTeX alone, with the estimates of :mod:`.layout`:

* a count (a polynomial) is broken by TeX at any ``+`` or ``-``, also inside
  its parentheses (``2QHEP(K -`` / ``1)``), and one term wider than its
  column runs into the margin;
* an ``aligned`` block (several statements in one cell, a loop's) is one box
  TeX does not break at all.

When every term of every count fits its column and every block its own, the
table keeps its default widths.  Otherwise a count's column widens to its
widest term (up to a cap), taking the room from the formula columns that
have more than their widest cell needs, then from the formula columns down
to their widest piece between top-level operators (TeX breaks math only
after an operator or a relation, never at a space).  A block widens into
what the formula columns still leave, and its long lines are continued as
:func:`~symflops.sheets.layout.lay_out` continues a derivation's.  A count
with a term wider than its column could grow has the row's counts set on a
row of their own below it, whole, right-aligned under the count columns; a
count of several terms wider than its column is set on lines of its own,
split at its top-level ``+`` and ``-``.  No count is ever split inside its
parentheses.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal, Sequence

from .layout import break_points, lay_out, split_right, width

#: The text width of the LaTeX sheet (A4, 2 cm margins: 17 cm) in pt.
LINE_PT = 483.69

#: Points per em of :func:`~.layout.width` in the tables' fonts, from
#: pdflatex's widths of counts and formulas in the sheet's Latin Modern
#: (10 pt document): the small optical sizes set capitals wider than 11 pt
#: does, so a count's estimate is up to 1.34 times short at 8 pt and 1.30
#: times at 9 pt (tests/test_layout.py checks that it is never short).
PT_PER_EM = {"small": 9.0 * 1.32, "footnotesize": 8.0 * 1.36}

#: A formula's estimate is closer (sums and subscripts: about 1.12 times
#: short, against a count's capitals at 1.36): the part of ``PT_PER_EM`` a
#: formula's unbreakable piece is measured with.
FORMULA_SCALE = 1.12 / 1.36

Size = Literal["small", "footnotesize"]
#: How a column sets its cells: ``count`` a polynomial (TeX breaks it badly),
#: ``formula`` math TeX breaks at spaces and operators, ``fixed`` left as it is.
Kind = Literal["count", "formula", "fixed"]

_BLOCK = re.compile(r"\A\\begin\{aligned\}(?P<body>.*)\\end\{aligned\}\Z", re.S)
_GLUE = re.compile(r"\\,|\\quad|\\qquad|\\ ")


@dataclass(frozen=True)
class Column:
    """One column of a table: its default width (LaTeX), its header's width
    in em, how its cells are set, and its alignment (``l`` or ``r``)."""

    default: str
    default_pt: float
    header_em: float
    kind: Kind
    align: Literal["l", "r"] = "l"
    #: the widest a count's column grows to (pt); a wider term goes below its row
    cap_pt: float = 0.0


def _rows(block: str) -> list[str]:
    return [r.strip() for r in re.split(r"\\\\", block) if r.strip()]


def _block_width(body: str) -> float:
    """The width in em of an aligned block: its widest line."""
    return max(width(row) for row in _rows(body))


def pieces(cell: str, kind: Kind) -> list[str]:
    """The parts of ``cell`` this module never breaks: a count's terms, a
    block's lines' left sides with their first terms, a formula's runs
    between its top-level operators (glue inside math is no breakpoint)."""
    m = _BLOCK.match(cell.strip())
    if m:
        out = []
        for row in _rows(m["body"]):
            left, _, right = row.partition("&")
            terms = split_right(right, 0.0)
            out += [left + terms[0], *(r"\quad " + t for t in terms[1:])]
        return out
    if kind == "count":
        return split_right(cell, 0.0)
    cuts = [0, *break_points(cell), len(cell)]
    return [cell[a:b] for a, b in zip(cuts, cuts[1:])]


def _need(cells: Sequence[str], kind: Kind, em: float) -> float:
    return max((width(p) * em for c in cells for p in pieces(c, kind)), default=0.0)


def _whole(cells: Sequence[str], em: float) -> float:
    return max((width(c) * em for c in cells), default=0.0)


def _below(columns: Sequence[Column], row: Sequence[str], em: float) -> bool:
    """Whether a term of one of the row's counts is wider than its column can grow."""
    return any(col.kind == "count" and _need([c], "count", em) > col.cap_pt
               for col, c in zip(columns, row))


def _spare(width_pt: float, col: Column, cells: Sequence[str], em: float) -> float:
    """What a column can give and still hold its widest cell on one line (with
    a margin: an estimate may be a little short)."""
    return max(0.0, width_pt - max(_whole(cells, em) * 1.1 + 4.0, col.header_em * em))


def column_widths(columns: Sequence[Column], cells: Sequence[Sequence[str]],
                  size: Size, keep: Sequence[bool] | None = None) -> list[float] | None:
    """The widths in pt of ``columns`` for their ``cells`` (one list per
    column; the counts of the rows not in ``keep``, set below, left out),
    or None when the defaults fit (see the module's docstring)."""
    em = PT_PER_EM[size]
    keep = keep if keep is not None else [True] * len(cells[0])
    blocks = any((m := _BLOCK.match(c.strip())) and _block_width(m["body"]) * em * FORMULA_SCALE
                 > col.default_pt for col, cs in zip(columns, cells) for c in cs)
    needs = [max(_need([c for c, k in zip(cs, keep) if k], "count", em), col.header_em * em)
             if col.kind == "count" else 0.0 for col, cs in zip(columns, cells)]
    if not blocks and all(n <= c.default_pt for n, c in zip(needs, columns)):
        return None
    widths = [c.default_pt for c in columns]
    want = 0.0
    for k, col in enumerate(columns):
        if col.kind == "count" and needs[k] > widths[k]:
            want += needs[k] - widths[k]
            widths[k] = needs[k]
    # first from the columns whose widest cell leaves room, then from the formulas
    for k, (col, cs) in enumerate(zip(columns, cells)):
        if col.kind == "formula" and want > 0:
            take = min(want, _spare(widths[k], col, cs, em))
            widths[k] -= take
            want -= take
    flexible = [k for k, c in enumerate(columns) if c.kind == "formula"]
    floors = {k: max(_need(cells[k], "formula", em * FORMULA_SCALE), columns[k].header_em * em)
              for k in flexible}
    while want > 0.01:
        room = [k for k in flexible if widths[k] > floors[k] + 0.01]
        if not room:
            break
        share = want / len(room)
        for k in room:
            take = min(share, widths[k] - floors[k])
            widths[k] -= take
            want -= take
    # what the formulas cannot give, the counts give back (their terms then overflow)
    # a block (several statements in one cell) widens with what the others leave
    for k, (col, cs) in enumerate(zip(columns, cells)):
        bodies = [m["body"] for c in cs if (m := _BLOCK.match(c.strip()))]
        if not bodies:
            continue
        short = max(_block_width(b) for b in bodies) * em * FORMULA_SCALE - widths[k]
        for j, (other, os_) in enumerate(zip(columns, cells)):
            if j != k and other.kind == "formula" and short > 0:
                take = min(short, _spare(widths[j], other, os_, em))
                widths[j] -= take
                widths[k] += take
                short -= take
    while want > 0.01:
        counts = [k for k, c in enumerate(columns)
                  if c.kind == "count" and widths[k] > c.default_pt + 0.01]
        if not counts:
            break
        for k in counts:
            give = min(want / len(counts), widths[k] - columns[k].default_pt)
            widths[k] -= give
            want -= give
    return widths


def set_cell(cell: str, col: Column, width_pt: float, size: Size) -> str:
    """``cell`` broken to fit ``width_pt``: a block's long lines continued, a
    count too wide set on lines of its own (as a top-aligned array, so that
    its first line stands beside the row's other cells)."""
    em = PT_PER_EM[size]
    room = width_pt / em
    m = _BLOCK.match(cell.strip())
    if m:
        room /= FORMULA_SCALE
        if _block_width(m["body"]) <= room:
            return cell
        return (r"\begin{aligned}[t] " + r" \\ ".join(lay_out(_rows(m["body"]), room))
                + r" \end{aligned}")
    if col.kind != "count" or width(cell) <= room:
        return cell
    lines = split_right(cell, room)
    if len(lines) == 1:
        return cell
    return (rf"\begin{{array}}[t]{{@{{}}{col.align}@{{}}}} "
            + r" \\ ".join([lines[0], *("{}" + p for p in lines[1:])]) + r" \end{array}")


def lay_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], size: Size,
              labels: Sequence[str], sep_pt: float) -> dict[str, Any]:
    """The table's column widths (LaTeX lengths: the defaults when they fit)
    and its rows, each ``{"cells": [...], "below": None}`` with its cells set
    to fit their columns; a row with a count term wider than its column may
    grow has its counts on a row of its own below it (``below``: the counts
    with ``labels``, the count columns' names, and ``span``, the columns it
    spans from the right), its count cells empty."""
    em = PT_PER_EM[size]
    low = [_below(columns, r, em) for r in rows]
    cells = [[row[k] for row in rows] for k in range(len(columns))]
    widths = column_widths(columns, cells, size, [not b for b in low])
    if widths is None and not any(low):
        return {"widths": [c.default for c in columns],
                "rows": [{"cells": list(r), "below": None} for r in rows]}
    widths = widths or [c.default_pt for c in columns]
    counted = [k for k, c in enumerate(columns) if c.kind == "count"]
    # a count whose column could not grow to its widest term goes below too
    low = [b or any(_need([r[k]], "count", em) > widths[k] + 0.01 for k in counted)
           for r, b in zip(rows, low)]
    # a row's counts below it span the counts' columns and the formula before them
    span = len(columns) - counted[0] + 1
    span_pt = sum(widths[-span:]) + 2 * sep_pt * (span - 1)
    out = []
    for row, b in zip(rows, low):
        set_ = [set_cell(c, col, w, size) for c, col, w in zip(row, columns, widths)]
        below = None
        if b:
            parts = [rf"{row[k]}\ \text{{{lab}}}" for k, lab in zip(counted, labels)]
            below = r",\quad ".join(parts)
            if width(below) * em > span_pt:
                lines = [ln for p in parts for ln in split_right(p, span_pt / em)]
                below = (r"\begin{array}[t]{@{}r@{}} "
                         + r" \\ ".join(ln if ln[0] not in "+-" else "{}" + ln for ln in lines)
                         + r" \end{array}")
            set_ = [("" if k in counted else c) for k, c in enumerate(set_)]
        out.append({"cells": set_, "below": below})
    # to a tenth of a point: a count's column rounded up (its terms fit), the others down
    shown = [(math.ceil if c.kind == "count" else math.floor)(w * 10) / 10
             for c, w in zip(columns, widths)]
    return {"widths": [c.default if abs(w - c.default_pt) < 0.05 else f"{x:.1f}pt"
                       for c, w, x in zip(columns, widths, shown)], "rows": out,
            "span": span, "span_width": f"{span_pt:.1f}pt"}


def _text(s: str) -> float:
    return width(rf"\text{{{s}}}")


CM = 28.4528  # pt


def forward_table(forward: Sequence[dict], unit: str) -> dict[str, list]:
    """The forward table (``\\small``, the default column separation) of a long layer."""
    columns = [
        Column("1.3cm", 1.3 * CM, _text("Op"), "fixed"),
        Column(r"0.31\linewidth", 0.31 * LINE_PT, _text("Index form"), "formula"),
        Column(r"0.2\linewidth", 0.2 * LINE_PT, _text("Matrix form"), "formula"),
        Column(r"0.16\linewidth", 0.16 * LINE_PT, _text(unit), "count", "l", 0.2 * LINE_PT),
        Column(r"0.12\linewidth", 0.12 * LINE_PT, _text("elementwise"), "count", "r", 0.16 * LINE_PT),
    ]
    rows = [["", f["index"], f["matrix"] or r"\text{---}", f["story"], f["elementwise"] or "0"]
            for f in forward]
    return lay_table(columns, rows, "small", [unit, "elementwise"], 6.0)


def backward_table(backward: Sequence[dict], unit: str) -> dict[str, list]:
    """The backward table (``\\footnotesize``, 3 pt between columns) of a long layer."""
    columns = [
        Column("1.7cm", 1.7 * CM, _text("Component"), "fixed"),
        Column("1.9cm", 1.9 * CM, _text("Gradient"), "fixed"),
        Column(r"\dimexpr0.6\linewidth-3.6cm-10\tabcolsep\relax",
               0.6 * LINE_PT - 3.6 * CM - 30.0, _text("Rule (index form)"), "formula"),
        Column(r"0.2\linewidth", 0.2 * LINE_PT, _text("Matrix form"), "formula"),
        Column(r"0.1\linewidth", 0.1 * LINE_PT, _text(unit), "count", "r", 0.14 * LINE_PT),
        Column(r"0.1\linewidth", 0.1 * LINE_PT, _text("elementwise"), "count", "r", 0.14 * LINE_PT),
    ]
    rows = [["", b["grad"] + (rf"\ (\times {b['copies']})" if b["copies"] else ""), b["index"],
             b["matrix"] or r"\text{---}", b["flops"], b["elementwise"]] for b in backward]
    return lay_table(columns, rows, "footnotesize", [unit, "elementwise"], 3.0)
