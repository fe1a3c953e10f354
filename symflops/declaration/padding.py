"""A tensor's ``pad:`` key: zeros around an axis that affine indices may read.

``X: {shape: [B, C, P], role: input, pad: [0, 0, [K - 1, 0]]}`` gives each
axis ``0`` (no padding) or ``[before, after]``, whole numbers or expressions
of dims, each proved at least 0.  An affine index of X still counts X's own
positions, and may now run from ``-before`` to ``P - 1 + after``: a position
outside ``0 .. P - 1`` reads zero (``X[b,c,p-k]``, a causal convolution;
``H[b,s-1,d]`` with ``[1, 0]``).  The bracket ``[q = p - k]`` with ``q`` over
X's axis is 0 there by itself, so only the range proof changes.  Nothing is
evaluated (expressions go through the whitelisting :mod:`symflops.lang.expr`).
"""

from __future__ import annotations

import sympy

from ..core.errors import SymflopsError
from ..core.sizes import NONNEGATIVE, POSITIVE, ZERO, sign
from ..lang.expr import parse_expression
from ..lang.yaml import Node, describe

#: No padding on any axis.
NO_PAD: tuple[tuple[sympy.Expr, sympy.Expr], ...] = ()

HINT = ("give one entry per axis: 0 for none, or [before, after] in positions, e.g. "
        "pad: [0, 0, [K - 1, 0]] for a causal convolution X[b,c,p-k]")


def read_pad(node: Node, symbols: dict[str, sympy.Symbol], tensor: str,
             rank: int) -> tuple[tuple[sympy.Expr, sympy.Expr], ...]:
    """The ``(before, after)`` padding of each of the ``rank`` axes."""
    if not isinstance(node.value, list) or len(node.value) != rank:
        raise SymflopsError(f"the pad of {tensor!r} must be a list of {rank} entries, one per "
                            f"axis, found {describe(node.value)}", node.span, HINT)
    pads = []
    for axis in node.value:
        sides = axis.value if isinstance(axis.value, list) else None
        if axis.value == 0 and not isinstance(axis.value, bool):
            pads.append((sympy.Integer(0), sympy.Integer(0)))
            continue
        if sides is None or len(sides) != 2:
            raise SymflopsError(f"a pad entry of {tensor!r} is 0 or [before, after], found "
                                f"{describe(axis.value)}", axis.span, HINT)
        pads.append(tuple(_side(side, symbols, tensor) for side in sides))
    return tuple(pads)


def _side(node: Node, symbols: dict[str, sympy.Symbol], tensor: str) -> sympy.Expr:
    if isinstance(node.value, bool) or not isinstance(node.value, (int, str)):
        raise SymflopsError(f"a padding of {tensor!r} must be a number of positions, found "
                            f"{describe(node.value)}", node.span, HINT)
    value = (sympy.Integer(node.value) if isinstance(node.value, int)
             else parse_expression(node.value, symbols, span=node.span))
    if not value.is_polynomial(*value.free_symbols) or sign(
            value, sorted(value.free_symbols, key=str)) not in (ZERO, POSITIVE, NONNEGATIVE):
        raise SymflopsError(f"a padding of {tensor!r} is {sympy.sstr(value)}, which is not "
                            "proved at least 0 for every value of the dims", node.span, HINT)
    if not all(c.is_Integer for c in sympy.Poly(value, *value.free_symbols).coeffs()) \
            if value.free_symbols else not value.is_Integer:
        raise SymflopsError(f"a padding of {tensor!r} is {sympy.sstr(value)}, not a whole "
                            "number of positions", node.span, HINT)
    return sympy.expand(value)
