"""Proving an affine index inside its axis, and the advice when it is not.

``X[b,c,2*i+u]``, ``H[b,s-1,d]``, ``X[b,c,i+u-R]``: every tuple of the
index's letters must map inside the axis and its declared padding
(``0 - before <= index <= extent - 1 + after`` at every positive value of the
dims), proved on the least and greatest values of the index (:func:`reach`:
each term at its own ends, a difference ordered by a where-clause from 0);
else refused at the index, naming the size or the ``pad:`` it would need.
Used by :mod:`symflops.declaration.letters` when it binds a statement's letters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import sympy

from ..core.errors import Span, SymflopsError
from ..core.ir import Affine, Tensor
from ..core.sizes import NONNEGATIVE, POSITIVE, ZERO, sign
from ..lang.statement import AffineTerm, Ref, Shift, Statement
from .outputs import pad_advice

#: Where a column of the statement is in its file (None without a file).
At = Callable[[int], "Span | None"]


@dataclass(frozen=True)
class Letter:
    """An index letter of an op: the extent it ranges over, and the tensor
    (and place) that bound it first."""

    extent: sympy.Expr
    tensor: str
    span: Span | None


def pairs(st: Statement) -> list[tuple[str, str, bool]]:
    """The where-clause as ``(low, high, strict)``: ``low <= high`` (``<`` when strict)."""
    return [(c.left, c.right, c.op == "<") if c.op in ("<=", "<")
            else (c.right, c.left, c.op == ">") for c in st.where]


def reach(terms: Sequence[tuple[AffineTerm, sympy.Expr]], offset: sympy.Expr,
           bound: Mapping[str, Letter], pairs: Sequence[tuple[str, str, bool]]
           ) -> tuple[sympy.Expr, sympy.Expr]:
    """The least and greatest value of ``sum c_i x_i + offset`` over the
    letters' ranges ``0 <= x_i < ext(x_i)``: each term at its own ends
    (exact on a box), except a difference ``c*(high - low)`` of letters a
    condition ``low <= high`` (or ``<``, strict) orders, which runs from 0 (or
    ``c``) to ``c*(ext(high) - 1)``."""
    coefficient = {t.letter: c for t, c in terms}
    low = high = offset
    done: set[str] = set()
    for a, b, strict in pairs:  # a <= b (a < b when strict)
        if a in coefficient and b in coefficient and a not in done and b not in done \
                and sympy.expand(coefficient[a] + coefficient[b]) == 0 \
                and not coefficient[b].could_extract_minus_sign():
            c = coefficient[b]
            low, high = low + (c if strict else 0), high + c * (bound[b].extent - 1)
            done |= {a, b}
    for letter, c in coefficient.items():
        if letter not in done:
            end = c * (bound[letter].extent - 1)
            low, high = (low + end, high) if c.could_extract_minus_sign() else (low, high + end)
    return sympy.expand(low), sympy.expand(high)


def needed(term: AffineTerm, c: sympy.Expr, high: sympy.Expr,
            dims: Mapping[str, sympy.Symbol]) -> str:
    """The axis size an index needs when its free letter has ``N`` positions
    (``N`` a dim the declaration lacks, named so): ``c*(N - 1) + high + 1``."""
    name = new_dim(dims)
    n = sympy.Symbol(name, positive=True, integer=True)
    return sympy.sstr(sympy.expand(c * (n - 1) + high + 1))


def new_dim(dims: Mapping[str, sympy.Symbol]) -> str:
    return next(n for n in ("N", "N1", "N2", "N3", "N_new") if n not in dims)


def pad_text(tensor: Tensor, position: int, more_before: sympy.Expr,
              more_after: sympy.Expr) -> str:
    """The ``pad:`` of ``tensor`` with ``more_before`` and ``more_after`` zeros
    added around axis ``position``: ``pad: [0, 0, [R, R]]``."""
    entries = []
    for k in range(len(tensor.shape)):
        before, after = tensor.padding(k)
        if k == position:
            before, after = sympy.expand(before + more_before), sympy.expand(after + more_after)
        entries.append(f"[{sympy.sstr(before)}, {sympy.sstr(after)}]"
                       if (before, after) != (0, 0) else "0")
    return f"pad: [{', '.join(entries)}]"


def declared(tensor: Tensor, position: int, before: sympy.Expr, after: sympy.Expr) -> str:
    """For an op's output (``role: activation``), where a ``pad:`` of
    ``before`` and ``after`` zeros on axis ``position`` goes: its declaration."""
    if tensor.role != "activation":
        return ""
    return "; " + pad_advice(tensor, position, before, after)


def check_start(ref: Ref, s: Shift, low: sympy.Expr, tensor: Tensor, at: At,
                 more: str = "") -> None:
    """Refuse an index whose least value ``low`` may fall before the start of
    its axis and its padding in front, naming the padding it needs (and
    ``more`` advice)."""
    before, after = tensor.padding(s.position)
    symbols = sorted((low + before).free_symbols, key=str)
    if sign(low + before, symbols) in (ZERO, POSITIVE, NONNEGATIVE):
        return
    padded = f" and its {sympy.sstr(before)} zeros" if before != 0 else ""
    raise SymflopsError(
        f"the index {s.text} of {ref.name} reads before the start of {ref.name}'s axis "
        f"{s.position + 1}{padded}: it goes down to {sympy.sstr(low)}", at(s.column),
        f"every index must be at least 0 for every value of its letters (and of the "
        f"dims): pad the axis in front with zeros ({pad_text(tensor, s.position, -low - before, 0)} "
        f"on {ref.name}, read as zero{declared(tensor, s.position, -low, after)}{more}), add a whole-number constant so that the least "
        "value is 0, or order the letters of a difference with a where-clause (s-t where "
        "t <= s)")


def check_range(st: Statement, ref: Ref, s: Shift, relation: Affine, extent: sympy.Expr,
                 bound: Mapping[str, Letter], tensor: Tensor, at: At) -> None:
    """Every tuple of the letters maps inside the axis, its padding included
    (``0 <= index <= extent - 1`` at every positive value of the dims),
    proved, else refused at the index naming the axis and the size or the
    padding it would need."""
    low, high = reach(tuple(zip(s.terms, relation.coefficients)), relation.offset, bound,
                       pairs(st))
    axis = f"{ref.name}'s axis {s.position + 1}"
    before, after = tensor.padding(s.position)
    symbols = sorted((low - high + extent + before + after).free_symbols, key=str)
    check_start(ref, s, low, tensor, at)
    if sign(extent - 1 + after - high, symbols) not in (ZERO, POSITIVE, NONNEGATIVE):
        wanted = [sympy.sstr(sympy.expand(high + 1 - after) if k == s.position else x)
                  for k, x in enumerate(tensor.shape)]
        padded = f" and {sympy.sstr(after)} zeros after" if after != 0 else ""
        raise SymflopsError(
            f"the shift {s.text} runs past the axis of {ref.name}: {axis} has "
            f"{sympy.sstr(extent)} positions{padded}, {s.text} reaches index {sympy.sstr(high)}",
            at(s.column), (f"declare {ref.name} as [{', '.join(wanted)}] (valid positions "
                           "only), " if tensor.role != "activation" else "") +
            f"pad it with zeros "
            f"({pad_text(tensor, s.position, 0, sympy.expand(high + 1 - extent - after))}, "
            f"read as zero{declared(tensor, s.position, before, high + 1 - extent)}), or leave "
            f"a letter of {s.text} on the output only so that its extent follows from the axis")
