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

The search is bounded (:data:`MAX_CANDIDATES`, :data:`MAX_WORK`): beyond its
bound a term is not refused but counted in one order, the cheapest at the
declared sizes (:data:`DEFAULT_SIZE` for each dim they leave out), found by
the same dynamic programme over numbers (:func:`_cheapest_at`, one best order
per subset: 3^n pairs of parts at most, a fraction of a second for the 8
tensors a product may have), and counted exactly, step by step, in that order.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping

import sympy

from ...core.offsets import proved_at_most
from ...core.ir import Einsum, Factor, dim_symbol
from ...core.polynomial import dominated, plain_terms, terms
from ...core.records import Candidate, Tree
from ..base import Unit
from .orders import Pattern, _kept, _per, _step, candidate, pattern, size, written


def cheapest(e: Einsum, extents: Mapping[str, sympy.Expr], unit: Unit,
             sizes: Sizes = ()) -> tuple[tuple[Candidate, ...], Bounded | None]:
    """The orders of ``e`` that no other order is proved cheaper than at every
    size (one, unless their costs cross), the written order first when it is
    one; and None.  Where the search meets its bound, the one order cheapest
    at ``sizes`` (each dim they leave out at :data:`DEFAULT_SIZE`) instead, and
    the :class:`Bounded` record of why and at which sizes it was chosen.
    Searched once per pattern of letters and extents (a model's rules repeat
    its blocks' under other names)."""
    letter = {x: f"i{k}" for k, x in enumerate(e.indices)}
    renamed = Einsum(Factor("Y", tuple(letter[i] for i in e.output.indices)),
                     tuple(Factor(f"X{k}", tuple(letter[i] for i in f.indices), fn=f.fn)
                           for k, f in enumerate(e.operands)))
    index_extents = tuple((letter[x], extents[x]) for x in e.indices if x in extents)
    found = _cheapest(renamed, index_extents, unit)
    if not isinstance(found, str):
        return found, None
    declared = dict(sizes)
    dims = sorted({s.name for i in e.indices if i in extents for s in extents[i].free_symbols})
    at = tuple((n, declared.get(n, DEFAULT_SIZE)) for n in dims)
    tree = _cheapest_at(renamed, index_extents, unit, at)
    return (candidate(e, extents, unit, tree),), Bounded(found, at)


#: The bounds of the search (:func:`_cheapest`).  A term whose cheapest orders
#: (at some sizes each) exceed :data:`MAX_CANDIDATES` at any stage would be
#: counted as a minimum of that many polynomials: a chain of matrices of
#: distinct sizes has Catalan-many, 5 of 4 matrices, 14 of 5, 42 of 6.  And
#: the search stops once it has joined or compared :data:`MAX_WORK` pairs of
#: candidates, which keeps a product of 8 tensors to about a second.  Beyond
#: either, the term is counted in the one order cheapest at the declared
#: sizes, found by the same search with numbers (one best order per subset).
MAX_CANDIDATES = 32
MAX_WORK = 10_000

#: The size a bounded search gives a dim the declaration's ``sizes:`` leave out.
DEFAULT_SIZE = 1024

Sizes = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Bounded:
    """A term whose search met its bound: why (``reason``, in words), and the
    sizes (every dim of the term) at which its one counted order is the cheapest."""

    reason: str
    sizes: Sizes


Poly = dict  # {exponents of the dims: coefficient}: a polynomial's terms


