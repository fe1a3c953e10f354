"""How a sheet prints one layer's formulas: indexed names, terms, SymPy
expressions, long lines.

:class:`Math` carries a layer's dims' order and tensor names, so that each
formula is printed in the sheet's style; it is what the op kinds' ``latex``
members are given.  Every printer here is pure and compared by value, so
that what is printed with it is remembered across a sheet's two formats.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Sequence

import sympy

from . import printing as P
from .layout import NOTE_MARK, lay_out
from ..core.ir import Einsum, Factor, substitute
from ..core.records import IndexTerm, MatrixProduct


@dataclass(frozen=True)
class Math:
    """LaTeX for one layer's formulas: its dims' order and its tensor names
    (so that gradients print as ``dW_{\text{in}}``)."""

    poly: P.PolyPrinter
    names: frozenset[str]

    def t(self, name: str) -> str:
        return P.tensor_name(name, self.names)

    def ts(self, names: Sequence[str]) -> str:
        return ", ".join(self.t(n) for n in names)

    def ix(self, f: Factor) -> str:
        return P.indexed(f, self.names)

    def term(self, t: IndexTerm) -> str:
        return P.term(t, self.poly, self.names)

    def terms(self, ts: Sequence[IndexTerm]) -> str:
        return P.terms(ts, self.poly, self.names)

    def einsum_rhs(self, e: Einsum) -> str:
        return P.term(IndexTerm(e.coefficient, e.operands, (), e.summed), self.poly, self.names,
                      inline=True)

    def index_form(self, e: Einsum) -> str:
        return f"{self.ix(e.output)} = {self.einsum_rhs(e)}"

    def matrix(self, m: MatrixProduct | None) -> str | None:
        return P.matrix(m, self.poly, self.names) if m is not None else None



@dataclass(frozen=True)
class Substituted:
    """A polynomial printer that first replaces defined dims by their
    formulas.  Compared by value, so that what is printed with it is
    remembered across a sheet's two formats."""

    poly: P.PolyPrinter
    subs: tuple[tuple[sympy.Symbol, sympy.Expr], ...]

    def __call__(self, e: sympy.Expr) -> str:
        e = e if isinstance(e, sympy.Basic) else sympy.Integer(e)
        return self.poly(substitute(e, dict(self.subs)))

    def __getattr__(self, name: str) -> Any:
        if name == "poly":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.poly, name)


def fold_lines(lines: list[str]) -> list[str]:
    """An aligned block's rows laid out for the LaTeX page: long lines split
    at top-level operators, notes in one column (see :mod:`.layout`)."""
    return lay_out(lines)


def step_note(text: str, math: str | None = None) -> str:
    """A step's name in the notes' column of its line, e.g. ``(chain rule)``,
    or ``(differentiate: MATH)`` with a formula after the name."""
    if math is None:
        return rf"{NOTE_MARK}\text{{({text})}}"
    return rf"{NOTE_MARK}\text{{({text}: }}{math}\text{{)}}"



@functools.lru_cache(maxsize=4096)
def sympy_latex(expr: sympy.Expr, m: Math) -> str:
    """A SymPy expression of tensor elements, with each element printed in
    the sheet's style (``P_{st}``, not SymPy's ``{P}_{s,t}``).  Remembered:
    both formats print the same derivation."""
    names = {e: sympy.Symbol(m.ix(Factor(str(e.base), tuple(str(i) for i in e.indices))))
             for e in expr.atoms(sympy.Indexed)}
    return sympy.latex(expr.xreplace(names))



def signed(parts: list[str]) -> list[str]:
    """Terms of a sum for continued lines: the first as it is, the others
    with their sign in front (``+ t``, ``- t``)."""
    return parts[:1] + [("- " + p[1:].lstrip()) if p.startswith("-") else ("+ " + p)
                        for p in parts[1:]]
