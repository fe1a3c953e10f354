"""The equalities a sheet displays, as records the engine can prove.

A sheet never prints ``a = b`` from two strings: it prints an
:class:`Equation`, whose sides are SymPy expressions kept in the shape they
are shown in (a sum of parts, each part a product of factors times a sum of
terms, unexpanded), and :meth:`Equation.holds` checks every link of the chain
``a = b = c`` by expanding both sides.  The sheet's context keeps every
equation it printed (``SheetContext.equations``), so a test can prove them
all for every shipped sheet.

Invariants:

* a side's value is the product of its factors times the sum of its terms,
  summed over its parts; the printed text is made from the same parts, so
  what is printed is what is proven;
* a named quantity (``N_{\\text{param}}``) is a :class:`Named` symbol with the
  engine's value beside it: a side may use the symbol (``= 6 N_{\\text{param}} B``)
  and the proof substitutes the value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import sympy

from .printing import join_signed


@dataclass(frozen=True)
class Named:
    """A quantity the sheet names (its LaTeX symbol) and the engine's value of it."""

    latex: str
    value: sympy.Expr
    symbol: sympy.Symbol

    @staticmethod
    def of(latex: str, value: sympy.Expr) -> "Named":
        # A dummy symbol: never equal to a dim, whatever the dims are called.
        return Named(latex, sympy.expand(value), sympy.Dummy("named"))


@dataclass(frozen=True)
class Factor:
    """One factor of a displayed product, with an optional label set under
    it (``\\underbrace{BSNE}_{\\text{outputs}}``)."""

    value: sympy.Expr
    label: str | None = None


@dataclass(frozen=True)
class Part:
    """A displayed summand: ``factors[0] × factors[1] × … × (terms[0] + terms[1] + …)``.

    With no factors it is the sum of its terms; with no terms the product of
    its factors.
    ``named`` replaces the terms by a named quantity (``6 × N_param``)."""

    terms: tuple[sympy.Expr, ...] = ()
    factors: tuple[Factor, ...] = ()
    named: Named | None = None

    @property
    def value(self) -> sympy.Expr:
        if self.named is not None:
            inner = self.named.value
        elif self.terms:
            inner = sum(self.terms, sympy.Integer(0))
        else:  # a bare product of factors
            inner = sympy.Integer(1)
        return sympy.Mul(*(f.value for f in self.factors)) * inner


Side = tuple[Part, ...]


def side(*terms: sympy.Expr) -> Side:
    """A side shown as one sum of ``terms`` (one term: the polynomial itself)."""
    return (Part(tuple(sympy.sympify(t) for t in terms)),)


@dataclass(frozen=True)
class Equation:
    """``name = sides[0] = sides[1] = …``, every link an identity of
    polynomials in the dims (checked by :meth:`holds`).  ``name`` (if any) is
    the quantity the chain computes, and its value the first link's left side."""

    sides: tuple[Side, ...]
    name: Named | None = None
    #: printed as numbers (``4{,}831{,}838{,}208``, digits grouped): a worked example
    numbers: bool = False

    def values(self) -> list[sympy.Expr]:
        vals = [] if self.name is None else [self.name.value]
        return vals + [sum((p.value for p in s), sympy.Integer(0)) for s in self.sides]

    def links(self) -> list[tuple[sympy.Expr, sympy.Expr]]:
        """Each ``a = b`` of the chain, as values with every named symbol replaced."""
        named = {p.named.symbol: p.named.value for s in self.sides for p in s
                 if p.named is not None}
        vals = [sympy.expand(v.xreplace(named)) for v in self.values()]
        return list(zip(vals, vals[1:]))

    def holds(self) -> bool:
        return all(sympy.expand(a - b) == 0 for a, b in self.links())



