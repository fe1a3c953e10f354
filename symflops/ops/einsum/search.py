"""The cheapest pairwise orders of one einsum term.

``cheapest``: the orders no other order beats at every size of the dims,
found by dynamic programming over subsets of the operands (each step's cost
depends only on the two subsets it joins), keeping at each subset every
candidate that no other is proved cheaper than at all dims >= 1
(:func:`~symflops.core.polynomial.dominated`).  As opt_einsum's search does by
default, the candidates are the orders that multiply only intermediates
linked by shared letters (each one's operands linked too), with no outer
product of operands that the term links otherwise; an outer product is used
only to join operands that share nothing.  (An avoidable outer product wins
mostly where a dim is 1, and would make nearly every multi-operand count a
case distinction; ``X[i] Y[j] Z[i,j,k]`` with ``I < 2K`` is an exception the
convention accepts.)  When one candidate remains it is the
cheapest order at every size; when several remain their costs cross, and the
exact count of the cheapest order is their minimum, which depends on the sizes.
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import Any, Mapping

import sympy

from ...core.offsets import proved_at_most
from ...core.ir import Einsum, Factor
from ...core.polynomial import dominated, terms
from ...core.records import Candidate, Tree
from ..base import Unit
from .orders import Pattern, _kept, _per, _step, candidate, pattern, tree_text, written


def cheapest(e: Einsum, extents: Mapping[str, sympy.Expr], unit: Unit) -> tuple[Candidate, ...]:
    """The orders of ``e`` that no other order is proved cheaper than at every
    size (one, unless their costs cross), the written order first when it is one.
    Searched once per pattern of letters and extents (a model's rules repeat
    its blocks' under other names)."""
    letter = {x: f"i{k}" for k, x in enumerate(e.indices)}
    renamed = Einsum(Factor("Y", tuple(letter[i] for i in e.output.indices)),
                     tuple(Factor(f"X{k}", tuple(letter[i] for i in f.indices), fn=f.fn)
                           for k, f in enumerate(e.operands)))
    return _cheapest(renamed, tuple((letter[x], extents[x]) for x in e.indices if x in extents),
                     unit)


#: A term whose cheapest orders (at some sizes each) exceed this many at any
#: stage of the search is refused: the count would be a minimum of that many
#: polynomials.  A chain of matrices of distinct sizes has Catalan-many: 5 of
#: 4 matrices, 14 of 5, 42 of 6.
MAX_CANDIDATES = 32


class TooManyOrders(ValueError):
    """More than :data:`MAX_CANDIDATES` orders are each the cheapest at some sizes."""


Poly = dict  # {exponents of the dims: coefficient}: a polynomial's terms


def _add(*polys: Poly) -> Poly:
    out: Poly = {}
    for poly in polys:
        for m, c in poly.items():
            out[m] = out.get(m, 0) + c
    return {m: c for m, c in out.items() if c != 0}


@functools.lru_cache(maxsize=4096)
def _cheapest(e: Einsum, index_extents: tuple[tuple[str, sympy.Expr], ...], unit: Unit
              ) -> tuple[Candidate, ...]:
    extents = dict(index_extents)
    n = len(e.factors)
    if n <= 2:
        return (candidate(e, extents, unit, written(n)),)
    p = pattern(e)
    gens = tuple(sorted(set().union(*(x.free_symbols for x in extents.values())), key=str))
    kept = functools.lru_cache(maxsize=None)(lambda subset: _kept(p, subset))
    linked = functools.lru_cache(maxsize=None)(lambda subset: _connected(p, subset))
    sizes: dict[frozenset[str], tuple[sympy.Expr, Poly | None]] = {}

    def step(a: frozenset[int], b: frozenset[int]) -> tuple[str, sympy.Expr, Poly | None]:
        s = _step(p, a, b, extents, unit, kept)
        if s.span not in sizes:
            found = terms(s.size, gens)
            sizes[s.span] = (s.size, None if found is None else
                             {m: Fraction(int(c.p), int(c.q)) for m, c in found.items()})
        size_poly = sizes[s.span][1]
        per = _per(s.kind, unit)
        poly = None if size_poly is None else {m: c * per for m, c in size_poly.items()}
        return s.bucket, s.cost, poly

    # Each candidate: (tree, flops, elementwise), costs as term dictionaries
    # while every step is a polynomial (the common case), else SymPy expressions.
    zero_dict: Poly = {}
    best: dict[frozenset[int], list[tuple[Tree, Any, Any]]] = {
        frozenset((i,)): [(i, zero_dict, zero_dict)] for i in range(n)}
    symbolic = False
    masks = sorted(range(1, 1 << n), key=lambda mask: (bin(mask).count("1"), mask))
    for mask in masks:
        whole = frozenset(i for i in range(n) if mask >> i & 1)
        if len(whole) < 2:
            continue
        first = min(whole)
        splits = [(part, whole - part) for part in _parts(whole) if first in part]
        if linked(whole):  # no outer product inside linked operands (see the docstring)
            splits = [(a, b) for a, b in splits if linked(a) and linked(b)]
        found = []
        for part, other in splits:
            bucket, cost, poly = step(part, other)
            if poly is None and not symbolic:
                symbolic = True
                best = {k: [(t, _expr(f, gens), _expr(w, gens)) for t, f, w in v]
                        for k, v in best.items()}
            add = cost if symbolic else poly
            for ta, fa, ea in best[part]:
                for tb, fb, eb in best[other]:
                    if symbolic:
                        flops = fa + fb + (add if bucket == "flops" else 0)
                        elementwise = ea + eb + (0 if bucket == "flops" else add)
                    else:
                        flops = _add(fa, fb, add) if bucket == "flops" else _add(fa, fb)
                        elementwise = _add(ea, eb) if bucket == "flops" else _add(ea, eb, add)
                    found.append(((ta, tb), flops, elementwise))
        best[whole] = _pareto(found, gens, symbolic)
        if len(best[whole]) > MAX_CANDIDATES:
            raise TooManyOrders(f"more than {MAX_CANDIDATES} orders of {tree_text(e, written(n))} "
                                "are each the cheapest at some sizes")
    full = frozenset(range(n))
    out = [Candidate(t, sympy.expand(f if symbolic else _expr(f, gens)),
                     sympy.expand(w if symbolic else _expr(w, gens))) for t, f, w in best[full]]
    # The written order, when it is among the cheapest, is the one shown first.
    mine = candidate(e, extents, unit, written(n))
    if any(sympy.expand(c.total - mine.total) == 0 for c in out):
        out = [mine] + [c for c in out if sympy.expand(c.total - mine.total) != 0]
    return tuple(out)


def _expr(poly: Poly, gens: tuple[sympy.Symbol, ...]) -> sympy.Expr:
    return sympy.Add(*(sympy.Mul(sympy.Rational(c.numerator, c.denominator) if isinstance(c, Fraction)
                                 else sympy.Rational(c), *(g ** k for g, k in zip(gens, m) if k))
                       for m, c in poly.items()))


def _connected(p: Pattern, subset: frozenset[int]) -> bool:
    """Whether the operands of ``subset`` are linked by shared letters."""
    start = min(subset)
    todo, seen = [start], {start}
    while todo:
        i = todo.pop()
        for j in subset - seen:
            if p.leaves[i] & p.leaves[j]:
                seen.add(j)
                todo.append(j)
    return seen == subset


def _parts(whole: frozenset[int]) -> list[frozenset[int]]:
    items = sorted(whole)
    return [frozenset(x for k, x in enumerate(items) if mask >> k & 1)
            for mask in range(1, (1 << len(items)) - 1)]


def _pareto(found: list[tuple[Tree, Any, Any]], gens: tuple[sympy.Symbol, ...], symbolic: bool
            ) -> list[tuple[Tree, Any, Any]]:
    """The candidates no other is proved to cost at most as much as at every
    size (of two that cost the same, the first found)."""
    if symbolic:
        totals = [sympy.expand(f + w) for _, f, w in found]
        polys = [terms(t, gens) if gens else None for t in totals]
    else:
        polys = [_add(f, w) for _, f, w in found]
        totals = None
    unique: dict = {}
    order = []
    for k, poly in enumerate(polys):  # equal costs: the first found
        key = (tuple(sorted(poly.items())) if poly is not None
               else sympy.srepr(totals[k]))
        if key not in unique:
            unique[key] = k
            order.append(k)
    keep = []
    for k in order:
        if not any(j != k and _at_most(j, k, polys, totals) for j in order):
            keep.append(found[k])
    return keep


def _at_most(j: int, k: int, polys: list, totals: list | None) -> bool:
    """Whether candidate ``j`` is proved to cost at most candidate ``k`` at
    every value of the dims >= 1."""
    if polys[j] is not None and polys[k] is not None:
        return dominated(polys[j], polys[k])
    a, b = totals[j], totals[k]
    if a.has(sympy.Min) or b.has(sympy.Min):  # a window's count: min(S, W) and the dims
        return proved_at_most(a, b)
    return bool(a.is_number and b.is_number and a <= b)
