"""Where a derivation's aligned lines break and where their notes go.

A derivation line is LaTeX for an ``aligned`` block, in up to three parts
separated by alignment marks at brace depth 0::

    LEFT &= RIGHT && \\text{(note)}

so that every note of a block starts at one x (the block's fourth column).
When the block would not fit the page width, it is laid out again:

1. a RIGHT part that is too wide is split at its top-level ``=``, ``+`` and
   ``-`` (outside every brace, parenthesis and ``\\left ... \\right``), the
   rest continued on lines ``& \\quad + ...``; a term is never split;
2. if one term is still too wide for a note beside it, every note of the
   block moves to a row of its own below its line, in the block's second
   column (``& \\qquad \\text{(note)}``), so that they are again in one column.

Widths are estimated in em of the sheet's 11 pt font from the LaTeX alone
(:func:`width`): a pure function of the text, good to a few percent for the
formulas symflops prints, and checked against the real pages by the layout
tests, which read pdflatex's overfull-box warnings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Sequence

#: The alignment mark before a note: the third and fourth columns of an
#: ``aligned`` block (the third, right-aligned, stays empty).
NOTE_MARK = "&&"

#: The text width of the LaTeX sheet (A4, 2.4 cm margins: 16.2 cm) in em of
#: its 11 pt font, less a margin for the estimate's error.
PAGE_EM = 41.0

#: The space ``aligned`` puts between two column pairs (about ``\qquad``).
GAP_EM = 2.0

_TOKEN = re.compile(r"\\[A-Za-z]+|\\.|[{}_^&]|\s+|.", re.S)

#: Widths in em of the commands symflops prints; any other command is a
#: symbol of :data:`_SYMBOL` em.
_COMMAND_EM = {
    r"\,": 0.17, r"\;": 0.28, r"\:": 0.22, r"\!": -0.17, r"\ ": 0.33, r"\quad": 1.0,
    r"\qquad": 2.0, r"\sum": 1.45, r"\prod": 1.3, r"\partial": 0.57, r"\cdot": 0.78,
    r"\Rightarrow": 1.78, r"\longrightarrow": 2.3, r"\top": 0.78, r"\prime": 0.3,
    r"\left": 0.0, r"\right": 0.0, r"\mathit": 0.0, r"\mathrm": 0.0, r"\text": 0.0,
    r"\mathbf": 0.0, r"\operatorname": 0.0, r"\hat": 0.0, r"\bar": 0.0, r"\tilde": 0.0,
    r"\displaystyle": 0.0, r"\limits": 0.0, r"\{": 0.5, r"\}": 0.5, r"\max": 1.6,
    r"\log": 1.3, r"\exp": 1.5, r"\sqrt": 0.85, r"\frac": 0.0, r"\boxed": 0.6,
    r"\tanh": 1.75, r"\sinh": 1.6, r"\cosh": 1.65, r"\sin": 1.2, r"\cos": 1.3,
    r"\operatorname{erf}": 1.2, r"\min": 1.4, r"\infty": 1.0, r"\epsilon": 0.45,
}
_SYMBOL = 0.6
_CHAR_EM = {"(": 0.39, ")": 0.39, "[": 0.28, "]": 0.28, ",": 0.28, ".": 0.28, ";": 0.28,
            "'": 0.3, "|": 0.28, "/": 0.5, " ": 0.0}
_BINARY = {"+": 1.33, "-": 1.33, "=": 1.33, "<": 1.33, ">": 1.33}
#: Commands whose argument is set in text (a letter there is narrower than
#: a math italic one).
_TEXT_ARG = {r"\text", r"\mathrm", r"\operatorname"}
#: Sub- and superscripts are set at about 70 % of the size.
_SCRIPT = 0.7


def _tokens(s: str) -> list[str]:
    return _TOKEN.findall(s)


def _group(toks: list[str], k: int) -> tuple[list[str], int]:
    """The tokens of the argument at ``toks[k]`` (a braced group or one
    token) and the index after it."""
    if k >= len(toks):
        return [], k
    if toks[k] != "{":
        return [toks[k]], k + 1
    depth, j = 0, k
    while j < len(toks):
        depth += {"{": 1, "}": -1}.get(toks[j], 0)
        if depth == 0:
            return toks[k + 1:j], j + 1
        j += 1
    return toks[k + 1:], len(toks)


def _environment(toks: list[str], k: int) -> tuple[float, int]:
    """The width of the environment whose ``\\begin`` is at ``toks[k]``
    (a ``cases`` or matrix: its widest row, cells a quad apart, and a
    brace) and the index after its ``\\end{...}``."""
    depth, j = 0, k
    while j < len(toks):
        depth += {r"\begin": 1, r"\end": -1}.get(toks[j], 0)
        if depth == 0:
            break
        j += 1
    _, start = _group(toks, k + 1)
    rows: list[list[list[str]]] = [[[]]]
    for t in toks[start:j]:
        if t == r"\\":
            rows.append([[]])
        elif t == "&":
            rows[-1].append([])
        else:
            rows[-1][-1].append(t)
    wide = max(sum(_width(c) for c in row) + 1.0 * (len(row) - 1) for row in rows)
    return wide + 1.0, _group(toks, j + 1)[1]


def _width(toks: list[str], text: bool = False, inner: bool = False) -> float:
    """The width of ``toks``; ``inner`` inside a fraction, where a nested
    fraction is set smaller."""
    total, k = 0.0, 0
    while k < len(toks):
        t = toks[k]
        if t == r"\begin":
            w, k = _environment(toks, k)
            total += w
        elif t.isspace():
            total += 0.33 if text else 0.0
            k += 1
        elif t in ("_", "^"):
            arg, k = _group(toks, k + 1)
            w = _SCRIPT * _width(arg, text)
            # a subscript and a superscript on one base stack: count the wider
            if k < len(toks) and toks[k] in ("_", "^") and toks[k] != t:
                arg2, k = _group(toks, k + 1)
                w = max(w, _SCRIPT * _width(arg2, text))
            total += w
        elif t in (r"\frac", r"\tfrac", r"\dfrac"):
            num, k = _group(toks, k + 1)
            den, k = _group(toks, k)
            scale = _SCRIPT if t == r"\tfrac" else 0.85 if inner else 1.0
            total += scale * max(_width(num, text, True), _width(den, text, True)) + 0.25
        elif t in (r"\sum", r"\prod") and k + 1 < len(toks) and toks[k + 1] == "_":
            # limits go below the sign in a display (the wider of the two
            # counts), beside a smaller sign inside a fraction
            arg, k = _group(toks, k + 2)
            limit = _width(arg, text)
            if k < len(toks) and toks[k] == "^":
                sup, k = _group(toks, k + 1)
                limit = max(limit, _width(sup, text))
            total += (1.0 + _SCRIPT * limit if inner
                      else max(_COMMAND_EM[t], _SCRIPT * limit)) + 0.17
        elif t in _TEXT_ARG:
            arg, k = _group(toks, k + 1)
            total += _width(arg, text=True)
        elif t.startswith("\\"):
            total += _COMMAND_EM.get(t, _SYMBOL)
            k += 1
        elif t in ("{", "}", "&"):
            k += 1
        else:
            if text:
                total += 0.46 if t.isalnum() else _CHAR_EM.get(t, 0.45)
            else:
                total += _BINARY.get(t) or _CHAR_EM.get(t) or (0.5 if t.isdigit() else 0.58)
            k += 1
    return total


def width(latex: str) -> float:
    """The estimated width in em of ``latex`` set as display math."""
    return _width(_tokens(latex))


#: Where a block's notes stand: beside their lines, or each on a row below its line.
NoteMode = Literal["side", "below"]


@dataclass(frozen=True)
class Line:
    """One aligned line in its three parts (each possibly empty)."""

    left: str
    right: str
    note: str

    def latex(self, mode: NoteMode) -> list[str]:
        """The line as rows of an ``aligned`` block: the note beside it
        (``side``) or on a row of its own below (``below``)."""
        main = f"{self.left}&{self.right}" if self.right or self.left else ""
        if not self.note:
            return [main]
        if mode == "side":
            return [f"{main}{NOTE_MARK}{self.note}"]
        return [main, rf"&\qquad {self.note}"]


def _marks(s: str) -> list[int]:
    """The positions of the ``&`` at brace depth 0, outside every environment
    (the ``&`` of a ``cases`` is its own)."""
    depth, out = 0, []
    for k, c in enumerate(s):
        if s.startswith("\\begin{", k) or s.startswith("\\end{", k):
            depth += 1 if s.startswith("\\begin{", k) else -1
        elif c == "{" and (k == 0 or s[k - 1] != "\\"):
            depth += 1
        elif c == "}" and (k == 0 or s[k - 1] != "\\"):
            depth -= 1
        elif c == "&" and depth == 0 and (k == 0 or s[k - 1] != "\\"):
            out.append(k)
    return out


def parse(line: str) -> Line:
    """Split ``LEFT & RIGHT && NOTE`` into its parts."""
    at = _marks(line)
    if not at:
        return Line(line, "", "")
    left, rest = line[:at[0]], line[at[0] + 1:]
    note_at = rest.find(NOTE_MARK)
    while note_at >= 0 and note_at + at[0] + 1 not in at:  # a && inside braces
        note_at = rest.find(NOTE_MARK, note_at + 1)
    if note_at < 0:
        return Line(left, rest, "")
    return Line(left, rest[:note_at].rstrip(), rest[note_at + len(NOTE_MARK):])


def break_points(right: str) -> list[int]:
    """Where ``right`` may be split: before each ``=``, ``+`` or ``-`` outside
    every brace, parenthesis, ``\\left ... \\right`` group and environment
    (a ``cases``), not at its start and not a sign right after another operator."""
    toks = _tokens(right)
    out, depth, pos, last, delimiter = [], 0, 0, "", False
    for t in toks:
        if delimiter:  # the delimiter of a \left or \right, counted with it
            delimiter = False
        elif t in ("{", "(", "[", r"\left", r"\begin"):
            depth += 1
            delimiter = t == r"\left"
        elif t in ("}", ")", "]", r"\right", r"\end"):
            depth -= 1
            delimiter = t == r"\right"
        elif (t in ("=", "+", "-") and depth == 0 and right[:pos].strip()
              and last not in ("=", "+", "-", "&", "")):
            out.append(pos)
        if not t.isspace():
            last = t if t not in (r"\quad", r"\qquad") else "&"
        pos += len(t)
    return out


def split_right(right: str, room: float) -> list[str]:
    """``right`` in pieces no wider than ``room`` em where the break points
    allow it: the first piece as it is, the others to be continued after
    ``\\quad``.  A term wider than ``room`` stays whole."""
    cuts = break_points(right)
    if width(right) <= room or not cuts:
        return [right]
    pieces, start = [], 0
    prev = None
    for c in cuts + [len(right)]:
        if width(right[start:c]) > room and prev is not None and prev > start:
            pieces.append(right[start:prev].rstrip())
            start = prev
        prev = c
    pieces.append(right[start:].rstrip())
    return [p.strip() if k else p for k, p in enumerate(pieces)]


def _block_width(lines: Sequence[Line], mode: NoteMode) -> float:
    left = max((width(x.left) for x in lines), default=0.0)
    right = max((width(x.right) for x in lines), default=0.0)
    notes = [width(x.note) for x in lines if x.note]
    if not notes:
        return left + right
    if mode == "side":
        return left + right + GAP_EM + max(notes)
    return max(left + right, left + 2.0 + max(notes))


def _split(lines: Sequence[Line], room: float) -> list[Line]:
    out = []
    for x in lines:
        pieces = split_right(x.right, room)
        out.append(Line(x.left, pieces[0], x.note))
        # a continued sum is indented; a continued chain of equalities is not
        out += [Line("", p if p.startswith("=") else rf"\quad {p}", "") for p in pieces[1:]]
    return out


def lay_out(lines: Sequence[str], page: float = PAGE_EM) -> list[str]:
    """The rows of one aligned block laid out for a page ``page`` em wide:
    notes beside their lines in one column when that fits, long right
    parts split at top-level operators, and otherwise every note on a row
    of its own (see the module's docstring)."""
    parsed = [parse(s) for s in lines]
    left = max((width(x.left) for x in parsed), default=0.0)
    note = max((width(x.note) for x in parsed if x.note), default=0.0)
    side = _split(parsed, page - left - (GAP_EM + note if note else 0.0))
    if _block_width(side, "side") <= page or not note:
        return [row for x in side for row in x.latex("side")]
    below = _split(parsed, page - left)
    return [row for x in below for row in x.latex("below")]
