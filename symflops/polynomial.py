"""Small operations on polynomials in the dims that SymPy does slowly.

SymPy's own ``Max`` compares every pair of its arguments symbolically when it
is built (seconds for a few dozen polynomials), and rebuilds itself that way
whenever a dim is substituted.  :func:`largest` keeps only the candidates that
no other one bounds, by a cheap sufficient test on their coefficients, and
:func:`substitute_max` substitutes inside a Max without SymPy's comparisons.
"""

from __future__ import annotations

from typing import Callable

import sympy


def terms(e: sympy.Expr, gens: tuple[sympy.Symbol, ...]) -> dict | None:
    """``e`` as ``{exponents: coefficient}``; None if it is not a polynomial."""
    if not e.is_polynomial(*gens):
        return None
    return sympy.Poly(e, *gens).as_dict() if gens else {(): e}


def dominated(a: dict | None, b: dict | None) -> bool:
    """Whether ``a <= b`` for all dims >= 1, by a cheap sufficient test: each
    negative term of ``b - a`` is paid for by positive terms of ``b - a`` whose
    monomials it divides (``B <= B V`` since ``V >= 1``)."""
    if a is None or b is None:
        return False
    diff = {m: b.get(m, 0) - a.get(m, 0) for m in set(a) | set(b)}
    credit = {m: c for m, c in diff.items() if c > 0}
    for m, c in sorted(((m, -c) for m, c in diff.items() if c < 0), key=lambda t: t[0]):
        for p in sorted(credit):
            if c <= 0:
                break
            if credit[p] > 0 and all(x <= y for x, y in zip(m, p)):
                used = min(c, credit[p])
                credit[p] -= used
                c -= used
        if c > 0:
            return False
    return True


def largest(candidates: list[sympy.Expr]) -> sympy.Expr:
    """The largest of polynomials, keeping only those no other one bounds
    coefficient by coefficient (SymPy's own Max compares every pair
    symbolically, which takes seconds for a few dozen)."""
    unique = list(dict.fromkeys(candidates))
    gens = tuple(sorted(set().union(*(c.free_symbols for c in unique)), key=str))
    coefficients = [terms(c, gens) for c in unique]
    keep = [a for k, a in enumerate(unique)
            if not any(j != k and dominated(coefficients[k], coefficients[j])
                       and not (dominated(coefficients[j], coefficients[k]) and j > k)
                       for j in range(len(unique)))]
    if not keep:
        return sympy.Integer(0)
    return keep[0] if len(keep) == 1 else sympy.Max(*keep, evaluate=False)


def substitute_max(expr: sympy.Expr, substitute: Callable[[sympy.Expr], sympy.Expr]) -> sympy.Expr:
    """``substitute`` applied to each argument of a Max (or to ``expr`` itself
    when it is not one), and the Max rebuilt with :func:`largest`."""
    if isinstance(expr, sympy.Max):
        return largest([substitute(a) for a in expr.args])
    return substitute(expr)
