"""An independent reader of the index equations a sheet displays.

It parses the LaTeX of a sheet (the ``.tex`` or the math of the ``.md``),
not the records the sheet was printed from, so that it checks what a reader
sees whichever code path printed it: each displayed equality whose sides are
sums of products of indexed tensors (``dX_{td} = \\sum_{h} dV_{th}\\,
(W_{\\text{v}})_{dh} + ...``) must have the same free indices on both sides
(the letters in subscripts, less those a ``\\sum`` binds).

The grammar is the sheet's own (``symflops/sheets/printing.py``): a tensor's
indices are its last subscript (``X_{bd}``, ``(W_{\\text{in}})_{df}``,
``{dX}^{(1)}_{td}``), letters one character each (primes allowed) or
separated by commas; a subscript holding ``\\text`` is part of a name. A side
that applies a reduction written as an operator (a loss, a concatenation, a
log-sum-exp over a letter, a mean) is not an index equation and is skipped,
as are piecewise definitions (``cases``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Operators whose subscript letter is summed away (their sides are skipped):
#: the loss, log-sum-exp and mean reduce; concat joins along a letter.
REDUCING = ("CE", "logsumexp", "mean", "concat")

#: Commands after which a side is a SymPy formula with relations left implicit
#: (a maximum over pairs, the Heaviside step of its derivative), not an index
#: expression: such a side is skipped.
IMPLICIT = (r"\theta",)

_TOKEN = re.compile(r"\\[A-Za-z]+|\\.|[{}_^&()\[\]+\-=,']|\s+|.", re.S)


def _tokens(s: str) -> list[str]:
    return [t for t in _TOKEN.findall(s) if not t.isspace()]


def _group(toks: list[str], k: int) -> tuple[list[str], int]:
    """The tokens of the argument at ``toks[k]`` (braced group or one token)
    and the index after it."""
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


def _letters(sub: list[str]) -> set[str]:
    """The index letters of a subscript's tokens: ``bd``, ``b'd'``, ``b,s,d``,
    ``\\mathit{tok}_{bs},d`` (a lookup: the letters of its own subscript),
    ``M+s`` (an offset: the lowercase letters)."""
    out: set[str] = set()
    items: list[list[str]] = [[]]
    depth = 0
    for t in sub:
        depth += {"{": 1, "}": -1}.get(t, 0)
        if t == "," and depth == 0:
            items.append([])
        else:
            items[-1].append(t)
    commas = len(items) > 1
    for item in items:
        k = 0
        while k < len(item):
            t = item[k]
            if t in (r"\mathit", r"\mathrm", r"\text"):
                name, k = _group(item, k + 1)
                if "[" in name:  # a looked-up position written y[b]: its letters
                    out |= _letters(name[name.index("["):])
                if k < len(item) and item[k] == "_":  # a looked-up index tensor: its letters
                    inner, k = _group(item, k + 1)
                    out |= _letters(inner)
                elif commas and t == r"\mathit":  # a letter of several characters
                    out.add("".join(name))
                continue
            if re.fullmatch(r"[A-Za-z]", t) and k + 1 < len(item) and item[k + 1] == "_":
                inner, k = _group(item, k + 2)  # y_{b'}: an index tensor read at b'
                out |= _letters(inner)
                continue
            if t == "[":  # y[b] inside a name: the letters in the brackets
                j = item.index("]", k) if "]" in item[k:] else len(item)
                out |= {x for x in item[k + 1:j] if re.fullmatch(r"[a-z]", x)}
                k = j + 1
                continue
            if re.fullmatch(r"[A-Za-z]", t):
                if t.islower() or not commas:
                    letter = t
                    while k + 1 < len(item) and item[k + 1] == "'":
                        letter += "'"
                        k += 1
                    if t.islower() or len(item) == 1:
                        out.add(letter)
                    elif not any(x in ("+", "-") for x in item):
                        out.add(letter)
            k += 1
    return out


@dataclass(frozen=True)
class Side:
    text: str
    free: frozenset[str]


def _term_free(toks: list[str]) -> set[str] | None:
    """Free letters of one product term, or None when it is not an index
    expression (a reducing operator, an implicit relation)."""
    used: set[str] = set()
    bound: set[str] = set()
    ties: list[frozenset[str]] = []
    k = 0
    while k < len(toks):
        t = toks[k]
        if t in IMPLICIT:
            return None
        if t == r"\operatorname":
            name, k = _group(toks, k + 1)
            if "".join(name) in REDUCING:
                return None
            if k < len(toks) and toks[k] == "^":  # CE^{mean}: a decoration
                _, k = _group(toks, k + 1)
            if k < len(toks) and toks[k] == "_":  # softmax_t: the letter it normalises over
                _, k = _group(toks, k + 1)
            continue
        if t in (r"\sum", r"\prod", r"\max", r"\min"):
            k += 1
            if k < len(toks) and toks[k] == r"\limits":
                k += 1
            if k >= len(toks) or toks[k] != "_":
                if t in (r"\max", r"\min"):  # max(a, b) of a formula: not an index sum
                    return None
                continue
            sub, k = _group(toks, k + 1)
            if r"\substack" in sub:
                return None
            head = []
            for x in sub:
                if x in ("=", r"\le", "<"):
                    break
                head.append(x)
            bound |= _letters(head)
            if k < len(toks) and toks[k] == "^":
                _, k = _group(toks, k + 1)
            continue
        if t == r"\mathrm":
            name, k = _group(toks, k + 1)
            if "".join(name) == "rstd" and k < len(toks) and toks[k] == "_":
                _, k = _group(toks, k + 1)  # rstd_{X}: a name
            continue
        if t == "[":  # an Iverson bracket: its letters are indices too
            depth, j = 0, k
            while j < len(toks):
                depth += {"[": 1, "]": -1}.get(toks[j], 0)
                if depth == 0:
                    break
                j += 1
            inner = toks[k + 1:j]
            used |= _bracket_letters(inner)
            k = j + 1
            continue
        if t == r"\delta" and k + 1 < len(toks) and toks[k + 1] == "_":
            sub, k = _group(toks, k + 2)
            tied = _letters(sub)
            used |= tied
            ties.append(frozenset(tied))
            continue
        if t == "_":
            sub, k = _group(toks, k + 1)
            if r"\text" in sub:  # W_{\text{in}}: part of a name
                continue
            used |= _letters(sub)
            continue
        k += 1
    return Free(used - bound, tuple(ties))


class Free(frozenset):
    """A term's free letters, with the groups of letters its Kronecker deltas
    tie together (a letter tied to a letter of the left side is that letter)."""

    def __new__(cls, letters, ties=()):
        obj = super().__new__(cls, letters)
        obj.ties = ties
        return obj


def _bracket_letters(toks: list[str]) -> set[str]:
    """The letters of an Iverson bracket ``[q = 2i + u]``, ``[v = \\mathit{tok}_{b}]``,
    ``[t \\le s]``: single lowercase letters (with primes) outside names, and the
    subscripts of the index tensors read."""
    out: set[str] = set()
    k = 0
    while k < len(toks):
        t = toks[k]
        if t in (r"\mathit", r"\mathrm", r"\text"):
            _, k = _group(toks, k + 1)
            continue
        if t == "_":
            sub, k = _group(toks, k + 1)
            if r"\text" not in sub:
                out |= _letters(sub)
            continue
        if t in ("(", ")"):
            k += 1
            continue
        if re.fullmatch(r"[a-z]", t):
            letter = t
            while k + 1 < len(toks) and toks[k + 1] == "'":
                letter += "'"
                k += 1
            if not (k + 1 < len(toks) and toks[k + 1] == "_"):
                out.add(letter)
        k += 1
    return out


def _split_top(toks: list[str], seps: tuple[str, ...]) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    depth = 0
    for k, t in enumerate(toks):
        if t in ("{", "(", "[", r"\left"):
            depth += 1
        elif t in ("}", ")", "]", r"\right"):
            depth -= 1
        if depth == 0 and t in seps and parts[-1]:
            parts.append([])
            if t in ("+", "-"):
                continue
            continue
        parts[-1].append(t)
    return [p for p in parts if p]


def side_terms(text: str) -> list[frozenset[str]] | None:
    """The free letters of each term of a side, or None when the side is not
    an index expression (or holds no indexed tensor: a constant)."""
    toks = _tokens(text)
    if "_" not in toks:
        return None
    frees = []
    for term in _split_top(toks, ("+", "-")):
        f = _term_free(term)
        if f is None:
            return None
        frees.append(f)
    return frees or None


def _strip_notes(row: str) -> str:
    row = row.split("&&")[0]
    row = re.sub(r"\\text\{\([^}]*\)\}", "", row)
    return row.replace("&", "")


def equations_in_block(block: str) -> list[list[str]]:
    """The chains ``lhs = rhs = ...`` of an aligned block or a display: rows
    split at ``\\\\``, a row that starts with an operator continues the row
    before it, ``\\Rightarrow`` starts a new chain."""
    if r"\begin{cases}" in block or r"\begin{array}" in block:
        return []
    rows = [r for r in re.split(r"\\\\(?:\[[^]]*\])?", block)]
    chains: list[str] = []
    for r in rows:
        r = _strip_notes(r).strip()
        r = re.sub(r"^\\quad\s*", "", r).strip()
        if not r:
            continue
        if r.startswith(("+", "-")) and chains:
            chains[-1] += " " + r
        elif r.startswith("=") and chains:
            chains[-1] += " " + r
        else:
            chains.append(r)
    out = []
    for c in chains:
        for piece in re.split(r"\\Rightarrow", c):
            piece = piece.replace(r"\quad", " ")
            sides = [" ".join(s) for s in _split_top(_tokens(piece), ("=",))]
            if len(sides) >= 2:
                out.append(sides)
    return out


_TEX_BLOCK = re.compile(r"\\begin\{(align\*|equation\*)\}(.*?)\\end\{\1\}", re.S)
_MD_BLOCK = re.compile(r"\$\$(.*?)\$\$", re.S)
_INLINE = re.compile(r"(?<![\\$])\$([^$]+)\$")


_LONGTABLE = re.compile(r"\\begin\{longtable\}(.*?)\\end\{longtable\}", re.S)


def _table_cells(table: str) -> list[str]:
    """The cells of a LaTeX table body (after its header), each a block: a
    column typeset in math mode has no dollar signs in its cells."""
    body = table.split(r"\endfoot", 1)[-1] if r"\endfoot" in table else table
    cells = []
    for row in re.split(r"\\\\", body):
        cells += row.split("&")
    return cells


def math_blocks(text: str, fmt: str) -> list[str]:
    """The displayed math of a sheet, and its inline math (table cells)."""
    if fmt == "tex":
        blocks = [m.group(2) for m in _TEX_BLOCK.finditer(text)]
        rest = _TEX_BLOCK.sub("", text)
        for m in _LONGTABLE.finditer(rest):
            blocks += [c for c in _table_cells(m.group(1)) if "$" not in c]
        rest = _LONGTABLE.sub(lambda m: " ".join(c for c in _table_cells(m.group(1))
                                                 if "$" in c), rest)
    else:
        blocks = [m.group(1) for m in _MD_BLOCK.finditer(text)]
        rest = _MD_BLOCK.sub("", text)
    blocks += [m.group(1) for m in _INLINE.finditer(rest)]
    return [re.sub(r"\\(begin|end)\{aligned\}", "", b) for b in blocks]


def _within(term: "Free", left: frozenset[str]) -> bool:
    """Whether every free letter of ``term`` is a letter of the left side, or
    tied by a delta of the term to one (``\\delta_{qq'}`` makes q stand for q')."""
    for x in term - left:
        if not any(x in tie and tie & left for tie in getattr(term, "ties", ())):
            return False
    return True


@dataclass(frozen=True)
class Finding:
    chain: str
    lhs: str
    side: str
    lhs_free: frozenset[str]
    side_free: frozenset[str]


def check(text: str, fmt: str) -> tuple[int, list[Finding]]:
    """(index equations checked, those whose sides' free letters differ).

    Every term of a right side must have its free letters among the left
    side's: a letter free on the right and not on the left is an index that
    names nothing (a renamed letter). A left letter that a term lacks is a
    broadcast (a bias ``c_f`` added to ``H_{bf}``, ``dX_{bchw} = dY_{bc}/(HW)``,
    a derivative constant along a letter), which is allowed."""
    checked, bad = 0, []
    for block in math_blocks(text, fmt):
        if "_" not in block:
            continue
        for sides in equations_in_block(block):
            frees = [side_terms(s) for s in sides]
            indexed = [(s, f) for s, f in zip(sides, frees) if f is not None]
            if len(indexed) < 2:
                continue
            (lhs, lf), rest = indexed[0], indexed[1:]
            left = frozenset().union(*lf)
            if not left and not any(x for _, f in rest for x in f):
                continue  # no index anywhere: a scalar identity
            checked += 1
            for s, f in rest:
                union = frozenset().union(*f)
                if any(not _within(x, left) for x in f):
                    bad.append(Finding(" = ".join(sides), lhs, s, left, union))
    return checked, bad
