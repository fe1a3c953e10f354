"""What an einsum op or rule costs, in both buckets.

Each term is contracted pairwise (:mod:`.orders` counts each step and puts it
in a bucket by one rule): forward terms in the order written (or the
cheapest, with ``forward_order: cheapest``), backward rules in the cheapest
order.  Where the cheapest orders cross, the count is the one cheapest at the
declared ``sizes:``, else the least of them (a :class:`TermOrders` records
the candidates).  Constant factors and pointwise functions are elementwise
work, and so are the additions joining several terms.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import sympy

from ...core.ir import Einsum, Op, Order, dim_symbol
from ...core.polynomial import Cheapest, Least, dominated, terms
from ...core.records import Candidate, OpCost, Rule, TermOrders
from ..base import Choice, Unit
from ..functions import cost as function_cost
from .orders import bounds_of, candidate, size, tree_text, written
from .search import cheapest


def einsum_flops(e: Einsum, extents: Mapping[str, sympy.Expr], unit: Unit = "FLOPs",
                 order: Order = "written") -> sympy.Expr:
    """All the work of contracting ``e``'s operands pairwise in ``order``
    (both buckets; see :mod:`symflops.ops.einsum.orders`); for ``cheapest`` orders
    whose costs cross, the least of them.

    >>> from symflops.core.ir import Einsum, Factor
    >>> M, N, K = sympy.symbols("M N K", positive=True)
    >>> mm = Einsum(Factor("C", ("m", "n")), (Factor("A", ("m", "k")), Factor("B", ("k", "n"))))
    >>> einsum_flops(mm, {"m": M, "n": N, "k": K})
    2*K*M*N
    """
    if order == "written" or len(e.factors) <= 2:
        return candidate(e, extents, unit, written(len(e.factors))).total
    found, _ = cheapest(e, extents, unit)
    return found[0].total if len(found) == 1 else Least(*(c.total for c in found))


def einsum_elementwise(e: Einsum, extents: Mapping[str, sympy.Expr]) -> sympy.Expr:
    """FLOPs outside the contraction: one multiply per output element for a
    constant coefficient other than 1 (and -1, a sign flip), and each
    pointwise function at its documented cost per element of its operand
    (nothing for a divisor ``/ Z[s]``: the step multiplying it in divides)."""
    total = sympy.Integer(0)
    bounds = bounds_of(e)
    for f in e.factors:
        if f.function is not None:  # a reciprocal among other factors is the product's divide
            total += (function_cost(f.function, in_product=len(e.factors) > 1)
                      * size(set(f.indices), extents, bounds))
    if e.coefficient in (1, -1, 0) or not e.factors:
        return total
    return total + size(set(e.output.indices) & {i for f in e.operands for i in f.indices},
                        extents, bounds)


def _choose(found: tuple[Candidate, ...], sizes: tuple[tuple[str, int], ...]) -> list[int]:
    """The positions of the candidates cheapest at ``sizes`` (several when
    dims the sizes leave out still decide; all of them without sizes)."""
    if not sizes:
        return list(range(len(found)))
    at = {dim_symbol(n): sympy.Integer(v) for n, v in sizes}
    totals = [sympy.expand(c.total.xreplace(at)) for c in found]
    if all(t.is_number for t in totals):
        return [totals.index(min(totals))]
    gens = tuple(sorted(set().union(*(t.free_symbols for t in totals)), key=str))
    polys = [terms(t, gens) for t in totals]
    return [k for k in range(len(found))
            if not any(j != k and dominated(polys[j], polys[k])
                       and not (dominated(polys[k], polys[j]) and k < j) for j in range(len(found)))]


def _minimum(found: Sequence[Candidate]) -> tuple[sympy.Expr, sympy.Expr]:
    """``(flops, elementwise)`` of whichever candidate costs least."""
    if len(found) == 1:
        return found[0].flops, found[0].elementwise
    if len({c.elementwise for c in found}) == 1:
        return Least(*(c.flops for c in found)), found[0].elementwise
    if len({c.flops for c in found}) == 1:
        return found[0].flops, Least(*(c.elementwise for c in found))
    totals = [c.total for c in found]
    least = [sympy.And(*(sympy.Le(totals[k], t, evaluate=False) for j, t in enumerate(totals)
                         if j != k), evaluate=False) for k in range(len(found))]
    return (Cheapest(*((c.flops, w) for c, w in zip(found[:-1], least)), (found[-1].flops, True)),
            Cheapest(*((c.elementwise, w) for c, w in zip(found[:-1], least)),
                     (found[-1].elementwise, True)))


def term_cost(e: Einsum, extents: Mapping[str, sympy.Expr], unit: Unit, order: Order,
              sizes: tuple[tuple[str, int], ...] = (), choice: Choice = "declared", term: int = 0
              ) -> tuple[sympy.Expr, sympy.Expr, TermOrders | None]:
    """``(flops, elementwise, orders)`` of one term counted in ``order``;
    ``orders`` records the crossing candidates of a cheapest order, if any, or
    the one order a bounded search counts (whatever ``choice``: the one
    cheapest at the declared ``sizes``, see :func:`.search.cheapest`)."""
    if order == "written" or len(e.factors) <= 2:
        c = candidate(e, extents, unit, written(len(e.factors)))
        return c.flops, c.elementwise, None
    found, bounded = cheapest(e, extents, unit, sizes)
    if bounded is not None:
        (c,) = found
        return c.flops, c.elementwise, TermOrders(term, (tree_text(e, c.tree),), found, 0,
                                                  bounded.sizes, bounded.reason)
    if len(found) == 1:
        return found[0].flops, found[0].elementwise, None
    left = _choose(found, sizes if choice == "declared" else ())
    chosen = left[0] if len(left) == 1 else None
    flops, elementwise = _minimum([found[k] for k in left])
    return flops, elementwise, TermOrders(term, tuple(tree_text(e, c.tree) for c in found), found,
                                          chosen, sizes if chosen is not None else ())


def rule_cost(rule: Rule, unit: Unit, sizes: tuple[tuple[str, int], ...] = (),
              choice: Choice = "declared") -> OpCost:
    """A rule's terms, each in its cheapest order, step by step in their
    buckets; the additions joining its terms are elementwise.  A rule that
    runs a recurrence (:class:`symflops.ops.recurrence.ScanRule`) counts itself."""
    own = getattr(rule, "own_cost", None)
    if own is not None:
        return own(unit)
    extents = rule.dims()
    flops = elementwise = sympy.Integer(0)
    orders = []
    for k, t in enumerate(rule.terms):
        f, w, crossing = term_cost(t, extents, unit, "cheapest", sizes, choice, k)
        flops += f
        elementwise += w + einsum_elementwise(t, extents)
        orders += [crossing] if crossing else []
    elementwise += _joins(rule.terms, extents)
    return OpCost(sympy.expand(flops), sympy.expand(elementwise), tuple(orders))


def op_cost(op: Op, unit: Unit, order: Order = "written",
            sizes: tuple[tuple[str, int], ...] = (), choice: Choice = "declared") -> OpCost:
    """A forward op: each term step by step in its bucket (in ``order``), its
    constant factors and pointwise functions, and the additions between terms."""
    extents = op.dims()
    flops = elementwise = sympy.Integer(0)
    orders = []
    for k, t in enumerate(op.terms):
        f, w, crossing = term_cost(t, extents, unit, order, sizes, choice, k)
        flops += f
        elementwise += w + einsum_elementwise(t, extents)
        orders += [crossing] if crossing else []
    elementwise += _joins(op.terms, extents)
    return OpCost(sympy.expand(flops), sympy.expand(elementwise), tuple(orders))


def _joins(terms: Sequence[Einsum], extents: Mapping[str, sympy.Expr]) -> sympy.Expr:
    """The additions joining several terms into one output: one per output
    element and extra term.  A bound on two output letters that every term
    carries (causal scores minus ALiBi's bias, the causal softmax's two-term
    rule, both ``where t <= s``) makes the output zero outside its domain, so
    the terms are joined inside the domain only."""
    if len(terms) < 2:
        return sympy.Integer(0)
    common = [b for b in bounds_of(terms[0]) if all(b in bounds_of(t) for t in terms[1:])]
    return (len(terms) - 1) * size(set(terms[0].output.indices), extents, common)
