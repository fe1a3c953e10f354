"""How many products of a term read inside a padded axis, beside those it counts.

A term that reads a padded tensor through an affine index (``X[b,c,p-k]``
with ``pad: [0, 0, [K - 1, 0]]``) is counted with every tuple of its
letters, the products with the padding's zeros included, as frameworks run
them.  :func:`padded_reads` gives that count and, where it is exact in
closed form, the count of the products that multiply a value inside the
axis: for an index of one letter ``x + c`` (the values of ``x`` that land
inside), for a difference ``x - y`` whose greatest value stays inside
(the tuples with ``y <= x``, counted like a where-clause), and for a sum
``x + y + c`` (a "same" convolution, ``i+u-1``: its two ends as bounds
between the letters, counted like a sliding window).  Other indices
get None: not derived, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import sympy

from ..core.domain import Bound
from ..core.errors import SymflopsError
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
    exact = True
    for f in e.operands:
        read = next((g for g in e.factors if f.is_shift and f.indices[0] in g.indices), None)
        tensor = _tensor(layer, read.tensor) if read is not None else None
        if tensor is None or tensor.padding(read.indices.index(f.indices[0])) == (0, 0):
            continue
        tensors.append(tensor.name)
        n = tensor.shape[read.indices.index(f.indices[0])]
        exact = exact and _restrict(f, n, narrowed, bounds, extents)
    if not tensors:
        return None
    inside = None
    if exact:
        try:
            inside = sympy.expand(size(letters, narrowed, bounds))
        except SymflopsError:  # a count piecewise in the dims: not derived, never guessed
            inside = None
    return PaddedReads(tuple(dict.fromkeys(tensors)), size(letters, extents, bounds_of(e)), inside)


def _tensor(layer: Layer, name: str) -> Tensor | None:
    return next((t for t in layer.tensors if t.name == name), None)


def _restrict(f: Factor, n: sympy.Expr, narrowed: dict[str, sympy.Expr], bounds: list[Bound],
              extents: Mapping[str, sympy.Expr]) -> bool:
    """Narrow ``narrowed`` or add to ``bounds`` so that they count only the
    tuples whose index ``f`` lands inside ``0 .. n - 1``; False when that is
    not one of the forms this module counts exactly."""
    relation, letters = f.affine, f.indices[1:]
    taken = {x for b in bounds for x in b.letters}
    if len(letters) == 1 and relation.coefficients[0] == 1 and letters[0] not in taken \
            and narrowed[letters[0]] == extents[letters[0]]:
        (x,), c0 = letters, relation.offset
        # x + c0 inside 0 .. n - 1: x from max(0, -c0) to min(ext - 1, n - 1 - c0)
        narrowed[x] = sympy.Min(extents[x] - 1, n - 1 - c0) - sympy.Max(0, -c0) + 1
        return True
    if len(letters) == 2 and relation.coefficients == (1, 1) and not taken & set(letters) \
            and all(narrowed[x] == extents[x] for x in letters):
        # x + y + c0 inside 0 .. n - 1 (a "same" convolution, p+k-1 over [1, 1] zeros): with
        # y' = ext(y) - 1 - y, which runs over y's range, y' <= x + ext(y) - 1 + c0 and
        # x <= y' + n - ext(y) - c0, bounds the domain counts exactly
        (x, y), c0 = letters, relation.offset
        bounds += [Bound(y, x, False, extents[y] - 1 + c0), Bound(x, y, False, n - extents[y] - c0)]
        return True
    if len(letters) == 2 and relation.offset == 0 and sorted(relation.coefficients) == [-1, 1]:
        x, y = letters if relation.coefficients[0] == 1 else letters[::-1]
        dims = sorted((n - extents[x]).free_symbols, key=str)
        if sign(n - extents[x], dims) in (ZERO, POSITIVE, NONNEGATIVE):
            bounds.append(Bound(y, x, False))  # x - y >= 0; x - y <= ext(x) - 1 <= n - 1
            return True
    return False
