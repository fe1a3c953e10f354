"""Pairwise contraction of one einsum term: its steps, their cost, and its orders.

A term ``Y[o] = c * A[a] B[b] C[c] ...`` is evaluated as a binary tree of
pairwise products (an *order*).  Each node is one :class:`PairStep`: the
product of two intermediate tensors over the union of their letters, summing
away the letters that nothing later needs.  This module counts each step,
decides its bucket, and finds the orders a term may be counted in.

**Cost of a step** (FLOPs; with ``unit="MACs"`` every product costs 1 per
term): the number of index tuples it ranges over (:func:`~symflops.core.domain.domain_size`
when a where-clause restricts its letters) times

* 2 for a step that sums over a letter (a multiply-add per term);
* 1 for a step that sums over nothing (an elementwise or outer product);
* 2 for a *scatter* (a step whose only summed letters choose an output
  position through a lookup, ``dE[v,d] = dX[b,d] where v = tok[b]``, or a
  shift, ``dX[b,c,q] = dY[b,c,p] W[c,k] where q = p + k``: a multiply and an
  add into the selected element per term), 1 for a lone tensor scattered (one
  add per element read);
* 1 for a lone tensor summed over a letter (a reduction: one add per element read).

**Bucket** (the one rule symflops applies to every step, forward and
backward): a step is a *contraction*, counted in ``flops``, when it multiplies
two tensors, sums over a letter, and keeps a letter that only one of the two
has: a matrix product, batched or not, a matrix-vector product, or a
convolution.  A scatter through a shift (an affine index: a convolution's
input gradient, a transposed convolution's forward) is a sum too: each output
position ``q = p + k`` sums the pairs that reach it, so its letters count as
summed and ``q`` as a kept letter of the operands whose letters give it; the
step is a contraction when the two operands' letters differ, as PyTorch's
counter counts every convolution and transposed convolution (of any groups,
with windows that overlap or not).  Every other step (an elementwise or outer
product, a dot product whose kept letters are all on both operands, such as
``sum_b Xh[b,d] dY[b,d]`` or ``sum_v P[v] L[v]``, a scatter through a lookup,
a lone tensor scattered or reduced) is elementwise work, as are constants,
functions and the additions between terms.  A lone tensor scattered through a
view whose blocks do not overlap (a reshape's gradient) is a copy: no step.

**Orders.** ``written``: left to right as written, ``((A B) C) D``.
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
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, Mapping, Sequence

import sympy

from ...core.domain import Bound, domain_size
from ...core.offsets import proved_at_most
from ...core.ir import Einsum, Factor, comparison, selections
from ...core.polynomial import dominated, terms
from ...core.records import Candidate, Tree
from ...core.sizes import NONNEGATIVE, POSITIVE, ZERO, sign
from ..base import Unit

StepKind = Literal["contraction", "dot", "product", "scatter", "reduction"]


@dataclass(frozen=True)
class PairStep:
    """One pairwise product of a term (or the lone reduction of a one-operand term)."""

    left: frozenset[str]       # the letters of the two intermediates it multiplies
    right: frozenset[str]      # (empty for a lone reduction)
    span: frozenset[str]       # every letter the step ranges over
    summed: frozenset[str]     # letters it sums away
    kind: StepKind
    size: sympy.Expr           # index tuples it ranges over (inside the domain)
    cost: sympy.Expr           # FLOPs (or MACs) of the step

    @property
    def bucket(self) -> Literal["flops", "elementwise"]:
        return "flops" if self.kind == "contraction" else "elementwise"


@dataclass(frozen=True)
class Pattern:
    """What counting needs of a term: each operand's letters (a letter a
    lookup or a shift determines stands for the letters that determine it),
    the output's, the where-clause's bounds, the scatter letters (summed
    letters that choose an output position through a lookup, a shift or an
    offset), and those of them that choose it through a shift (an affine
    index: ``p, k`` in ``dX[b,c,q] = dY[b,c,p] W[c,k] where q = p + k``)."""

    leaves: tuple[frozenset[str], ...]
    out: frozenset[str]
    bounds: tuple[Bound, ...]
    scatter: frozenset[str]
    shifted: frozenset[str] = frozenset()

    @property
    def convolution(self) -> bool:
        """Whether every scatter letter chooses its output position through a
        shift: the term is a convolution's (or a transposed convolution's) sum."""
        return bool(self.scatter) and self.scatter <= self.shifted


def bounds_of(e: Einsum) -> tuple[Bound, ...]:
    """The where-clause of ``e`` as bounds between letters."""
    return tuple(comparison(f) for f in e.operands if f.is_comparison)


def pattern(e: Einsum) -> Pattern:
    chosen = selections(e.operands)
    leaves = [frozenset(j for i in f.indices for j in chosen.get(i, (i,))) for f in e.factors]
    out = frozenset(e.output.indices)
    scatter = frozenset(j for i in out if i in chosen for j in chosen[i])
    # A letter only a lookup carries (j in dYe[x,c,e] = dY[t,e] where x = ex[t,j])
    # still ranges: the first operand is read once for each of its values.
    alone = scatter - out - frozenset().union(*leaves)
    if alone and leaves:
        leaves[0] = leaves[0] | alone
    shifted = frozenset(j for f in e.operands if f.is_shift and f.indices[0] in out
                        for j in f.indices[1:])
    return Pattern(tuple(leaves), out, bounds_of(e), scatter - out, shifted - out)


def size(letters: frozenset[str] | set[str], extents: Mapping[str, sympy.Expr],
         bounds: Sequence[Bound] = ()) -> sympy.Expr:
    """How many index tuples ``letters`` range over: the product of their
    extents, restricted by the bounds whose two letters are both among them."""
    applied = [b for b in bounds if b.letters <= letters]
    return domain_size({x: extents[x] for x in letters}, applied)


# ------------------------------------------------------------------ steps --

def _kept(p: Pattern, subset: frozenset[int]) -> frozenset[str]:
    """Letters the intermediate of ``subset``'s operands keeps: an operand's
    own letters (a letter only it has is summed in its first step, not
    before), and for a product of several: those on the output, on an operand
    outside it, or in a bound it cannot apply yet."""
    if len(subset) == 1:
        return p.leaves[min(subset)]
    inside = frozenset().union(*(p.leaves[i] for i in subset))
    outside = frozenset().union(*(p.leaves[i] for i in range(len(p.leaves)) if i not in subset))
    pending = frozenset().union(*(b.letters for b in p.bounds if not b.letters <= inside))
    return frozenset(x for x in inside
                     if x in p.out or x in p.scatter or x in outside or x in pending)


def _step(p: Pattern, a: frozenset[int], b: frozenset[int], extents: Mapping[str, sympy.Expr],
          unit: Unit, kept: Any = None) -> PairStep:
    kept = kept or (lambda subset: _kept(p, subset))
    ka, kb = kept(a), kept(b)
    span = ka | kb
    summed = span - kept(a | b)
    if summed:
        one_sided = any(not (x in ka and x in kb) for x in span - summed)
        kind: StepKind = "contraction" if one_sided else "dot"
    elif len(a | b) == len(p.leaves) and p.scatter:
        # The last step of a scatter adds each product into the element its
        # index selects: an add per term, as a sum would.  Through a shift it
        # is a convolution's sum (an output position q = p + k sums the pairs
        # that reach it): a real sum, over the scatter letters, that keeps q,
        # a letter of the operand(s) whose letters give it.  So the rule
        # above decides: a letter on one operand only (the position's
        # included) makes it a contraction.  Through a lookup it stays a
        # scatter-add, elementwise.
        summed = p.scatter
        kind = ("scatter" if not p.convolution else
                "contraction" if ka != kb else "dot")
    else:
        kind = "product"
    n = size(span, extents, p.bounds)
    return PairStep(ka, kb, span, summed, kind, n, _per(kind, unit) * n)


def _per(kind: StepKind, unit: Unit) -> int:
    """FLOPs per index tuple of a pairwise step: a multiply-add, or a multiply alone."""
    return 1 if unit == "MACs" or kind == "product" else 2


def _view(e: Einsum, extents: Mapping[str, sympy.Expr]) -> bool:
    """Whether a one-tensor term only moves its elements, each output element
    receiving at most one: the gradient of a view ``X[b,U*i+u]`` (a reshape),
    ``dX[b,q] = dXv[b,i,u] where q = U*i + u``, is a copy, 0 FLOPs.  Proved for
    a term whose summed letters are exactly the two letters of one affine index
    ``c*a + b`` (``0 <= b < n_b``) with ``c >= n_b``, which keeps the values of
    different ``a`` apart; any other scatter adds (:func:`_lone`)."""
    if len(e.factors) != 1 or e.coefficient != 1:
        return False
    shifts = [f for f in e.operands if f.is_shift]
    summed = set(e.summed)
    if len(shifts) != 1 or len(e.operands) != 2 or summed != set(shifts[0].indices[1:]):
        return False
    relation = shifts[0].affine
    if relation is None or len(relation.coefficients) != 2:
        return False
    (a, b), (ca, cb) = shifts[0].indices[1:], relation.coefficients
    for (big, n_small, small) in ((ca, extents[b], cb), (cb, extents[a], ca)):
        gap = sympy.expand(big - small * (n_small - 1) - 1)
        if small.is_positive and big.is_positive and \
                sign(gap, sorted(gap.free_symbols, key=str)) in (ZERO, POSITIVE, NONNEGATIVE):
            return True
    return False


def _lone(p: Pattern, extents: Mapping[str, sympy.Expr]) -> tuple[PairStep, ...]:
    """A one-operand term: a copy (nothing summed) or one add per element read."""
    span = p.leaves[0]
    summed = span - p.out
    if not summed:
        return ()
    kind: StepKind = "reduction" if summed - p.scatter else "scatter"
    n = size(span, extents, p.bounds)
    return (PairStep(span, frozenset(), span, summed, kind, n, n),)


def steps(e: Einsum, extents: Mapping[str, sympy.Expr], unit: Unit, tree: Tree) -> tuple[PairStep, ...]:
    """The steps of ``tree`` (children before their parent)."""
    p = pattern(e)
    if len(p.leaves) == 1:
        return () if _view(e, extents) else _lone(p, extents)
    out: list[PairStep] = []

    def walk(t: Tree) -> frozenset[int]:
        if isinstance(t, int):
            return frozenset((t,))
        a, b = walk(t[0]), walk(t[1])
        out.append(_step(p, a, b, extents, unit))
        return a | b

    if p.leaves:
        walk(tree)
    return tuple(out)


def written(n: int) -> Tree:
    """Left to right: ``((0, 1), 2), ...``."""
    tree: Tree = 0
    for k in range(1, n):
        tree = (tree, k)
    return tree


def candidate(e: Einsum, extents: Mapping[str, sympy.Expr], unit: Unit, tree: Tree) -> Candidate:
    flops = elementwise = sympy.Integer(0)
    for s in steps(e, extents, unit, tree):
        if s.bucket == "flops":
            flops += s.cost
        else:
            elementwise += s.cost
    return Candidate(tree, sympy.expand(flops), sympy.expand(elementwise))


# ----------------------------------------------------------------- orders --

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


# --------------------------------------------------------------- printing --

def tree_text(e: Einsum, tree: Tree) -> str:
    """``(K[t,e] V[t,f]) Q[s,e]``: an order in the statement's own names."""
    def text(t: Tree, top: bool) -> str:
        if isinstance(t, int):
            f = e.factors[t]
            return str(Factor(f.tensor, f.indices, fn=f.fn))
        inner = f"{text(t[0], False)} {text(t[1], False)}"
        return inner if top else f"({inner})"

    return text(tree, True) if e.factors else ""