def _times(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(x + y for x, y in zip(ma, mb))
            out[m] = out.get(m, 0) + ca * cb
    return {m: c for m, c in out.items() if c != 0}


def _add(*polys: Poly) -> Poly:
    out: Poly = {}
    for poly in polys:
        for m, c in poly.items():
            out[m] = out.get(m, 0) + c
    return {m: c for m, c in out.items() if c != 0}


def _splits(p: Pattern, n: int, linked: Any) -> list[tuple[frozenset[int], list]]:
    """Every subset of the ``n`` operands of two or more, smallest first, with
    the pairs of parts it may be joined from (see the module doc)."""
    out = []
    for mask in sorted(range(1, 1 << n), key=lambda mask: (bin(mask).count("1"), mask)):
        whole = frozenset(i for i in range(n) if mask >> i & 1)
        if len(whole) < 2:
            continue
        first = min(whole)
        splits = [(part, whole - part) for part in _parts(whole) if first in part]
        if linked(whole):  # no outer product inside linked operands (see the docstring)
            splits = [(a, b) for a, b in splits if linked(a) and linked(b)]
        out.append((whole, splits))
    return out


@functools.lru_cache(maxsize=4096)
def _cheapest(e: Einsum, index_extents: tuple[tuple[str, sympy.Expr], ...], unit: Unit
              ) -> tuple[Candidate, ...] | str:
    """The candidates, or why the search stopped (see :data:`MAX_WORK`)."""
    extents = dict(index_extents)
    n = len(e.factors)
    if n <= 2:
        return (candidate(e, extents, unit, written(n)),)
    p = pattern(e)
    gens = tuple(sorted(set().union(*(x.free_symbols for x in extents.values())), key=str))
    kept = functools.lru_cache(maxsize=None)(lambda subset: _kept(p, subset))
    linked = functools.lru_cache(maxsize=None)(lambda subset: _connected(p, subset))
    sizes: dict[frozenset[str], Poly | None] = {}
    letter_polys: dict[str, Poly | None] = {}
    bounded = frozenset(x for b in p.bounds for x in b.letters)

    def poly_of(expr: sympy.Expr) -> Poly | None:
        return plain_terms(expr, gens)

    def span_poly(span: frozenset[str]) -> Poly | None:
        """The span's count as a polynomial: the product of its letters'
        extents (no SymPy) unless a bound restricts it."""
        if span & bounded:
            return poly_of(size(span, extents, p.bounds))
        out: Poly | None = {(0,) * len(gens): 1}
        for x in sorted(span):
            if x not in letter_polys:
                letter_polys[x] = poly_of(extents[x])
            factor = letter_polys[x]
            if factor is None or out is None:
                return None
            out = _times(out, factor)
        return out

    def step(a: frozenset[int], b: frozenset[int]) -> tuple[str, sympy.Expr | None, Poly | None]:
        span = kept(a) | kept(b)
        if span not in sizes:
            sizes[span] = span_poly(span)
        s = _step(p, a, b, extents, unit, kept, 1)  # its kind; its size is the span's
        per = _per(s.kind, unit)
        size_poly = sizes[span]
        if size_poly is None:
            return s.bucket, per * size(span, extents, p.bounds), None
        return s.bucket, None, {m: c * per for m, c in size_poly.items()}

    # Each candidate: (tree, flops, elementwise), costs as term dictionaries
    # while every step is a polynomial (the common case), else SymPy expressions.
    zero_dict: Poly = {}
    best: dict[frozenset[int], list[tuple[Tree, Any, Any]]] = {
        frozenset((i,)): [(i, zero_dict, zero_dict)] for i in range(n)}
    symbolic = False
    work = [0]  # pairs of candidates joined or compared so far
    for whole, splits in _splits(p, n, linked):
        work[0] += sum(len(best[a]) * len(best[b]) for a, b in splits)
        if work[0] > MAX_WORK:
            return f"the search passed {MAX_WORK:,} pairs of candidate orders"
        found = []
        for part, other in splits:
            bucket, cost, poly = step(part, other)
            if poly is None and not symbolic:
                symbolic = True
                best = {k: [(t, _expr(f, gens), _expr(w, gens)) for t, f, w in v]
                        for k, v in best.items()}
            add = (cost if cost is not None else _expr(poly, gens)) if symbolic else poly
            for ta, fa, ea in best[part]:
                for tb, fb, eb in best[other]:
                    if symbolic:
                        flops = fa + fb + (add if bucket == "flops" else 0)
                        elementwise = ea + eb + (0 if bucket == "flops" else add)
                    else:
                        flops = _add(fa, fb, add) if bucket == "flops" else _add(fa, fb)
                        elementwise = _add(ea, eb) if bucket == "flops" else _add(ea, eb, add)
                    found.append(((ta, tb), flops, elementwise))
        front = _pareto(found, gens, symbolic, work)
        if front is None:
            return f"the search passed {MAX_WORK:,} pairs of candidate orders"
        best[whole] = front
        if len(best[whole]) > MAX_CANDIDATES:
            return f"more than {MAX_CANDIDATES} orders are each the cheapest at some sizes"
    full = frozenset(range(n))
    out = [Candidate(t, sympy.expand(f if symbolic else _expr(f, gens)),
                     sympy.expand(w if symbolic else _expr(w, gens))) for t, f, w in best[full]]
    # The written order, when it is among the cheapest, is the one shown first.
    mine = candidate(e, extents, unit, written(n))
    if any(sympy.expand(c.total - mine.total) == 0 for c in out):
        out = [mine] + [c for c in out if sympy.expand(c.total - mine.total) != 0]
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def _cheapest_at(e: Einsum, index_extents: tuple[tuple[str, sympy.Expr], ...], unit: Unit,
                 at: Sizes) -> Tree:
    """The order cheapest at the sizes ``at`` among the orders :func:`_cheapest`
    searches: the same dynamic programme with numbers, one best order per
    subset (of equal costs, the first found).  Each step's count is exact and
    evaluated at ``at``."""
    extents = dict(index_extents)
    n = len(e.factors)
    p = pattern(e)
    values = {dim_symbol(name): sympy.Integer(v) for name, v in at}
    kept = functools.lru_cache(maxsize=None)(lambda subset: _kept(p, subset))
    linked = functools.lru_cache(maxsize=None)(lambda subset: _connected(p, subset))
    spans: dict[frozenset[str], int] = {}
    each = {x: int(v.xreplace(values)) for x, v in extents.items()}
    bounded = frozenset(x for b in p.bounds for x in b.letters)

    def cost(a: frozenset[int], b: frozenset[int]) -> int:
        ka, kb = kept(a), kept(b)
        span = ka | kb
        if span not in spans:
            spans[span] = (math.prod(each[x] for x in span) if not span & bounded
                           else int(size(span, extents, p.bounds).xreplace(values)))
        s = _step(p, a, b, extents, unit, kept, spans[span])
        return int(s.cost)

    best: dict[frozenset[int], tuple[int, Tree]] = {frozenset((i,)): (0, i) for i in range(n)}
    for whole, splits in _splits(p, n, linked):
        for part, other in splits:
            total = best[part][0] + best[other][0] + cost(part, other)
            if whole not in best or total < best[whole][0]:
                best[whole] = (total, (best[part][1], best[other][1]))
    return best[frozenset(range(n))][1]


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


def _pareto(found: list[tuple[Tree, Any, Any]], gens: tuple[sympy.Symbol, ...], symbolic: bool,
            work: list[int]) -> list[tuple[Tree, Any, Any]] | None:
    """The candidates no other is proved to cost at most as much as at every
    size (of two that cost the same, the first found); None once the
    comparisons, added to ``work[0]``, pass :data:`MAX_WORK`."""
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
        for j in order:
            if j == k:
                continue
            work[0] += 1
            if work[0] > MAX_WORK:
                return None
            if _at_most(j, k, polys, totals):
                break
        else:
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
