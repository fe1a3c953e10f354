"""Pairwise contraction of one einsum term: its steps, their cost, and its orders.

A term ``Y[o] = c * A[a] B[b] C[c] ...`` is evaluated as a binary tree of
pairwise products (an *order*).  Each node is one :class:`PairStep`: the
product of two intermediate tensors over the union of their letters, summing
away the letters that nothing later needs.  This module counts each step
and decides its bucket; :mod:`.search` finds the orders a term may be
counted in.

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
convolution.  A scatter through a window (an affine index of two or more
letters: a convolution's input gradient, a transposed convolution's forward)
whose two operands each have a letter the other lacks is a convolution: each
output position ``q = p + k`` sums products that pair different elements of
both (``dX[b,c,q] = dY[b,c,p] W[c,k] where q = p + k``), a contraction, as
PyTorch's counter counts every convolution and transposed convolution (of any
groups, with windows that overlap or not).  Every other step (an elementwise
or outer product, a dot product whose kept letters are all on both operands,
such as ``sum_b Xh[b,d] dY[b,d]`` or ``sum_v P[v] L[v]``, a scatter through a
lookup or a shift by a constant, or one whose one operand's letters are all on
the other, a gain on a windowed view ``dX[b,q] = dY[b,i,u] g[u] where q = U*i
+ u``, which PyTorch runs as a multiply and a ``view`` or ``unfold``
backward; a lone tensor scattered or reduced) is elementwise work, as are
constants, functions and the additions between terms.  A lone tensor
scattered through a view whose blocks do not overlap (a reshape's gradient)
is a copy: no step.

**Orders.** ``written``: left to right as written, ``((A B) C) D``; the
cheapest orders are searched in :mod:`.search`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

import sympy

from ...core.domain import Bound, domain_size
from ...core.ir import Einsum, Factor, comparison, selections
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
    offset), and those of them that choose it through a window (an affine
    index of two or more letters: ``p, k`` in ``dX[b,c,q] = dY[b,c,p] W[c,k]
    where q = p + k``)."""

    leaves: tuple[frozenset[str], ...]
    out: frozenset[str]
    bounds: tuple[Bound, ...]
    scatter: frozenset[str]
    shifted: frozenset[str] = frozenset()

    @property
    def convolution(self) -> bool:
        """Whether every scatter letter chooses its output position through a
        window: the term may be a convolution's (or a transposed convolution's)."""
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
                        and len(f.indices) > 2 for j in f.indices[1:])
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
          unit: Unit, kept: Any = None, n: sympy.Expr | int | None = None) -> PairStep:
    """The step joining the operands ``a`` and ``b``; ``n``, when given, the
    number of index tuples it ranges over (else counted here)."""
    kept = kept or (lambda subset: _kept(p, subset))
    ka, kb = kept(a), kept(b)
    span = ka | kb
    summed = span - kept(a | b)
    if summed:
        one_sided = any(not (x in ka and x in kb) for x in span - summed)
        kind: StepKind = "contraction" if one_sided else "dot"
    elif len(a | b) == len(p.leaves) and p.scatter:
        # The last step of a scatter adds each product into the element its
        # index selects: an add per term, as a sum would.  Through a window
        # (q = p + k) whose operands each have a letter the other lacks, it
        # is a convolution: each position sums products pairing different
        # elements of both, a contraction.  Through a lookup, a shift by a
        # constant, or with one operand's letters all on the other (a gain on
        # a windowed view), it multiplies elementwise and places or adds the
        # products: a scatter, elementwise.
        summed = p.scatter
        kind = "contraction" if p.convolution and not (ka <= kb or kb <= ka) else "scatter"
    else:
        kind = "product"
    n = size(span, extents, p.bounds) if n is None else n
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