def _is_sum(latex: str) -> bool:
    """Whether printed LaTeX is a sum at its top level (a + or - outside every
    bracket and brace, after its first character): a factor must then be
    wrapped, ``L \\times (2DNE + D)``, never ``L \\times 2DNE + D``."""
    depth = 0
    for k, ch in enumerate(latex):
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        elif ch in "+-" and depth == 0 and k > 0:
            return True
    return False


class Printer:
    """Prints equations with the sheet's polynomial printer (``poly``)."""

    def __init__(self, poly: Callable[[sympy.Expr], str]):
        self.poly = poly

    def factor(self, f: Factor) -> str:
        text = self.poly(f.value)
        if isinstance(sympy.expand(f.value), sympy.Add) and not f.label:
            text = f"({text})"  # a factor that is a sum, such as L - 1
        return rf"\underbrace{{{text}}}_{{\text{{{f.label}}}}}" if f.label else text

    def terms(self, terms: Sequence[sympy.Expr]) -> str:
        return join_signed(self.poly(t) for t in terms) or "0"

    def part(self, p: Part) -> str:
        if p.named is not None and p.factors:
            # the 6ND rule's way: coefficient, the named count, the rest (6 \cdot N \cdot B)
            per = sympy.expand(sympy.Mul(*(f.value for f in p.factors)))
            coefficient, rest = per.as_coeff_Mul()
            pieces = [self.poly(coefficient)] if coefficient != 1 else []
            pieces.append(p.named.latex)
            if rest != 1:
                pieces.append(self.poly(rest))
            return r" \cdot ".join(pieces)
        if p.named is not None:
            inner, wrap = p.named.latex, False
        else:
            inner, wrap = self.terms(p.terms), len(p.terms) > 1
        if not p.factors:
            return inner
        if not p.terms:
            return r" \times ".join(self.factor(f) for f in p.factors)
        if wrap or _is_sum(inner):
            inner = f"({inner})"
        return r" \times ".join([*(self.factor(f) for f in p.factors), inner])

    def side(self, s: Side) -> str:
        return join_signed(self.part(p) for p in s) or "0"

    def __call__(self, e: Equation) -> str:
        if e.numbers:
            return Printer(_grouped)(Equation(e.sides, e.name))
        texts = ([e.name.latex] if e.name is not None else []) + [self.side(s) for s in e.sides]
        shown = [t for k, t in enumerate(texts) if k == 0 or t != texts[k - 1]]
        return " = ".join(shown)


def chain(*sides: Side, name: Named | None = None, numbers: bool = False) -> Equation:
    """``name = sides[0] = sides[1] = …`` (a side printed the same as the one
    before it is shown once: see :class:`Printer`); ``numbers``: every side
    is a whole number or a product of them, printed with grouped digits."""
    return Equation(tuple(sides), name, numbers)


def _grouped(e: sympy.Expr) -> str:
    """A whole number with its digits grouped, ``4{,}831{,}838{,}208``."""
    e = sympy.sympify(e)
    if e.is_Integer:
        return f"{int(e):,}".replace(",", "{,}")
    if e.is_Rational:
        return rf"	frac{{{e.p:,}}}{{{e.q:,}}}".replace(",", "{,}")
    raise ValueError(f"a worked example prints numbers, not {e}")


def grouped(values: Sequence[sympy.Expr], copies: Sequence[sympy.Expr]) -> Side:
    """The sum of ``values`` shown with their copies: runs of consecutive
    values with the same number of copies ``n != 1`` become one part
    ``n × (v1 + v2 + …)``; zero values are left out."""
    parts: list[Part] = []
    run: list[sympy.Expr] = []
    run_n: sympy.Expr | None = None

    def flush() -> None:
        if run:
            if run_n == 1:
                parts.extend(Part((v,)) for v in run)
            else:
                parts.append(Part(tuple(run), (Factor(run_n),)))

    for v, n in zip(values, copies):
        if v == 0:
            continue
        n = sympy.sympify(n)
        if n != run_n:
            flush()
            run, run_n = [], n
        run.append(v)
    flush()
    return tuple(parts) or (Part((sympy.Integer(0),)),)
