"""How many products of a term read inside a padded axis, beside those it counts.

A term that reads a padded tensor through an affine index (``X[b,c,p-k]``
with ``pad: [0, 0, [K - 1, 0]]``) is counted with every tuple of its
letters, the products with the padding's zeros included, as frameworks run
them.  :func:`padded_reads` gives that count and, where it is exact in
closed form, the count of the products that multiply a value inside the
axis: for an index of one letter ``x + c`` (the values of ``x`` that land
inside), for a difference ``x - y + c`` (the tuples with ``y <= x + c`` and
``x <= y + n - 1 - c``, counted like a where-clause with offsets) and for a
sum ``x + y + c`` (``i+u-R``, a centred kernel: the same, with ``y``
reflected), ``c`` a whole number or an expression in dims.  Other indices,
and counts that are piecewise in the dims, get None: not derived, never
guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import sympy

from ..core.domain import Bound, Uncountable
from ..core.ir import Einsum, Factor, Layer, Tensor
from ..core.sizes import NONNEGATIVE, POSITIVE, ZERO, sign
from ..ops.einsum.orders import bounds_of, pattern, size


@dataclass(frozen=True)
class PaddedReads:
    """``tensors`` read with padding; ``tuples`` products counted; ``inside``
    those multiplying a value inside the axes (None: not derived)."""

    tensors: tuple[str, ...]
    tuples: sympy.Expr
    inside: sympy.Expr | None


def padded_reads(e: Einsum, layer: Layer, extents: Mapping[str, sympy.Expr]) -> PaddedReads | None:
    """The padded reads of forward term ``e`` (None when it reads no padding)."""
    p = pattern(e)
    letters = frozenset().union(*p.leaves) | p.out
    bounds = list(bounds_of(e))
    narrowed = dict(extents)
    tensors: list[str] = []
    reflected: set[str] = set()
    exact = True
    for f in e.operands:
        read = next((g for g in e.factors if f.is_shift and f.indices[0] in g.indices), None)
        tensor = _tensor(layer, read.tensor) if read is not None else None
        if tensor is None or tensor.padding(read.indices.index(f.indices[0])) == (0, 0):
            continue
        tensors.append(tensor.name)
        n = tensor.shape[read.indices.index(f.indices[0])]
        exact = exact and _restrict(f, n, narrowed, bounds, extents, reflected)
    if not tensors:
        return None
    inside = None
    if exact:
        try:
            inside = _canonical_minima(sympy.expand(size(letters, narrowed, bounds)))
        except Uncountable:  # piecewise in the dims (how R compares with I): not derived
            inside = None
    return PaddedReads(tuple(dict.fromkeys(tensors)), size(letters, extents, bounds_of(e)), inside)


def _canonical_minima(expr: sympy.Expr) -> sympy.Expr:
    """Each minimum of two linear polynomials in the dims written as one of
    positive terms: ``min(a, b) = b - N + min(P, N)``, where ``a - b = P - N``
    and ``P``, ``N`` hold the terms of positive and of negative coefficient
    (``min(0, I - R - 1) = min(I, R + 1) - R - 1`` and ``min(2R, I + R - 1) =
    min(I, R + 1) + R - 1``), so that the minima of one count that are one
    up to a constant print as one.  The same value, exactly."""
    def linear(e: sympy.Expr) -> bool:
        return e.is_polynomial(*e.free_symbols) and sympy.Poly(
            e, *sorted(e.free_symbols, key=str) or [sympy.Symbol("x")]).total_degree() <= 1

    def rewrite(m: sympy.Min) -> sympy.Expr:
        if len(m.args) != 2 or not all(linear(a) for a in m.args):
            return m
        a, b = m.args
        terms = sympy.Add.make_args(sympy.expand(a - b))
        positive = sympy.Add(*(t for t in terms if not t.could_extract_minus_sign()))
        negative = -sympy.Add(*(t for t in terms if t.could_extract_minus_sign()))
        return b - negative + sympy.Min(positive, negative)

    return sympy.expand(expr.replace(lambda e: isinstance(e, sympy.Min), rewrite))


def _tensor(layer: Layer, name: str) -> Tensor | None:
    return next((t for t in layer.tensors if t.name == name), None)


def _restrict(f: Factor, n: sympy.Expr, narrowed: dict[str, sympy.Expr], bounds: list[Bound],
              extents: Mapping[str, sympy.Expr], reflected: set[str]) -> bool:
    """Narrow ``narrowed`` or add to ``bounds`` so that they count only the
    tuples whose index ``f`` lands inside ``0 .. n - 1``; False when that is
    not one of the forms this module counts exactly.  A sum ``x + y + c``
    is counted as the difference ``x - y' + c + ext(y) - 1`` of the reflected
    ``y' = ext(y) - 1 - y``, which has as many tuples (``reflected`` keeps
    ``y`` out of every other restriction)."""
    relation, letters = f.affine, f.indices[1:]
    taken = {x for b in bounds for x in b.letters}
    if reflected & set(letters):
        return False
    if len(letters) == 1 and relation.coefficients[0] == 1 and letters[0] not in taken \
            and narrowed[letters[0]] == extents[letters[0]]:
        (x,), c0 = letters, relation.offset
        # x + c0 inside 0 .. n - 1: x from max(0, -c0) to min(ext - 1, n - 1 - c0),
        # none when that is empty (c0 = -R with R >= ext): max(0, high - low + 1)
        values = sympy.Min(extents[x] - 1, n - 1 - c0) - sympy.Max(0, -c0) + 1
        narrowed[x] = values - sympy.Min(0, values)
        return True
    if len(letters) != 2 or any(narrowed[x] != extents[x] for x in letters):
        return False
    c0 = relation.offset
    if sorted(relation.coefficients, key=str) == [-1, 1]:
        x, y = letters if relation.coefficients[0] == 1 else letters[::-1]
    elif list(relation.coefficients) == [1, 1] and letters[1] not in taken:
        (x, y), c0 = letters, c0 + extents[letters[1]] - 1
        reflected.add(y)
    else:
        return False
    dims = sorted((n - extents[x]).free_symbols, key=str)
    if c0 == 0 and sign(n - extents[x], dims) in (ZERO, POSITIVE, NONNEGATIVE):
        bounds.append(Bound(y, x, False))  # x - y >= 0; x - y <= ext(x) - 1 <= n - 1
        return True
    # x - y + c0 inside 0 .. n - 1: y <= x + c0 and x <= y + n - 1 - c0
    bounds += [Bound(y, x, offset=sympy.expand(c0)), Bound(x, y, offset=sympy.expand(n - 1 - c0))]
    return True
